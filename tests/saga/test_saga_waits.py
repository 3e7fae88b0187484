"""Waits, timers and signals as steps (saga.WaitFor, saga.Sleep, orch.signal), a run's deadline
(Saga(timeout=)), and the size limits of inputs, results and signal data.

Everything runs on virtual time: a wait of a day costs nothing, and every due time is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import seawall
from seawall import saga
from seawall.cli import main

START = 1_700_000_000.0

FAST = seawall.RetryPolicy(
    max_attempts=10,
    backoff=seawall.Backoff.constant(40.0),
    rng=random.Random(1),
    hooks=(),
)


class Book:
    """What the steps saw and did, by step."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def step(self, name: str, value: Any = None) -> saga.Step:
        def action(ctx: saga.StepContext) -> Any:
            self.calls.append(name)
            self.seen[name] = dict(ctx.results)
            return value if value is not None else {name: True}

        def undo(ctx: saga.StepContext) -> None:
            self.calls.append(f"undo {name}")

        return saga.Step(name, action, compensate=undo)


def orchestrator(
    url: str, sagas: list[saga.Saga], clock: seawall.VirtualClock | None = None, **kw: Any
) -> saga.Orchestrator:
    return saga.Orchestrator(
        url, sagas, clock=clock or seawall.VirtualClock(start=START), hooks=(), **kw
    )


def row(orch: saga.Orchestrator, run_id: str) -> Any:
    loaded = orch.store.load(run_id)
    assert loaded is not None
    return loaded.run


# -- WaitFor and signal -----------------------------------------------------------------------


def test_a_wait_parks_the_run_until_its_signal_whose_data_the_next_step_reads(
    store_url: str,
) -> None:
    book = Book()
    order = saga.Saga(
        "order",
        [
            book.step("reserve"),
            saga.WaitFor("payment-confirmed", timeout=86400.0),
            book.step("ship"),
        ],
    )
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order], clock) as orch:
        run_id = orch.start("order", {"id": 1})
        assert orch.run_due() == 1  # reserve; the wait runs no function
        run = orch.get(run_id)
        assert run.status is saga.Status.WAITING
        wait = run.step("payment-confirmed")
        assert wait.status is saga.Status.WAITING
        assert wait.next_retry_at is not None
        assert wait.next_retry_at.timestamp() == pytest.approx(START + 86400.0)
        held = row(orch, run_id)
        assert held.lease_owner is None  # no worker holds a waiting run
        assert held.due_at == pytest.approx(START + 86400.0)
        clock.sleep(3600.0)
        assert orch.run_due() == 0  # nothing is due until the signal or the timeout
        assert orch.signal(run_id, "payment-confirmed", {"tx": "T-9"}) is True
        assert row(orch, run_id).due_at == pytest.approx(START + 3600.0)  # due at once
        assert orch.run_due() == 1  # ship
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("payment-confirmed").result == {"tx": "T-9"}
        assert book.seen["ship"]["payment-confirmed"] == {"tx": "T-9"}
        events = [(h.event, h.step) for h in orch.history(run_id)]
        assert ("wait", "payment-confirmed") in events
        assert ("signal", "payment-confirmed") in events
        assert ("success", "payment-confirmed") in events


def test_a_signal_sent_before_the_wait_began_is_kept_and_ends_it_at_once(
    store_url: str,
) -> None:
    book = Book()
    state = {"fail": 1}

    def flaky(ctx: saga.StepContext) -> dict[str, int]:
        if state["fail"]:
            state["fail"] -= 1
            raise ConnectionError("reset")
        return {"ok": 1}

    order = saga.Saga(
        "order",
        [
            saga.Step("reserve", flaky, policy=FAST),
            saga.WaitFor("paid", timeout=60.0),
            book.step("ship"),
        ],
    )
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order], clock) as orch:
        run_id = orch.start("order")
        assert orch.signal(run_id, "paid", {"early": True}) is True  # before anything ran
        orch.run_due()
        assert orch.get(run_id).status is saga.Status.RETRYING  # reserve waits 40 s
        clock.sleep(41.0)
        orch.run_due()
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED  # the wait took the kept signal at once
        assert book.seen["ship"]["paid"] == {"early": True}


