"""Round trips to PostgreSQL: a worker's transactions run in pipeline mode, and the writes of the
runs it holds locked go with the commit, fenced by a check the server makes.

The round trips are counted, not timed: each time psycopg waits for the server's answer (the
socket to become readable) on the worker's connection, however long the answer takes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from seawall import saga
from seawall.saga._rows import HistoryRow

psycopg = pytest.importorskip("psycopg")
from psycopg.waiting import Wait  # noqa: E402 - after the skip

from seawall.saga._postgres import PostgresStore  # noqa: E402 - after the skip


def _step(ctx: saga.StepContext) -> dict[str, Any]:
    return {"step": ctx.step}


FLOW = saga.Saga("trips", [saga.Step(name, _step) for name in ("a", "b", "c")])


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Waits for the server's answer, by connection (``id()``)."""
    counted: dict[int, int] = {}
    wait = psycopg.Connection.wait

    def counting(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        def watched() -> Iterator[Any]:
            try:
                ready = gen.send(None)
            except StopIteration as end:
                return end.value
            waiting = False
            while True:
                if ready == Wait.R and not waiting:
                    counted[id(self)] = counted.get(id(self), 0) + 1
                    waiting = True
                got = yield ready
                # psycopg wakes the generator every 0.1 s with nothing ready (Ready.NONE, 0)
                # while the answer is late: the same wait, not another round trip.
                if got:
                    waiting = False
                try:
                    ready = gen.send(got)
                except StopIteration as end:
                    return end.value

        return wait(self, watched(), *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "wait", counting)
    return counted


def test_a_worker_waits_for_a_few_round_trips_per_run(pg_url: str, waits: dict[int, int]) -> None:
    runs = 24
    with saga.Orchestrator(pg_url, [FLOW], hooks=()) as app:
        app.start_many("trips", [{"i": i} for i in range(runs)])
    with saga.Orchestrator(pg_url, [FLOW], concurrency=8, hooks=()) as worker:
        store = worker.store
        assert isinstance(store, PostgresStore)
        conn = id(store._conn)
        before = waits.get(conn, 0)
        assert worker.run_due() == 3 * runs
        trips = waits.get(conn, 0) - before
        assert store.counts() == {"SUCCEEDED": runs}
        for run in worker.runs(limit=runs):
            done = [h for h in worker.store.history(run.run_id) if h.event == "success"]
            assert [h.step for h in done] == ["a", "b", "c"]
    # Three attempts per run, each outcome written with the commit: 2 to 4 round trips per run,
    # as the attempts' ends interleave (13 when every statement waited for its answer).
    assert trips <= 5 * runs, f"{trips / runs:.1f} round trips per run"


def _claimed(store: PostgresStore) -> tuple[float, Any]:
    now, claimed = store.claim_due(1, ["trips"])
    assert len(claimed) == 1
    loaded = claimed[0]
    loaded.run.token += 1
    loaded.run.lease_owner = "w1"
    loaded.run.due_at = now + 30
    loaded.history.append(HistoryRow(run_id=loaded.run.run_id, at=now, event="marker"))
    return now, loaded


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStore]:
    """A PostgreSQL store holding one run, "r1", due now."""
    with saga.Orchestrator(pg_url, [FLOW], hooks=()) as app:
        app.start("trips", {}, run_id="r1")
    opened = PostgresStore(pg_url)
    try:
        yield opened
    finally:
        opened.close()


def test_a_write_that_finds_the_token_changed_aborts_the_whole_commit(store: PostgresStore) -> None:
    token = store.load("r1").run.token  # type: ignore[union-attr]
    with (
        pytest.raises(psycopg.Error, match="fenced write of a run matched 0 rows"),
        store.transaction(),
    ):
        _, loaded = _claimed(store)
        # The row changes behind the transaction's back (only a bug could do this while the
        # claim holds its lock): the write sent without waiting must not apply.
        store.execute(
            "UPDATE seawall_saga_runs SET lease_token = lease_token + 7 WHERE run_id = 'r1'"
        )
        assert store.save(loaded, token) is None  # sent; the server checks it
    after = store.load("r1")
    assert after is not None and after.run.token == token and after.run.lease_owner is None
    assert "marker" not in [h.event for h in store.history("r1")]
    # The connection goes on: the next transaction claims and writes the run.
    with store.transaction():
        _, loaded = _claimed(store)
        assert store.save(loaded, token) is None
    after = store.load("r1")
    assert after is not None and after.run.token == token + 1
    assert after.run.lease_owner == "w1"
    assert [h.event for h in store.history("r1")][-1] == "marker"


