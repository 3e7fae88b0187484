"""Runs started at once by several threads of one process on one SQLite file share a commit:
the first thread let in writes every start waiting by then, each call in a savepoint of its
own. One call's refusal is that call's alone, and when the shared transaction fails, the other
calls commit on their own.

Real files, real threads. Each test holds the file's lock of this process while the starts
gather, and lets go once they all wait: which thread leads, and what it takes, does not depend
on how fast the machine is.
"""

from __future__ import annotations

import pathlib
import sqlite3
import threading
import time
from collections.abc import Callable

import pytest

from seawall import saga
from seawall.saga import _sqlite


def ok(ctx: saga.StepContext) -> str:
    return "done"


ONE = saga.Saga("one", [saga.Step("a", ok)])


def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "the starts did not gather in 30 s"
        time.sleep(0.005)


class Callers:
    """Threads, each with an orchestrator of its own (a web application's request threads),
    that start runs while this process's lock of the file is held by another thread."""

    def __init__(self, path: pathlib.Path, n: int) -> None:
        # Made before the lock is held: opening a store writes (its schema).
        self.orchs = [saga.Orchestrator(f"sqlite:///{path}", [ONE], hooks=()) for _ in range(n)]
        self.threads: list[threading.Thread] = []
        self.results: dict[str, object] = {}
        self.outcomes: list[object] = []  # every call's, in the order they returned
        self.writers = _sqlite._writers(str(path.resolve()))
        self.holding, self.release = threading.Event(), threading.Event()
        self.holder = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        with self.writers.lock:
            self.holding.set()
            self.release.wait(30)

    def __enter__(self) -> Callers:
        self.holder.start()
        assert self.holding.wait(30)
        return self

    def start(self, orch: saga.Orchestrator, run_id: str, value: object) -> None:
        """*orch* starts *run_id* in a thread of its own; waits until it waits for the file."""
        before = len(self.writers.starts.waiting)

        def call() -> None:
            try:
                result: object = orch.start("one", value, run_id=run_id)
            except Exception as exc:
                result = exc
            self.results[run_id] = result
            self.outcomes.append(result)

        t = threading.Thread(target=call)
        t.start()
        self.threads.append(t)
        until(lambda: len(self.writers.starts.waiting) == before + 1)

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.holder.join(30)
        for t in self.threads:
            t.join(30)
        for orch in self.orchs:
            orch.close()

    def commits(self) -> int:
        return sum(orch.store.commits for orch in self.orchs)


def test_starts_waiting_together_share_one_commit(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    with Callers(db, 8) as callers:
        orchs = callers.orchs
        before = callers.commits()
        for k, orch in enumerate(orchs):
            callers.start(orch, f"r{k}", {"k": k})
    assert callers.results == {f"r{k}": f"r{k}" for k in range(8)}
    assert callers.commits() - before == 1
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == [f"r{k}" for k in range(8)]
        assert orch.run_due() == 8
        assert {orch.get(f"r{k}").status for k in range(8)} == {saga.Status.SUCCEEDED}


def test_one_calls_refusal_rolls_back_that_call_only(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=()) as first:
        first.start("one", {"k": "first"}, run_id="taken")
    with Callers(db, 3) as callers:
        orchs = callers.orchs
        before = callers.commits()
        callers.start(orchs[0], "a", {"k": "a"})
        callers.start(orchs[1], "taken", {"k": "another input"})
        callers.start(orchs[2], "b", {"k": "b"})
    assert callers.results["a"] == "a" and callers.results["b"] == "b"
    refused = callers.results["taken"]
    assert isinstance(refused, ValueError) and "another saga or input" in str(refused)
    assert callers.commits() - before == 1
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == ["a", "b", "taken"]
        assert orch.get("taken").input == {"k": "first"}  # as the first start wrote it


def test_the_same_start_twice_in_one_commit_starts_one_run(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    with Callers(db, 2) as callers:
        orchs = callers.orchs
        callers.start(orchs[0], "r", {"k": 1})
        callers.start(orchs[1], "r", {"k": 1})  # a client's retry, say
    assert callers.outcomes == ["r", "r"]  # both calls returned the id, neither raised
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=()) as orch:
        assert [r.run_id for r in orch.runs()] == ["r"]
        assert orch.run_due() == 1


def test_when_the_shared_commit_fails_the_others_commit_on_their_own(
    tmp_path: pathlib.Path,
) -> None:
    db = tmp_path / "saga.db"
    with Callers(db, 3) as callers:
        leader, b, c = callers.orchs
        # On the leader's connection only (a TEMP trigger is its connection's), writing b's
        # run rolls back the whole transaction: an error of the commit, not of one call.
        leader.store.execute(
            "CREATE TEMP TRIGGER boom BEFORE INSERT ON seawall_saga_runs "
            "WHEN NEW.run_id = 'b' BEGIN SELECT RAISE(ROLLBACK, 'boom'); END"
        )
        before = callers.commits()
        callers.start(leader, "lead", {"k": 0})
        until(lambda: callers.writers.starts.leading)
        callers.start(b, "b", {"k": 1})
        callers.start(c, "c", {"k": 2})
    failed = callers.results["lead"]
    assert isinstance(failed, sqlite3.IntegrityError) and "boom" in str(failed)
    assert callers.results["b"] == "b" and callers.results["c"] == "c"
    assert callers.commits() - before == 2  # b and c, each its own
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == ["b", "c"]


def test_a_start_too_large_is_refused_before_it_waits(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    with saga.Orchestrator(f"sqlite:///{db}", [ONE], hooks=(), max_payload_bytes=100) as orch:
        with pytest.raises(ValueError, match="input"):
            orch.start("one", "x" * 200, run_id="big")
        assert not _sqlite._writers(str(db.resolve())).starts.waiting
        assert orch.runs() == []