def test_hooks_hear_once_that_a_run_waits(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[saga.SagaEvent] = []
    order = saga.Saga("order", [saga.Sleep(10.0), saga.WaitFor("paid", timeout=60.0)])
    clock = seawall.VirtualClock(start=START)
    with saga.Orchestrator(
        sqlite_url, [order], clock=clock, hooks=[events.append, saga.logging_hook]
    ) as orch:
        run_id = orch.start("order")
        with caplog.at_level("INFO", logger="seawall.saga"):
            orch.run_due()
            orch.retry_now(run_id)  # a claim that finds the run still waiting: no news
            orch.run_due()
            clock.sleep(10.0)
            orch.run_due()
        waits = [(e.status, e.reason) for e in events if e.kind == "run"]
        assert waits == [
            (saga.Status.RUNNING, None),
            (saga.Status.WAITING, "sleeps at 'sleep' until 2023-11-14 22:13:30+00:00"),
            (
                saga.Status.WAITING,
                "waits for the signal 'paid' until 2023-11-14 22:14:30+00:00",
            ),
        ]
        assert f"run {run_id}: WAITING (waits for the signal 'paid'" in caplog.text


def test_a_duplicate_signal_is_a_no_op_and_the_first_is_kept(store_url: str) -> None:
    book = Book()
    order = saga.Saga("order", [saga.WaitFor("paid"), book.step("ship")])
    with orchestrator(store_url, [order]) as orch:
        run_id = orch.start("order")
        assert orch.signal(run_id, "paid", {"n": 1}) is True
        assert orch.signal(run_id, "paid", {"n": 2}) is False
        orch.run_due()
        assert orch.get(run_id).status is saga.Status.SUCCEEDED
        assert book.seen["ship"]["paid"] == {"n": 1}
        signals = [h for h in orch.history(run_id) if h.event == "signal"]
        assert [dict(h.detail).get("duplicate", False) for h in signals] == [False, True]


def test_signals_for_unknown_runs_finished_runs_and_unknown_waits_are_refused(
    store_url: str,
) -> None:
    book = Book()
    order = saga.Saga("order", [book.step("reserve"), saga.WaitFor("paid", timeout=10.0)])
    other = saga.Saga("other", [book.step("only")])
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order, other], clock) as orch:
        with pytest.raises(KeyError, match="no run 'nope'"):
            orch.signal("nope", "paid")
        run_id = orch.start("order")
        with pytest.raises(ValueError, match=r"no saga.WaitFor\('ship'\)"):
            orch.signal(run_id, "ship")
        with pytest.raises(ValueError, match=r"no saga.WaitFor\('reserve'\)"):
            orch.signal(run_id, "reserve")  # a step, but not a wait
        with pytest.raises(TypeError, match="name"):
            orch.signal(run_id, 3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="name"):
            orch.signal(run_id, "pa\nid")
        with pytest.raises(TypeError, match="is a set"):
            orch.signal(run_id, "paid", {1, 2})
        orch.run_due()
        clock.sleep(11.0)
        orch.run_due()  # the wait timed out: compensated
        assert orch.get(run_id).status is saga.Status.COMPENSATED
        with pytest.raises(ValueError, match="is COMPENSATED: it is over"):
            orch.signal(run_id, "paid")
        done = orch.start("other")
        orch.run_due()
        with pytest.raises(ValueError, match="is SUCCEEDED: it is over"):
            orch.signal(done, "only")
        signals = [h for h in orch.history(run_id) if h.event == "signal"]
        assert signals == []  # nothing refused was written


def test_a_wait_that_times_out_fails_its_step_and_compensates_the_earlier_ones(
    store_url: str,
) -> None:
    book = Book()
    order = saga.Saga(
        "order", [book.step("reserve"), saga.WaitFor("paid", timeout=300.0), book.step("ship")]
    )
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order], clock) as orch:
        run_id = orch.start("order")
        run = orch.run_until_settled(run_id)
        assert run.status is saga.Status.COMPENSATED
        assert clock.now() == pytest.approx(START + 300.0)
        wait = run.step("paid")
        assert wait.status is saga.Status.FAILED
        assert wait.last_error == "TimeoutError: no signal 'paid' within 300 s"
        assert run.reason is not None and "gave up (timeout)" in run.reason
        assert book.calls == ["reserve", "undo reserve"]


def test_a_parked_wait_takes_a_late_signal_after_an_operators_retry(store_url: str) -> None:
    book = Book()
    order = saga.Saga(
        "order",
        [
            book.step("reserve"),
            saga.WaitFor("paid", timeout=60.0, on_exhausted="park"),
            book.step("ship"),
        ],
    )
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order], clock) as orch:
        run_id = orch.start("order")
        assert orch.run_until_settled(run_id).status is saga.Status.NEEDS_ATTENTION
        assert book.calls == ["reserve"]  # parked, not compensated
        assert orch.signal(run_id, "paid", {"late": True}) is True  # kept for the person
        orch.retry_now(run_id)
        orch.run_due()
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert book.seen["ship"]["paid"] == {"late": True}


