"""The saga log in a SQLite file (the default store): the workers of one machine share it."""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Final

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no gate, SQLite's own wait
    fcntl = None  # type: ignore[assignment]

from seawall._core.redact import redact_text
from seawall.saga._per_process import PerProcess
from seawall.saga._store import Store

__all__ = ["SQLiteStore"]

# SQLite's answers that say the file cannot take a write (their extended codes too, such as
# SQLITE_READONLY_DIRECTORY), as the error its owner can act on: an errno and what it means.
_REFUSALS: dict[str, tuple[int, str]] = {
    "SQLITE_READONLY": (errno.EACCES, "the file is read-only for this process"),
    "SQLITE_FULL": (errno.ENOSPC, "the disk is full"),
    "SQLITE_CANTOPEN": (
        errno.EACCES,
        "the file cannot be opened or created (is its directory writable?)",
    ),
}
# Before Python 3.11 (no sqlite_errorname): SQLite's messages for those codes.
_MESSAGES = {
    "attempt to write a readonly database": "SQLITE_READONLY",
    "database or disk is full": "SQLITE_FULL",
    "unable to open database file": "SQLITE_CANTOPEN",
}


def refusal(err: sqlite3.Error, path: str) -> OSError | None:
    """*err* as an :class:`OSError` naming *path* and the cause (``PermissionError`` for a
    read-only file or directory, ``errno.ENOSPC`` for a full disk), or ``None`` when SQLite
    refused for another reason."""
    name = getattr(err, "sqlite_errorname", None) or _MESSAGES.get(str(err), "")
    for code, (number, meaning) in _REFUSALS.items():
        if name == code or name.startswith(code + "_"):
            return OSError(number, f"{meaning} (SQLite: {err})", path)
    return None


