"""The writers of one SQLite file in one process queue on a lock of their own (each let in as
the one before commits, not after SQLite's busy handler's sleep), never longer than SQLite's
own wait, and a thread that nests two stores' transactions gets SQLite's error, not a hang.

Real files and real threads; the waits are bounded by the store's timeout (made short here),
and no assertion depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from seawall.saga import _sqlite
from seawall.saga._sqlite import SQLiteStore


def store(path: pathlib.Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{path}", str(path))


@contextlib.contextmanager
def held(
    hold: Callable[[], contextlib.AbstractContextManager[object]],
    inside: Callable[[], object] = lambda: None,
) -> Iterator[None]:
    """*hold()* entered (and *inside()* run in it) by another thread, until the block ends."""
    holding, release = threading.Event(), threading.Event()

    def run() -> None:
        with hold():
            inside()
            holding.set()
            release.wait(30)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert holding.wait(30)
        yield
    finally:
        release.set()
        t.join(30)


def test_stores_of_one_file_share_its_writers_lock_whatever_the_path(
    tmp_path: pathlib.Path,
) -> None:
    a = store(tmp_path / "saga.db")
    os.symlink(tmp_path / "saga.db", tmp_path / "link.db")
    b = store(tmp_path / "link.db")
    other = store(tmp_path / "other.db")
    try:
        assert _sqlite._writers(a._real_path) is _sqlite._writers(b._real_path)
        assert _sqlite._writers(a._real_path) is not _sqlite._writers(other._real_path)
        assert a._lock is not b._lock  # each connection keeps its own
    finally:
        for s in (a, b, other):
            s.close()


def test_a_writer_of_the_same_process_waits_for_the_one_before_to_commit(
    tmp_path: pathlib.Path,
) -> None:
    a, b = store(tmp_path / "saga.db"), store(tmp_path / "saga.db")
    seen: list[object] = []

    def second() -> None:
        with b.transaction():
            # In only after the first committed: its table is there.
            seen.append(b.execute("SELECT count(*) FROM t").fetchone()[0])
            b.execute("INSERT INTO t VALUES (1)")

    t2 = threading.Thread(target=second)
    with held(a.transaction, lambda: a.execute("CREATE TABLE t (x INTEGER)")):
        t2.start()
        t2.join(0.2)
        # The second waits, with no transaction open on its connection, and the file's lock
        # of this process is held (by the first).
        assert t2.is_alive() and not b._conn.in_transaction and not seen
        assert not _sqlite._writers(b._real_path).acquire(blocking=False)
    t2.join(30)
    assert seen == [0]
    assert a.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    a.close()
    b.close()


def test_the_wait_is_bounded_by_the_stores_timeout(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "_BUSY_TIMEOUT", 0.2)
    a, b = store(tmp_path / "saga.db"), store(tmp_path / "saga.db")
    # Past the process's lock after the timeout, then SQLite's own wait, then its error: as
    # without the lock (a worker reconnects after it), never a hang.
    with (
        held(a.transaction),
        pytest.raises(sqlite3.OperationalError, match="locked"),
        b.transaction(),
    ):
        pass  # pragma: no cover - not reached
    with b.transaction():  # the lock was given back: the next transaction goes in
        pass
    a.close()
    b.close()


def test_nested_transactions_of_two_stores_of_one_file_get_sqlites_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "_BUSY_TIMEOUT", 0.2)
    a, b = store(tmp_path / "saga.db"), store(tmp_path / "saga.db")
    with a.transaction(), pytest.raises(sqlite3.OperationalError, match="locked"), b.transaction():
        pass  # pragma: no cover - not reached
    with b.transaction():
        pass
    a.close()
    b.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads, on purpose
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_does_not_inherit_the_lock_another_thread_held(
    tmp_path: pathlib.Path,
) -> None:
    a = store(tmp_path / "saga.db")
    # A writer of the parent between taking the process's lock and SQLite's (a fork inside a
    # SQLite transaction is SQLite's own matter: a connection must not cross it).
    with held(lambda: _sqlite._writers(a._real_path)):
        pid = os.fork()
        if pid == 0:  # the child: one thread, and a copy of the lock that thread held
            code = 1
            try:
                child = store(tmp_path / "saga.db")
                began = time.monotonic()
                with child.transaction():
                    pass
                # Inherited, the lock would make the child wait out the 60 s timeout.
                code = 0 if time.monotonic() - began < 30 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    a.close()
    assert os.waitstatus_to_exitcode(status) == 0