def test_a_wait_keeps_the_timeout_it_began_with_across_a_deploy(store_url: str) -> None:
    clock = seawall.VirtualClock(start=START)
    before = saga.Saga("s", [saga.WaitFor("go", timeout=60.0)])
    with orchestrator(store_url, [before], clock) as a:
        run_id = a.start("s")
        a.run_due()
    clock.sleep(61.0)
    after = saga.Saga("s", [saga.WaitFor("go")])  # the new deploy waits without a timeout
    with orchestrator(store_url, [after], clock) as b:
        run = b.run_until_settled(run_id)
        assert run.status is saga.Status.COMPENSATED  # the wait that began keeps its own
        assert run.step("go").last_error == "TimeoutError: no signal 'go' within 60 s"


def test_compensating_or_cancelling_a_waiting_run_ends_its_wait(store_url: str) -> None:
    book = Book()
    order = saga.Saga("order", [book.step("reserve"), saga.WaitFor("paid")])
    with orchestrator(store_url, [order]) as orch:
        a, b = orch.start("order"), orch.start("order")
        orch.run_due()
        assert orch.get(a).status is saga.Status.WAITING
        assert row(orch, a).due_at is None  # no timeout, no deadline: only a signal wakes it
        # On virtual time nothing but a signal would move it: returned as it is, not spun on.
        assert orch.run_until_settled(a).status is saga.Status.WAITING
        assert orch.clock.now() == START
        orch.retry_now(a)  # does not end the wait
        orch.run_due()
        assert orch.get(a).step("paid").status is saga.Status.WAITING
        assert row(orch, a).due_at is None
        orch.compensate(a)
        orch.run_due()
        run = orch.get(a)
        assert run.status is saga.Status.COMPENSATED
        assert run.step("paid").status is saga.Status.FAILED
        assert orch.cancel(b).step("paid").status is saga.Status.FAILED


@pytest.mark.parametrize("store", ["postgresql"])
def test_a_signal_that_arrives_as_the_worker_decides_to_wait_wakes_the_run(
    store: str, pg_url: str
) -> None:
    """PostgreSQL: a signal sent while a worker's commit decides that its run waits (the
    worker looked for the signal, and found none) waits for that commit, which holds the run's
    row, and then finds the run released and waiting: it makes it due. (Without the row lock, a
    signal committed between the look and the release would be left to a holder that no longer
    looks, and the run would wait for good.)"""
    import threading

    book = Book()
    order = saga.Saga("order", [book.step("reserve"), saga.WaitFor("paid"), book.step("ship")])
    clock = seawall.VirtualClock(start=START)
    with orchestrator(pg_url, [order], clock) as orch, orchestrator(pg_url, [order], clock) as peer:
        run_id = orch.start("order")
        transitions = orch._worker._transitions
        look = transitions.signal_data
        sent: list[bool] = []
        sender = threading.Thread(
            target=lambda: sent.append(peer.signal(run_id, "paid", {"raced": True}))
        )
        watcher = peer.store.clone()

        def racing(run: str, name: str) -> str | None:
            found = look(run, name)  # nothing yet ...
            assert found is None
            sender.start()  # ... then the signal is sent, and waits for this commit
            limit = time.monotonic() + 60.0
            while sender.is_alive() and time.monotonic() < limit:
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.01)
            transitions.signal_data = look
            return found

        transitions.signal_data = racing
        orch.run_due()
        sender.join(60.0)
        watcher.close()
        assert sent == [True]
        assert transitions.signal_data is look  # the race ran
        orch.run_due()  # (it may have run already)
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert book.seen["ship"]["paid"] == {"raced": True}


@contextlib.contextmanager
def store_held(url: str) -> Iterator[Callable[[], None]]:
    """Another session holds the store (SQLite's write lock; PostgreSQL's runs table) until the
    function yielded is called: a signal's transaction waits for it."""
    conn: Any
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        conn = psycopg.connect(url)
        conn.execute("LOCK TABLE seawall_saga_runs IN ACCESS EXCLUSIVE MODE")
    done = threading.Lock()

    def release() -> None:
        if done.acquire(blocking=False):  # once, whoever calls first
            conn.rollback()

    try:
        yield release
    finally:
        release()
        conn.close()


async def test_asignal_sends_from_an_event_loop_without_blocking_it(store_url: str) -> None:
    order = saga.Saga("order", [saga.WaitFor("paid", timeout=600.0), Book().step("ship")])
    with orchestrator(store_url, [order]) as orch:
        run_id = orch.start("order", {})
        assert orch.run_due() == 0  # the wait runs no function
        assert orch.get(run_id).status is saga.Status.WAITING
        released_by: list[str] = []
        with store_held(store_url) as release:
            # If asignal blocked the loop, only this timer (not the task) could free the store.
            guard = threading.Timer(60.0, lambda: (released_by.append("timer"), release()))
            guard.start()
            sending = asyncio.ensure_future(orch.asignal(run_id, "paid", {"tx": "T-1"}))
            for _ in range(5):
                await asyncio.sleep(0)  # the loop runs other tasks while the store is busy
            assert not sending.done()
            released_by.append("loop")
            release()
            assert await sending is True
            guard.cancel()
        assert released_by == ["loop"]
        assert await orch.asignal(run_id, "paid", {"tx": "T-2"}) is False  # a duplicate
        assert orch.run_due() == 1
        run = orch.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("paid").result == {"tx": "T-1"}