class _Refusals:
    """Turns SQLite's refusals to write into the :class:`OSError` of :func:`refusal`."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, sqlite3.Error):
            refused = refusal(exc, self.path)
            if refused is not None:
                raise refused from exc


#: Seconds a writer waits for the file's lock: this process's queue and the gate below together,
#: then SQLite's own ``busy_timeout`` again (what a writer waited before they were here).
_BUSY_TIMEOUT = 60.0
#: The file beside the store whose lock is the writers' gate (see :class:`_Gate`).
GATE_SUFFIX: Final = "-writers"


class _Ask:
    """A writer's wait for the gate, given to the gate's waiting thread."""

    __slots__ = ("abandoned", "event", "ok")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.ok = False
        self.abandoned = False


class _Gate:
    """The writers of one SQLite file, across processes, queue here: on an exclusive
    ``flock(2)`` of a file beside it (:data:`GATE_SUFFIX`), which the kernel hands on the moment
    its holder lets go. SQLite's own wait for its lock is a busy handler that sleeps in steps
    (1, 2, 5, 10 ms and up) however soon the lock is freed, and the file stays unused while
    every writer sleeps. The gate is only an aid to speed: SQLite's lock still orders every
    write, so a writer that cannot take the gate (a directory it may not create a file in, a
    platform without ``flock``, a wait past its timeout) goes on to SQLite's wait without it.

    ``flock`` has no timeout: a writer that finds the gate taken hands the wait to a thread of
    the gate's and waits for that thread at most its timeout; a wait given up is let go by the
    thread once it gets the gate.
    """

    __slots__ = ("_asks", "_fd", "_mutex", "_path", "_waiter")

    def __init__(self, path: str) -> None:
        self._path = path + GATE_SUFFIX
        self._fd: int | None = None  # opened at the first write; -1: it cannot be
        self._mutex = threading.Lock()
        self._asks: queue.SimpleQueue[_Ask | None] = queue.SimpleQueue()
        self._waiter: threading.Thread | None = None

    def _open(self) -> int:
        if self._fd is None:
            with self._mutex:
                if self._fd is None:
                    self._fd = -1
                    if fcntl is not None:
                        with contextlib.suppress(OSError):
                            # Made as SQLite makes its journal: with the database's permissions.
                            mode = os.stat(self._path[: -len(GATE_SUFFIX)]).st_mode & 0o666
                            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, mode)
        return self._fd

    def enter(self, timeout: float) -> bool:
        """Take the gate within *timeout* seconds; ``False`` if it was not taken."""
        fd = self._open()
        if fd < 0 or fcntl is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:
            return False
        ask = _Ask()
        with self._mutex:
            if self._waiter is None:
                self._waiter = threading.Thread(
                    target=self._wait, args=(fd,), name="seawall-sqlite-gate", daemon=True
                )
                self._waiter.start()
        self._asks.put(ask)
        if not ask.event.wait(max(timeout, 0.0)):
            with self._mutex:
                if not ask.event.is_set():
                    ask.abandoned = True
                    return False
        return ask.ok

    def leave(self) -> None:
        """Let the gate go (taken by :meth:`enter`)."""
        assert fcntl is not None and self._fd is not None
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _wait(self, fd: int) -> None:
        assert fcntl is not None
        while True:
            ask = self._asks.get()
            if ask is None:  # closed: no writer of this process will ask again
                os.close(fd)
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                ok = True
            except OSError:
                ok = False
            with self._mutex:
                if ask.abandoned:  # its writer went on without it: let the gate go
                    # (One lock per open file: should a writer of this process hold the gate
                    # meanwhile, that one goes on without it too. SQLite's lock still orders
                    # them, and only a wait that outlasted the timeout comes here.)
                    if ok:
                        with contextlib.suppress(OSError):
                            fcntl.flock(fd, fcntl.LOCK_UN)
                    continue
                ask.ok = ok
                ask.event.set()

    def close(self) -> None:
        """No more writers here: close the file (after the waiting thread's last wait)."""
        with self._mutex:
            fd, self._fd = self._fd, -1  # a late enter() has no gate
            if self._waiter is not None:
                self._asks.put(None)  # the thread closes the file and ends
                return
        if fd is not None and fd >= 0:
            os.close(fd)

    def forget(self) -> None:
        """In a forked child: close the parent's descriptor (its lock stays the parent's)."""
        if self._fd is not None and self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)


class _Writers:
    """The writers of one SQLite file (by its real path) in this process. They queue on a lock
    of the process, each let in the moment the one before commits (a web application's request
    threads, each with an orchestrator, wait here, not in SQLite's busy handler), then on the
    file's gate with the other processes' writers (:class:`_Gate`).

    They last while a store of the file is open in this process: the last one closed closes the
    gate's file (and ends its waiting thread), so that a process opening many files in turn
    does not keep a descriptor and a thread for each.

    A writer waits here at most :data:`_BUSY_TIMEOUT` in all, then goes on to SQLite's own wait,
    as it would without them. The lock is reentrant and the gate is taken by the outermost
    transaction of a thread only: a thread opening a second store's transaction inside one of
    its own meets SQLite's lock and its timeout, not a hang.
    """

    __slots__ = ("_depth", "gate", "lock", "stores")

    def __init__(self, path: str) -> None:
        self.lock = threading.RLock()
        self.gate = _Gate(path)
        self._depth = 0  # transactions the thread holding `lock` is in (read under it)
        self.stores = 0  # the stores of the file open in this process (under _WRITERS.lock)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """This process's turn, then the file's gate (each given up after the timeout)."""
        deadline = time.monotonic() + _BUSY_TIMEOUT
        queued = self.lock.acquire(timeout=_BUSY_TIMEOUT)
        gated = False
        try:
            if queued:
                self._depth += 1
                if self._depth == 1:
                    gated = self.gate.enter(deadline - time.monotonic())
            yield
        finally:
            if gated:
                self.gate.leave()
            if queued:
                self._depth -= 1
                self.lock.release()