def test_a_claimed_run_whose_token_is_not_the_writers_is_lost_unwritten(
    store: PostgresStore,
) -> None:
    token = store.load("r1").run.token  # type: ignore[union-attr]
    with store.transaction():
        _, loaded = _claimed(store)
        assert store.save(loaded, token - 1) == "lost"
    after = store.load("r1")
    assert after is not None and after.run.token == token and after.run.lease_owner is None
    assert "marker" not in [h.event for h in store.history("r1")]


def test_an_operators_request_read_under_the_lock_comes_back_unwritten(
    store: PostgresStore,
) -> None:
    token = store.load("r1").run.token  # type: ignore[union-attr]
    store.execute("UPDATE seawall_saga_runs SET requested = 'cancel' WHERE run_id = 'r1'")
    with store.transaction():
        _, loaded = _claimed(store)
        requested, loaded.run.requested = loaded.run.requested, None
        assert requested == "cancel"
        assert store.save(loaded, token) == "cancel"
        assert loaded.run.requested == "cancel"
        loaded.history = []
        assert store.save(loaded, token) is None  # now with the request applied
    after = store.load("r1")
    assert after is not None and after.run.requested is None
    assert after.run.token == token + 1


def test_the_claim_and_the_commit_lock_read_the_stores_clock(pg_url: str) -> None:
    with saga.Orchestrator(pg_url, [FLOW], hooks=()) as app:
        app.start("trips", {}, run_id="r1")
        app.start("trips", {}, run_id="r2")
    store = PostgresStore(pg_url)
    try:
        store.execute("UPDATE seawall_saga_runs SET due_at = due_at + 3600 WHERE run_id = 'r2'")
        with store.transaction():
            first = store.now()
            now, claimed = store.claim_due(10, ["trips"])
            later, asked = store.lock_runs(["r1", "r2"])
            last = store.now()
        assert first <= now <= later <= last
        assert [c.run.run_id for c in claimed] == ["r1"]  # r2 is due in an hour
        assert asked == {}
        with store.transaction():
            now, claimed = store.claim_due(10, ["trips"], "r2")
        assert claimed == [] and now > 0
    finally:
        store.close()


def test_a_transaction_inside_another_keeps_the_outer_ones_answers(store: PostgresStore) -> None:
    token = store.load("r1").run.token  # type: ignore[union-attr]
    with store.transaction():
        with store.transaction():
            store.request("r1", "cancel")
        # The outer transaction still reads each answer: the row count decides the save.
        loaded = store.lock("r1")
        assert loaded is not None and loaded.run.requested == "cancel"
        loaded.run.reason = "seen"
        assert store.save(loaded, token) is None
    after = store.load("r1")
    assert after is not None and after.run.requested is None and after.run.reason == "seen"


def test_a_claim_skips_the_runs_another_claim_holds_without_waiting(pg_url: str) -> None:
    with saga.Orchestrator(pg_url, [FLOW], hooks=()) as app:
        app.start_many("trips", [{}, {}, {}], run_ids=["r1", "r2", "r3"])
    first, second = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        second.execute("SET lock_timeout = '5s'")  # a claim that waited would fail, not hang
        with first.transaction():
            _, mine = first.claim_due(2, ["trips"])
            held = sorted(c.run.run_id for c in mine)
            with second.transaction():
                _, theirs = second.claim_due(10, ["trips"])
                _, again = second.claim_due(10, ["trips"], held[0])
        assert len(held) == 2
        assert [c.run.run_id for c in theirs] == sorted({"r1", "r2", "r3"} - set(held))
        assert again == []
    finally:
        first.close()
        second.close()