async def test_asignal_calls_from_many_tasks_at_once_each_count_once(store_url: str) -> None:
    order = saga.Saga("order", [saga.WaitFor("paid", timeout=600.0)])
    with orchestrator(store_url, [order]) as orch:
        runs = [orch.start("order", {}, run_id=f"r{i}") for i in range(8)]
        orch.run_due()
        # Every run signalled three times at once: one signal kept per run, two duplicates.
        sent = await asyncio.gather(
            *(orch.asignal(r, "paid", {"n": k}) for k in range(3) for r in runs)
        )
        assert sum(sent) == len(runs)
        orch.run_due()
        assert {orch.get(r).status for r in runs} == {saga.Status.SUCCEEDED}
        # Its errors are signal's, raised in the awaiting task.
        with pytest.raises(KeyError):
            await orch.asignal("nope", "paid")
        with pytest.raises(ValueError, match="is over"):
            await orch.asignal(runs[0], "paid")
        with pytest.raises(TypeError, match="name"):
            await orch.asignal(runs[0], 3)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="closed"):
        await orch.asignal(runs[0], "paid")


# -- Sleep ------------------------------------------------------------------------------------


def test_a_sleep_is_a_due_time_in_the_log_and_holds_no_worker(store_url: str) -> None:
    book = Book()
    slow = saga.Saga("slow", [saga.Sleep(3600.0), book.step("after")])
    quick = saga.Saga("quick", [book.step("one"), book.step("two")])
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [slow, quick], clock, concurrency=1) as orch:
        sleeper = orch.start("slow")
        orch.run_due()
        held = row(orch, sleeper)
        assert held.status == "WAITING" and held.lease_owner is None
        assert held.due_at == pytest.approx(START + 3600.0)
        # Other runs proceed meanwhile, on the one slot.
        others = [orch.start("quick") for _ in range(3)]
        assert orch.run_due() == 6
        assert all(orch.get(r).status is saga.Status.SUCCEEDED for r in others)
        assert orch.get(sleeper).status is saga.Status.WAITING
        assert "after" not in book.calls
        clock.sleep(3599.0)
        assert orch.run_due() == 0
        clock.sleep(1.0)
        assert orch.run_due() == 1
        run = orch.get(sleeper)
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("sleep").status is saga.Status.SUCCEEDED
        assert run.step("sleep").result is None


def test_a_pending_signal_and_a_sleeping_run_survive_a_new_orchestrator(store_url: str) -> None:
    book = Book()

    def definition() -> saga.Saga:
        return saga.Saga(
            "order",
            [
                book.step("reserve"),
                saga.Sleep(60.0, name="cool-off"),
                saga.WaitFor("go", timeout=600.0),
                book.step("ship"),
            ],
        )

    clock = seawall.VirtualClock(start=START)
    orch = orchestrator(store_url, [definition()], clock)
    run_id = orch.start("order")
    orch.run_due()
    assert orch.get(run_id).step("cool-off").status is saga.Status.WAITING
    assert orch.signal(run_id, "go", {"n": 7}) is True  # before its wait began
    orch.close()  # the process goes away; the store keeps the timer and the signal
    clock.sleep(30.0)
    with orchestrator(store_url, [definition()], clock) as again:
        assert again.run_due() == 0  # the timer is not reset, nor run early
        clock.sleep(30.0)
        assert again.run_due() == 1
        run = again.get(run_id)
        assert run.status is saga.Status.SUCCEEDED
        assert book.seen["ship"]["go"] == {"n": 7}
        assert run.step("cool-off").finished_at is not None
        assert run.step("cool-off").finished_at.timestamp() == pytest.approx(START + 60.0)


CRASHING_WORKER = """
import os, signal, sys
import seawall
from seawall import saga

url, start = sys.argv[1], float(sys.argv[2])
order = saga.Saga("order", [
    saga.Step("reserve", lambda ctx: "R-1"),
    saga.Sleep(60.0, name="cool-off"),
    saga.WaitFor("go", timeout=600.0),
    saga.Step("ship", lambda ctx: {"shipped": ctx.results["go"]}),
])
orch = saga.Orchestrator(url, [order], clock=seawall.VirtualClock(start=start), hooks=())
run_id = orch.start("order", run_id="crashed")
orch.run_due()
assert orch.get(run_id).status is saga.Status.WAITING
assert orch.signal(run_id, "go", {"n": 7})
sys.stdout.write("ready\\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)  # no close, no clean-up
"""


