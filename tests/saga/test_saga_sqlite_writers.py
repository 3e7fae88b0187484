"""The writers of one SQLite file queue (each let in as the one before commits, not after
SQLite's busy handler's sleep): in one process on a lock of their own, across processes on the
file's gate (a ``flock`` of a file beside it). Neither waits longer than SQLite's own wait would,
a writer that cannot have the gate goes on without it, and a thread that nests two stores'
transactions gets SQLite's error, not a hang.

Real files, real threads, real locks; the waits are bounded by the store's timeout (made short
here), and no assertion depends on how fast the machine is. ``flock(2)`` locks belong to an open
file description: a second ``open`` of the gate in this test holds it as another process would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from seawall import saga
from seawall.saga import _sqlite
from seawall.saga._sqlite import SQLiteStore


def store(path: pathlib.Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{path}", str(path))


@contextlib.contextmanager
def gate_held_elsewhere(db: pathlib.Path) -> Iterator[int]:
    """The file's gate held as another process's writer would hold it (by the descriptor
    given)."""
    fd = os.open(str(db) + _sqlite.GATE_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # (lets the lock go)


def gate_free(db: pathlib.Path) -> bool:
    """Whether another process's writer would have the gate at once."""
    fd = os.open(str(db) + _sqlite.GATE_SUFFIX, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def writer(a: SQLiteStore) -> tuple[threading.Thread, threading.Event]:
    """A thread (not started) that writes a row in a transaction of *a*, and its end."""
    done = threading.Event()

    def write() -> None:
        with a.transaction():
            a.execute("INSERT INTO t VALUES (1)")
        done.set()

    return threading.Thread(target=write), done


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


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
        assert not _sqlite._writers(b._real_path).lock.acquire(blocking=False)
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
    with held(lambda: _sqlite._writers(a._real_path).lock):
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


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads, on purpose
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_has_a_gate_of_its_own(tmp_path: pathlib.Path) -> None:
    a = store(tmp_path / "saga.db")
    gate = _sqlite._writers(a._real_path).gate
    assert gate.enter(1.0)
    asked, answered = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            mine = _sqlite._writers(a._real_path).gate
            # Through the parent's descriptor the child would "have" the gate the parent
            # holds (one open file, one lock): it must wait for the parent like any other...
            code = 2 if mine.enter(0.2) else 3
            os.write(answered, b"1")
            # ...and have it once the parent lets go.
            if code == 3 and mine.enter(30):
                mine.leave()
                code = 0
        finally:
            os._exit(code)
    try:
        assert os.read(asked, 1) == b"1"
    finally:
        gate.leave()
        _, status = os.waitpid(pid, 0)
        os.close(asked)
        os.close(answered)
    a.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_writer_waits_at_the_gate_for_another_processs_writer(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    a = store(db)
    a.execute("CREATE TABLE t (x INTEGER)")
    t, done = writer(a)
    with gate_held_elsewhere(db):
        t.start()
        # It waits at the gate, before SQLite's lock: no transaction open on its connection.
        assert not done.wait(0.2) and not a._conn.in_transaction
    t.join(30)
    assert done.is_set()
    assert a.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    # The writer let the gate go at its commit.
    assert gate_free(db)
    a.close()


def test_the_gate_is_let_go_when_a_transaction_fails(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    a = store(db)
    with pytest.raises(sqlite3.OperationalError), a.transaction():
        a.execute("INSERT INTO no_such_table VALUES (1)")
    assert gate_free(db) and not a._conn.in_transaction
    a.close()


def test_the_wait_at_the_gate_is_bounded_and_the_gate_taken_late_is_let_go(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "saga.db"
    a = store(db)
    a.execute("CREATE TABLE t (x INTEGER)")
    monkeypatch.setattr(_sqlite, "_BUSY_TIMEOUT", 0.2)
    with gate_held_elsewhere(db):
        # A holder of the gate that never lets go (a stopped process, say) holds back
        # nobody past the timeout: the writer goes on to SQLite's lock, free here.
        with a.transaction():
            a.execute("INSERT INTO t VALUES (1)")
        assert a.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    # The wait given up gets the gate once the holder lets go, and lets it go at once.
    assert eventually(lambda: gate_free(db))
    with a.transaction():  # and the next writer has it as before
        a.execute("INSERT INTO t VALUES (2)")
    assert gate_free(db)
    a.close()


def test_a_writer_that_cannot_have_the_gate_goes_on_without_it(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    (tmp_path / ("saga.db" + _sqlite.GATE_SUFFIX)).mkdir()  # no file can be made there
    a = store(db)
    a.execute("CREATE TABLE t (x INTEGER)")
    with a.transaction():
        a.execute("INSERT INTO t VALUES (1)")
    assert a.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    assert not _sqlite._writers(a._real_path).gate.enter(0.1)
    a.close()


def test_the_gate_is_made_with_the_permissions_of_the_database(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    store(db).close()
    os.chmod(db, 0o640)
    (tmp_path / ("saga.db" + _sqlite.GATE_SUFFIX)).unlink()
    gate = _sqlite._Gate(os.path.realpath(db))
    assert gate.enter(1.0)
    gate.leave()
    gate.forget()
    assert (tmp_path / ("saga.db" + _sqlite.GATE_SUFFIX)).stat().st_mode & 0o777 == 0o640


def gate_descriptors(db: pathlib.Path, besides: int = -1) -> int:
    """This process's open descriptors of the file's gate (but *besides*)."""
    gate = str(db) + _sqlite.GATE_SUFFIX
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += int(fd) != besides and os.readlink(f"/proc/self/fd/{fd}") == gate
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="no /proc here")
def test_the_last_store_of_a_file_closed_closes_its_gate(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    a, b = store(db), store(db)
    assert gate_descriptors(db) == 1  # one for the process, opened at the first write
    a.close()
    assert gate_descriptors(db) == 1 and os.path.realpath(db) in _sqlite._WRITERS
    b.close()
    assert gate_descriptors(db) == 0 and os.path.realpath(db) not in _sqlite._WRITERS
    b.close()  # closing again changes nothing
    c = store(db)  # and a store opened again has a gate again
    assert gate_descriptors(db) == 1
    c.close()
    assert gate_descriptors(db) == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="no /proc here")
def test_a_closed_gates_waiting_thread_ends_after_its_last_wait(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "saga.db"
    a = store(db)
    monkeypatch.setattr(_sqlite, "_BUSY_TIMEOUT", 0.2)
    gate = _sqlite._writers(a._real_path).gate
    with gate_held_elsewhere(db) as elsewhere:
        with a.transaction():  # gives up its wait at the gate: the thread still waits
            pass
        waiter = gate._waiter
        assert waiter is not None and waiter.is_alive()
        a.close()
        assert gate_descriptors(db, besides=elsewhere) == 1  # the thread's wait holds it
    waiter.join(30)
    assert not waiter.is_alive() and gate_descriptors(db) == 0
    assert gate_free(db)


HOLDER = """
import sys, time
from seawall.saga._sqlite import SQLiteStore
store = SQLiteStore("sqlite:///" + sys.argv[1], sys.argv[1])
with store.transaction():
    store.execute("INSERT INTO t VALUES (0)")
    print("in", flush=True)
    time.sleep(120)
"""


def test_a_writer_killed_in_its_transaction_lets_the_gate_go(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "saga.db"
    a = store(db)
    a.execute("CREATE TABLE t (x INTEGER)")
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "in\n"
            assert not gate_free(db)  # the other process holds the gate, in its transaction
            t, done = writer(a)
            t.start()
            assert not done.wait(0.2)
            began = time.monotonic()
            holder.send_signal(signal.SIGKILL)
            t.join(60)
            # Let go by the kernel at the holder's death, not after this writer's 60 s timeout.
            assert done.is_set() and time.monotonic() - began < 30
        finally:
            holder.kill()
    # The killed transaction is not in the file; this one is.
    assert a.execute("SELECT x FROM t").fetchall() == [(1,)]
    a.close()


def in_function(thread: int, module: str, name: str) -> bool:
    """Whether *thread* is in a call of the function *name* of a file ending in *module*."""
    frame = sys._current_frames().get(thread)
    while frame is not None:
        code = frame.f_code
        if code.co_name == name and code.co_filename.endswith(module):
            return True
        frame = frame.f_back
    return False


def test_a_commit_that_waited_its_turn_records_the_outcomes_that_ended_meanwhile(
    tmp_path: pathlib.Path,
) -> None:
    # Two attempts run at once; the first ends and its commit waits at the gate (held as by
    # another process's writer). The second ends meanwhile: it is recorded in that commit, not
    # in one of its own after another turn at the gate.
    db = tmp_path / "saga.db"
    worker = threading.get_ident()
    gate = contextlib.ExitStack()
    second_may_end = threading.Event()

    def step(ctx: saga.StepContext) -> str:
        if ctx.input == 0:
            gate.enter_context(gate_held_elsewhere(db))  # before this outcome's commit
            return "first"
        assert second_may_end.wait(30)
        return "second"

    flow = saga.Saga("two", [saga.Step("a", step)])
    orch = saga.Orchestrator(f"sqlite:///{db}", [flow], concurrency=2, hooks=())
    for n in range(2):
        orch.start("two", n, run_id=f"r{n}")

    def observe() -> None:
        try:
            assert eventually(lambda: in_function(worker, "_sqlite.py", "enter"))
            second_may_end.set()
            # ... and its attempt's thread is done with it (its outcome is in, not coming).
            assert eventually(
                lambda: (
                    not any(
                        in_function(t, "concurrent/futures/thread.py", "run")
                        for t in sys._current_frames()
                    )
                )
            )
        finally:
            gate.close()

    observer = threading.Thread(target=observe)
    observer.start()
    assert orch.run_due() == 2
    observer.join(30)
    rows = orch.store.execute(
        "SELECT run_id, at FROM seawall_saga_history WHERE event = 'success' ORDER BY run_id"
    ).fetchall()
    assert [r[0] for r in rows] == ["r0", "r1"]
    assert rows[0][1] == rows[1][1]  # one commit's time
    assert [orch.get(f"r{n}").status for n in range(2)] == [saga.Status.SUCCEEDED] * 2
    orch.close()