#: The writers of each SQLite file (by its real path) in this process. A forked child renews
#: them: a lock another thread of the parent held at the fork would stay held in the child, and
#: each of its writers would wait out the timeout; the gates' waiting threads are the parent's.
_WRITERS: PerProcess[_Writers] = PerProcess(_Writers, lambda writers: writers.gate.forget())


def _writers(key: str) -> _Writers:
    """The writers of the file at the real path *key* in this process."""
    return _WRITERS.get(key)


def _opened(key: str) -> None:
    """A store of the file at the real path *key* was opened in this process."""
    with _WRITERS.lock:
        _WRITERS.get_locked(key).stores += 1


def _closed(key: str) -> None:
    """A store of the file at *key* was closed: with the last, its gate's file is closed."""
    with _WRITERS.lock:
        writers = _WRITERS.find_locked(key)
        if writers is None:  # (opened before a fork: the parent's)
            return
        writers.stores -= 1
        if writers.stores > 0:
            return
        _WRITERS.drop_locked(key, writers)
    writers.gate.close()


class SQLiteStore(Store):
    """SQLite in WAL mode with ``synchronous=FULL``: every commit reaches the disk (fsync of
    the write-ahead log) before it returns, so a step recorded as done stays done across a
    power loss, not only a process crash (``NORMAL`` would lose the last commits then, and a
    finished step could run again). Writers take the lock at ``BEGIN IMMEDIATE`` and wait up to
    ``busy_timeout`` for each other (they queue first on a lock of their process, then on
    the file's gate with other processes', see :class:`_Writers`); readers never wait."""

    def __init__(
        self,
        url: str,
        path: str,
        clock: Callable[[], float] | None = None,
        *,
        create: bool = True,
    ) -> None:
        super().__init__(url, clock)
        self.path = path
        self.create = create
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            shown = redact_text(directory)  # a query (?password=a/b) may look like a directory
            raise ValueError(f"url: the directory of the SQLite file does not exist: {shown}")
        if not create and not os.path.isfile(path):
            # A mistyped path must not read as an empty store (nor become one).
            why = "it is a directory" if os.path.isdir(path) else "the file does not exist"
            raise ValueError(f"url: no saga store at {redact_text(os.path.abspath(path))}: {why}")
        self._refusals = _Refusals(redact_text(os.path.abspath(path)))
        with self._refusals:
            self._conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT
            )
        self._lock = threading.Lock()  # this store's connection, one thread at a time
        self._real_path = os.path.realpath(path)
        self._open = True
        _opened(self._real_path)
        try:
            with self._refusals:
                self._conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}")
                if create:
                    self.migrate()
                    self._conn.execute("PRAGMA journal_mode = WAL")
                else:
                    try:
                        self.check_schema()
                    except sqlite3.DatabaseError as err:
                        raise ValueError(
                            f"url: {redact_text(os.path.abspath(path))} is not a saga store: {err}"
                        ) from None
                self._conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            self.close()
            raise

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._refusals:
            return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._refusals:
            self._conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        conn = self._conn
        # The file's writers looked up each time: a fork renews them.
        with self._lock, self._refusals, _writers(self._real_path).held():
            begun = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if conn.in_transaction:  # SQLite rolled back already after a full disk
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self.write_seconds += time.perf_counter() - begun
        self.commits += 1

    def group_key(self) -> str:
        return self._real_path

    def unavailable(self, exc: BaseException) -> bool:
        # A full disk or a file made read-only may be put right while the workers wait.
        return super().unavailable(exc) or (
            isinstance(exc, OSError) and isinstance(exc.__cause__, sqlite3.OperationalError)
        )

    def has_schema_table(self) -> bool:
        rows = self.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seawall_saga_schema'"
        ).fetchall()
        return bool(rows)

    def clone(self) -> SQLiteStore:
        return SQLiteStore(self.url, self.path, self._given_clock, create=self.create)

    def close(self) -> None:
        self._conn.close()
        if self._open:
            self._open = False
            _closed(self._real_path)