def test_a_pending_signal_and_a_timer_survive_a_killed_worker(store_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_WORKER, store_url, str(START)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.stdout == "ready\n", done.stderr
    assert done.returncode == -signal.SIGKILL
    order = saga.Saga(
        "order",
        [
            saga.Step("reserve", lambda ctx: "R-1"),
            saga.Sleep(60.0, name="cool-off"),
            saga.WaitFor("go", timeout=600.0),
            saga.Step("ship", lambda ctx: {"shipped": ctx.results["go"]}),
        ],
    )
    clock = seawall.VirtualClock(start=START + 59.0)
    with orchestrator(store_url, [order], clock) as orch:
        assert orch.run_due() == 0  # the timer holds: not reset, not cut short
        clock.sleep(1.0)
        assert orch.run_due() == 1
        run = orch.get("crashed")
        assert run.status is saga.Status.SUCCEEDED
        assert run.step("ship").result == {"shipped": {"n": 7}}


@pytest.mark.parametrize("concurrency", [1, 4])
def test_workers_take_waiting_runs_on_time(store_url: str, concurrency: int) -> None:
    """Two orchestrators on one store: leases, due times and signals, one attempt at a time or
    several."""
    book = Book()
    order = saga.Saga(
        "order",
        [saga.Sleep(5.0), saga.WaitFor("go", timeout=100.0), book.step("ship")],
    )
    clock = seawall.VirtualClock(start=START)
    with (
        orchestrator(store_url, [order], clock, concurrency=concurrency) as a,
        orchestrator(store_url, [order], clock, concurrency=concurrency) as b,
    ):
        ids = [a.start("order") for _ in range(4)]
        for run_id in ids[:2]:
            b.signal(run_id, "go", {"id": run_id})
        a.run_due()
        clock.sleep(5.0)
        b.run_due()
        assert [a.get(r).status for r in ids] == [saga.Status.SUCCEEDED] * 2 + [
            saga.Status.WAITING
        ] * 2
        b.signal(ids[2], "go")
        a.run_due()
        clock.sleep(100.0)
        b.run_due()
        assert [a.get(r).status for r in ids] == [saga.Status.SUCCEEDED] * 3 + [
            saga.Status.COMPENSATED
        ]


# -- A run's deadline -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), 1e12])
def test_a_bad_run_timeout_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ValueError, match="timeout"):
        saga.Saga("s", [saga.Step("a", lambda ctx: None)], timeout=bad)
    with pytest.raises(ValueError, match="timeout"):
        saga.WaitFor("x", timeout=bad)


@pytest.mark.parametrize("bad", ["10", True, [1]])
def test_a_run_timeout_of_another_type_is_refused_naming_it(bad: Any) -> None:
    with pytest.raises(TypeError, match="timeout"):
        saga.Saga("s", [saga.Step("a", lambda ctx: None)], timeout=bad)


def test_bad_sleeps_and_waits_are_refused_naming_the_parameter() -> None:
    with pytest.raises(ValueError, match="seconds"):
        saga.Sleep(-1.0)
    with pytest.raises(ValueError, match="seconds"):
        saga.Sleep(float("inf"))
    with pytest.raises(ValueError, match="name"):
        saga.WaitFor("")
    with pytest.raises(ValueError, match="signal must be at most 200"):
        saga.WaitFor("x" * 201)
    with pytest.raises(ValueError, match="on_exhausted"):
        saga.WaitFor("x", on_exhausted="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duplicate step name 'sleep'"):
        saga.Saga("s", [saga.Sleep(1.0), saga.Sleep(2.0)])


def test_a_retry_due_past_the_run_deadline_is_not_scheduled(store_url: str) -> None:
    book = Book()
    tries: list[float] = []
    clock = seawall.VirtualClock(start=START)

    def down(ctx: saga.StepContext) -> None:
        tries.append(clock.now() - START)
        raise ConnectionError("down")

    order = saga.Saga(
        "order",
        [book.step("reserve"), saga.Step("charge", down, policy=FAST, on_exhausted="park")],
        timeout=100.0,
    )
    with orchestrator(store_url, [order], clock) as orch:
        run_id = orch.start("order")
        assert orch.get(run_id).deadline is not None
        assert orch.get(run_id).deadline.timestamp() == pytest.approx(START + 100.0)
        run = orch.run_until_settled(run_id)
        # Tries at 0, 40 and 80 s; the next would be at 120 s, past the deadline.
        assert tries == pytest.approx([0.0, 40.0, 80.0])
        assert clock.now() == pytest.approx(START + 80.0)
        assert run.status is saga.Status.COMPENSATED  # the deadline compensates, even "park"
        assert run.step("charge").status is saga.Status.FAILED
        assert run.reason is not None and "run_deadline" in run.reason
        assert book.calls == ["reserve", "undo reserve"]


