"""Runs started at once by several threads of one process on one store share a commit: the
thread leading takes every start waiting once it is let in. When the shared transaction fails,
a call refused (its run id taken by another input) has its error, the transaction's error is
the leader's, and the other calls commit on their own.

Real stores, real threads. While the starts gather, the first one's commit is held back: on
SQLite by this process's lock of the file, held by another thread, before the leader takes the
starts waiting (so it takes them all); on PostgreSQL by a lock of the runs' table that another
session holds, after the leader took its own (so the next leader takes the others). Which calls
share a commit does not depend on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from seawall import saga
from seawall.saga import _sqlite, _starts


def ok(ctx: saga.StepContext) -> str:
    return "done"


ONE = saga.Saga("one", [saga.Step("a", ok)])


def until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "the starts did not gather in 30 s"
        time.sleep(0.005)


@contextlib.contextmanager
def held_back(orch: saga.Orchestrator) -> Iterator[None]:
    """The first commit of starts on *orch*'s store held back until the block ends."""
    if orch.store.scheme == "sqlite":
        writers = _sqlite._writers(orch.store.group_key())
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with writers.lock:
                holding.set()
                release.wait(30)

        t = threading.Thread(target=hold)
        t.start()
        assert holding.wait(30)
        try:
            yield
        finally:
            release.set()
            t.join(30)
        return
    import psycopg

    with psycopg.connect(orch.store.url) as conn:  # a transaction, open until the block ends
        conn.execute("LOCK TABLE seawall_saga_runs IN SHARE ROW EXCLUSIVE MODE")
        yield


class Callers:
    """Threads, each with an orchestrator of its own (a web application's request threads),
    that start runs while the first commit is held back."""

    def __init__(self, url: str, n: int) -> None:
        # Made before the commit is held back: opening a store writes (its schema).
        self.orchs = [saga.Orchestrator(url, [ONE], hooks=()) for _ in range(n)]
        self.starts = _starts.waiting(self.orchs[0].store.group_key())
        self.threads: list[threading.Thread] = []
        self.results: dict[str, object] = {}
        self.outcomes: list[object] = []  # every call's, in the order they returned
        self.first = True
        self._held = held_back(self.orchs[0])

    def __enter__(self) -> Callers:
        self._held.__enter__()
        return self

    def start(self, orch: saga.Orchestrator, run_id: str, value: object) -> None:
        """*orch* starts *run_id* in a thread of its own; waits until it waits for a commit."""
        before = len(self.starts.waiting)

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
        if self.first and orch.store.scheme == "postgresql":
            # The first leader took its own start, and waits in its commit.
            until(lambda: self.starts.leading and not self.starts.waiting)
        else:
            until(lambda: len(self.starts.waiting) == before + 1)
        self.first = False

    def __exit__(self, *exc: object) -> None:
        self._held.__exit__(None, None, None)
        for t in self.threads:
            t.join(30)
        for orch in self.orchs:
            orch.close()

    def commits(self) -> int:
        return sum(orch.store.commits for orch in self.orchs)

    def shared(self) -> int:
        """The commits the starts take: one, and the first's own on PostgreSQL."""
        return 1 if self.orchs[0].store.scheme == "sqlite" else 2


def test_starts_waiting_together_share_one_commit(store_url: str) -> None:
    with Callers(store_url, 8) as callers:
        orchs = callers.orchs
        before = callers.commits()
        for k, orch in enumerate(orchs):
            callers.start(orch, f"r{k}", {"k": k})
    assert callers.results == {f"r{k}": f"r{k}" for k in range(8)}
    assert callers.commits() - before == callers.shared()
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == [f"r{k}" for k in range(8)]
        assert orch.run_due() == 8
        assert {orch.get(f"r{k}").status for k in range(8)} == {saga.Status.SUCCEEDED}


def test_one_calls_refusal_fails_that_call_only(store_url: str) -> None:
    with saga.Orchestrator(store_url, [ONE], hooks=()) as first:
        first.start("one", {"k": "first"}, run_id="taken")
    with Callers(store_url, 3) as callers:
        orchs = callers.orchs
        before = callers.commits()
        callers.start(orchs[0], "a", {"k": "a"})
        callers.start(orchs[1], "taken", {"k": "another input"})
        callers.start(orchs[2], "b", {"k": "b"})
    assert callers.results["a"] == "a" and callers.results["b"] == "b"
    refused = callers.results["taken"]
    assert isinstance(refused, ValueError) and "another saga or input" in str(refused)
    assert callers.commits() - before == 2  # the others', each its own (on PostgreSQL, a's first)
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == ["a", "b", "taken"]
        assert orch.get("taken").input == {"k": "first"}  # as the first start wrote it


def test_the_same_start_twice_in_one_commit_starts_one_run(store_url: str) -> None:
    with Callers(store_url, 3) as callers:
        orchs = callers.orchs
        callers.start(orchs[2], "first", {"k": 0})
        callers.start(orchs[0], "r", {"k": 1})
        callers.start(orchs[1], "r", {"k": 1})  # a client's retry, say
    # Both calls returned the id, neither raised.
    assert sorted(map(str, callers.outcomes)) == ["first", "r", "r"]
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == ["first", "r"]
        assert orch.run_due() == 2


def test_when_the_shared_commit_fails_the_others_commit_on_their_own(sqlite_url: str) -> None:
    # (The path is the same for both stores; a TEMP trigger, one connection's, is SQLite's.)
    with Callers(sqlite_url, 3) as callers:
        leader, b, c = callers.orchs
        # On the leader's connection only (a TEMP trigger is its connection's), writing b's
        # run rolls back the whole transaction: an error of the commit, not of one call.
        leader.store.execute(
            "CREATE TEMP TRIGGER boom BEFORE INSERT ON seawall_saga_runs "
            "WHEN NEW.run_id = 'b' BEGIN SELECT RAISE(ROLLBACK, 'boom'); END"
        )
        before = callers.commits()
        callers.start(leader, "lead", {"k": 0})
        until(lambda: callers.starts.leading)
        callers.start(b, "b", {"k": 1})
        callers.start(c, "c", {"k": 2})
    failed = callers.results["lead"]
    assert isinstance(failed, sqlite3.IntegrityError) and "boom" in str(failed)
    assert callers.results["b"] == "b" and callers.results["c"] == "c"
    assert callers.commits() - before == 2  # b and c, each its own
    with saga.Orchestrator(sqlite_url, [ONE], hooks=()) as orch:
        assert sorted(r.run_id for r in orch.runs()) == ["b", "c"]


def test_a_start_too_large_is_refused_before_it_waits(store_url: str) -> None:
    with saga.Orchestrator(store_url, [ONE], hooks=(), max_payload_bytes=100) as orch:
        with pytest.raises(ValueError, match="input"):
            orch.start("one", "x" * 200, run_id="big")
        assert orch.store.group_key() not in _starts._STARTS
        assert orch.runs() == []


def test_nothing_is_kept_of_a_store_once_its_starts_are_committed(store_url: str) -> None:
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        orch.start("one", {"k": 1}, run_id="r")
        assert orch.store.group_key() not in _starts._STARTS
        assert orch.run_due() == 1