def test_the_run_deadline_caps_a_wait_and_survives_a_restart(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    book = Book()

    def definition() -> saga.Saga:
        return saga.Saga(
            "order",
            [book.step("reserve"), saga.WaitFor("paid", timeout=86400.0), book.step("ship")],
            timeout=600.0,
        )

    clock = seawall.VirtualClock(start=START)
    orch = orchestrator(store_url, [definition()], clock)
    run_id = orch.start("order")
    orch.run_due()
    wait = orch.get(run_id).step("paid")
    assert wait.next_retry_at is not None
    assert wait.next_retry_at.timestamp() == pytest.approx(START + 600.0)
    orch.close()
    assert main(["saga", "show", "--store", store_url, run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deadline"] == "2023-11-14T22:23:20.000Z"
    assert main(["saga", "show", "--store", store_url, run_id]) == 0
    assert "deadline: 2023-11-14T22:23:20.000Z" in capsys.readouterr().out
    with orchestrator(store_url, [definition()], clock) as again:
        run = again.run_until_settled(run_id)
        assert clock.now() == pytest.approx(START + 600.0)
        assert run.status is saga.Status.COMPENSATED
        assert run.step("paid").last_error is not None
        assert "DeadlineExceeded" in run.step("paid").last_error
        assert book.calls == ["reserve", "undo reserve"]


def test_a_sleep_past_the_run_deadline_fails_at_once(store_url: str) -> None:
    book = Book()
    order = saga.Saga(
        "order", [book.step("reserve"), saga.Sleep(500.0), book.step("ship")], timeout=100.0
    )
    clock = seawall.VirtualClock(start=START)
    with orchestrator(store_url, [order], clock) as orch:
        run = orch.run_until_settled(orch.start("order"))
        assert clock.now() == START
        assert run.status is saga.Status.COMPENSATED
        assert run.step("sleep").status is saga.Status.FAILED
        assert book.calls == ["reserve", "undo reserve"]


def test_no_attempt_begins_past_the_deadline_and_the_attempt_sees_it(store_url: str) -> None:
    seen: list[float] = []
    clock = seawall.VirtualClock(start=START)

    def slow(ctx: saga.StepContext) -> None:
        seen.append(seawall.remaining())
        clock.sleep(50.0)  # the step takes its time (virtual)

    order = saga.Saga(
        "order",
        [saga.Step("a", slow), saga.Step("b", slow), saga.Step("c", slow)],
        timeout=70.0,
    )
    with orchestrator(store_url, [order], clock) as orch:
        run = orch.run_until_settled(orch.start("order"))
        # a runs 0-50 s; b begins at 50 s with 20 s left and is cut by the deadline.
        assert seen == pytest.approx([70.0, 20.0])
        assert run.status is saga.Status.COMPENSATED
        assert run.step("c").attempt_count == 0


# -- Size limits ------------------------------------------------------------------------------


def deep(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize("bad", [0, -1, 63, 2**31, True, "1000", 1.5])
def test_a_bad_max_payload_bytes_is_refused_naming_it(bad: Any, sqlite_url: str) -> None:
    with pytest.raises((ValueError, TypeError), match="max_payload_bytes"):
        saga.Orchestrator(
            sqlite_url, [saga.Saga("s", [saga.Step("a", lambda c: None)])], max_payload_bytes=bad
        )


def test_inputs_and_signal_data_over_the_limits_are_refused(store_url: str) -> None:
    order = saga.Saga("order", [saga.WaitFor("paid")])
    with orchestrator(store_url, [order], max_payload_bytes=1000) as orch:
        with pytest.raises(
            ValueError, match=r"input is 1\d\d\d bytes of JSON, over the limit of 1000"
        ):
            orch.start("order", {"blob": "x" * 1000})
        with pytest.raises(ValueError, match=f"nested deeper than the limit of {saga.MAX_DEPTH}"):
            orch.start("order", deep(saga.MAX_DEPTH + 1))
        assert sum(orch.counts().values()) == 0  # nothing was written
        run_id = orch.start("order", deep(saga.MAX_DEPTH - 1))  # at the limit: accepted
        with pytest.raises(ValueError, match="over the limit of 1000 bytes"):
            orch.signal(run_id, "paid", "y" * 2000)
        with pytest.raises(ValueError, match="nested deeper"):
            orch.signal(run_id, "paid", deep(5000))
        assert orch.signal(run_id, "paid", "y" * 100) is True  # the refused ones were not kept
    with orchestrator(store_url, [order]) as orch:  # the default: 1 MiB
        assert saga.MAX_PAYLOAD_BYTES == 1 << 20
        orch.start("order", "x" * (saga.MAX_PAYLOAD_BYTES - 2))
        with pytest.raises(ValueError, match=f"over the limit of {1 << 20} bytes"):
            orch.start("order", "x" * (saga.MAX_PAYLOAD_BYTES - 1))


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ("x" * 5000, r"is 5002 bytes of JSON, over the limit of 4096 bytes"),
        (deep(3000), "nested deeper than the limit of 100"),
    ],
    ids=["large", "deep"],
)
def test_a_result_over_the_limits_is_a_permanent_failure_of_its_step(
    store_url: str, result: Any, message: str
) -> None:
    book = Book()
    order = saga.Saga(
        "order",
        [book.step("reserve"), saga.Step("big", lambda ctx: result, policy=FAST)],
    )
    with orchestrator(store_url, [order], max_payload_bytes=4096) as orch:
        run = orch.run_until_settled(orch.start("order"))
        big = run.step("big")
        assert run.status is saga.Status.COMPENSATED  # not parked as unreadable
        assert big.status is saga.Status.FAILED
        assert big.attempt_count == 1  # never retried
        assert big.last_error is not None
        assert "the result of step 'big'" in big.last_error
        assert re.search(message, big.last_error)
        assert "cannot be read" not in (run.reason or "")
        assert book.calls == ["reserve", "undo reserve"]


# -- The command ------------------------------------------------------------------------------


def test_the_signal_command_sends_a_signal_and_reports_a_duplicate(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    book = Book()
    order = saga.Saga("order", [saga.WaitFor("paid"), book.step("ship")])
    with orchestrator(store_url, [order]) as orch:
        run_id = orch.start("order", run_id="r-1")
        orch.run_due()
        capsys.readouterr()
        argv = ["saga", "signal", "--store", store_url, run_id, "paid", "--data", '{"tx": 9}']
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "signal 'paid': kept" in out
        assert "WAITING" in out
        assert main([*argv[:-1], '{"tx": 10}', "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["signal"] == {"name": "paid", "kept": False}
        # The command reads the store's own clock (the system's): catch the virtual one up.
        orch.clock.sleep(time.time() - START + 1.0)
        orch.run_due()
        assert book.seen["ship"]["paid"] == {"tx": 9}
        assert main(["saga", "signal", "--store", store_url, "nope", "paid"]) == 1
        assert "no run 'nope'" in capsys.readouterr().err
        with pytest.raises(SystemExit) as info:
            main(["saga", "signal", "--store", store_url, run_id, "paid", "--data", "{x"])
        assert info.value.code == 2
        assert "--data is not JSON" in capsys.readouterr().err
        with pytest.raises(SystemExit) as info:
            main(["saga", "signal", "--store", store_url, run_id, "paid"])
        assert info.value.code == 2
        assert "is SUCCEEDED: it is over" in capsys.readouterr().err


# -- The schema -------------------------------------------------------------------------------


def test_a_store_of_schema_2_is_migrated_and_its_runs_go_on(store_url: str) -> None:
    book = Book()
    order = saga.Saga("order", [book.step("reserve"), book.step("ship")])
    plain = saga.Orchestrator(store_url, [order], clock=seawall.VirtualClock(start=START), hooks=())
    run_id = plain.start("order")
    store = plain.store
    with store.transaction():  # back to schema 2, as the previous version wrote it
        store.execute("DROP TABLE seawall_saga_signals")
        store.execute("ALTER TABLE seawall_saga_runs DROP COLUMN deadline")
        store.execute("UPDATE seawall_saga_schema SET version = 2")
    plain.close()
    waiting = saga.Saga(
        "order", [book.step("reserve"), saga.WaitFor("paid"), book.step("ship")], version=2
    )
    with orchestrator(store_url, [order, waiting]) as orch:
        rows = orch.store.execute("SELECT MAX(version) FROM seawall_saga_schema").fetchall()
        assert rows[0][0] == saga.SCHEMA_VERSION == 3
        assert orch.get(run_id).deadline is None
        orch.run_due()
        assert orch.get(run_id).status is saga.Status.SUCCEEDED  # the old run, on version 1
        new = orch.start("order")
        orch.run_due()
        assert orch.signal(new, "paid", 1) is True
        orch.run_due()
        assert orch.get(new).status is saga.Status.SUCCEEDED


def test_a_step_turned_into_a_wait_is_another_definition() -> None:
    plain = saga.Saga("s", [saga.Step("paid", lambda ctx: None)])
    waiting = saga.Saga("s", [saga.WaitFor("paid")])
    assert plain.fingerprint != waiting.fingerprint
    # A saga of plain steps keeps the digest it had before waits existed.
    assert plain.fingerprint == saga._model.fingerprint("s", 1, ["paid"])


# -- Random schedules -------------------------------------------------------------------------


#: Seeds of a default run (``SEAWALL_SAGA_WAIT_SCHEDULES`` raises it).
SCHEDULES = int(os.environ.get("SEAWALL_SAGA_WAIT_SCHEDULES", "8"))


@pytest.mark.parametrize("seed", range(SCHEDULES))
def test_random_schedules_of_signals_timers_and_deadlines_keep_the_rules(
    sqlite_url: str, seed: int
) -> None:
    """Two workers, restarts, early, late and duplicate signals, sleeps and deadlines, drawn
    from a seed. After every operation: a WAITING run is held by no worker; no attempt began
    at or past its run's deadline; a step after a wait saw the first signal sent."""
    rng = random.Random(seed)
    clock = seawall.VirtualClock(start=START)
    began: list[tuple[str, str, float]] = []  # run, step, when
    seen: dict[str, Any] = {}

    def action(name: str) -> Any:
        def run(ctx: saga.StepContext) -> Any:
            began.append((ctx.run_id, name, clock.now()))
            if name == "ship":
                seen[ctx.run_id] = ctx.results["go"]
            if name != "undo" and rng.random() < 0.2:  # compensations do not give up here
                raise ConnectionError("flaky")
            return name

        return run

    policy = seawall.RetryPolicy(
        max_attempts=4, backoff=seawall.Backoff.constant(30.0), rng=rng, hooks=()
    )

    pause = rng.choice([0.0, 20.0, 90.0])
    wait = rng.choice([None, 60.0, 400.0])
    timeout = rng.choice([None, 300.0, 1000.0])

    def definition() -> saga.Saga:
        return saga.Saga(
            "flow",
            [
                saga.Step("prepare", action("prepare"), compensate=action("undo"), policy=policy),
                saga.Sleep(pause, name="pause"),
                saga.WaitFor("go", timeout=wait),
                saga.Step("ship", action("ship"), policy=policy),
            ],
            timeout=timeout,
        )

    workers = [orchestrator(sqlite_url, [definition()], clock) for _ in range(2)]
    first: dict[str, Any] = {}
    ids: list[str] = []
    try:
        for _ in range(40):
            op = rng.random()
            if op < 0.2 or not ids:
                ids.append(rng.choice(workers).start("flow", run_id=f"r{len(ids)}"))
            elif op < 0.45:
                run_id = rng.choice(ids)
                data = {"n": rng.randrange(1000)}
                try:
                    kept = rng.choice(workers).signal(run_id, "go", data)
                except ValueError:
                    assert workers[0].get(run_id).status.final or (
                        workers[0].get(run_id).step("go").status
                        in (saga.Status.FAILED, saga.Status.COMPENSATED)
                    )
                else:
                    assert kept is (run_id not in first)
                    first.setdefault(run_id, data)
            elif op < 0.75:
                rng.choice(workers).run_due()
            elif op < 0.9:
                clock.sleep(rng.choice([5.0, 30.0, 70.0, 200.0]))
            else:
                k = rng.randrange(2)
                workers[k].close()  # a restart: a new orchestrator on the same store
                workers[k] = orchestrator(sqlite_url, [definition()], clock)
            for run_id in ids:
                loaded = workers[0].store.load(run_id)
                assert loaded is not None
                if loaded.run.status == "WAITING":
                    assert loaded.run.lease_owner is None
        for _ in range(200):  # drain: time moves on until every run has settled or waits
            workers[0].run_due()
            if all(workers[0].get(r).status.final for r in ids):
                break
            for r in ids:  # a wait with no timeout and no deadline needs its signal
                if r not in first and workers[0].get(r).step("go").status is saga.Status.WAITING:
                    first[r] = {"n": -1}
                    workers[0].signal(r, "go", first[r])
            clock.sleep(100.0)
        for run_id in ids:
            run = workers[0].get(run_id)
            assert run.status.final, (run_id, run.status)
            if run.deadline is not None:
                late = [
                    (s, t)
                    for r, s, t in began
                    if r == run_id and s != "undo" and t >= run.deadline.timestamp()
                ]
                assert late == [], (run_id, late)
            if run_id in seen:
                assert seen[run_id] == first[run_id]
            if run.status is saga.Status.SUCCEEDED:
                assert run.step("go").result == first[run_id]
    finally:
        for w in workers:
            w.close()
