"""Running a round's attempts: ``def`` steps in threads, ``async def`` steps on an event loop,
each within its attempt's deadline; and the lease renewal while they run."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import inspect
import json
import logging
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from seawall._core.clock import Clock, SystemClock, VirtualClock
from seawall._core.errors import permanent
from seawall._core.switch import one_attempt
from seawall._strategies.deadline import Deadline, deadline
from seawall.saga._store import Store
from seawall.saga._work import Outcome, Pending, Work
from seawall.testing import VirtualEventLoop

__all__ = ["Executor", "Heartbeat"]

logger = logging.getLogger("seawall.saga")


class Heartbeat:
    """Renews the leases of the runs whose attempts are running, every third of the lease.

    A thread renews them; on the system clock a process of its own (:mod:`._keeper`) does too,
    which a step holding the GIL cannot starve: while the worker is alive, its leases hold. On
    virtual time (tests, simulations) the thread alone.

    A round holds its runs' leases (:meth:`hold`) and lets them go at its end (:meth:`release`);
    a lease kept (:meth:`keep`: an attempt still running after its round ended) is renewed
    besides, until :meth:`let_go`.
    """

    def __init__(self, store: Callable[[], Store], lease: float, use_process: bool) -> None:
        self._current = store  # the worker's store now (it reconnects after an outage)
        self.lease = lease
        self._held: dict[str, int] = {}  # every lease renewed: the round's and those kept
        self._round: dict[str, int] = {}
        self._kept: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: Store | None = None
        self._use_process = use_process
        self._process: subprocess.Popen[bytes] | None = None

    def hold(self, leases: dict[str, int]) -> None:
        """Renew these leases (run id -> token), the round's, from now on."""
        with self._lock:
            self._round = dict(leases)
            self._renew()

    def keep(self, run_id: str, token: int) -> None:
        """Go on renewing this lease after its round lets its leases go, until :meth:`let_go`."""
        with self._lock:
            self._kept[run_id] = token
            self._renew()

    def let_go(self, run_id: str) -> None:
        """Stop renewing a lease kept by :meth:`keep`."""
        with self._lock:
            self._kept.pop(run_id, None)
            self._renew()

    def _renew(self) -> None:
        """(Under the lock.) Renew the round's leases and those kept, from now on; nothing
        once closed (a worker closing settles what it holds without renewals)."""
        leases = {**self._round, **self._kept}
        if leases != self._held and not self._stop.is_set():
            self._held = leases
            if self._use_process:
                self._tell(leases)
            # The thread renews too: from the first moment (the keeper takes a moment to
            # start), and should the keeper fail; a renewal is conditional on the lease's
            # token, so two renewals of one lease are harmless.
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="seawall-saga-lease", daemon=True
                )
                self._thread.start()

    def release(self) -> None:
        self.hold({})

    def prepare(self) -> None:
        """Start the keeper process before leases are taken (it takes a moment to start)."""
        if self._use_process and self._process is None:
            with self._lock:
                self._tell(self._held)

    def _tell(self, leases: dict[str, int]) -> bool:
        """Send the keeper process the leases to renew; ``False`` if it cannot run (the
        thread alone renews them then)."""
        try:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(  # this interpreter, a module of its own
                    [sys.executable, "-m", "seawall.saga._keeper"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                self._write({"url": self._current().url, "lease": self.lease})
                # Wait until it can renew: the attempt about to start may hold the GIL from
                # its first instant, and leave no thread of this process a chance.
                assert self._process.stdout is not None
                if self._process.stdout.readline() != b"ready\n":
                    self._process.wait()
                    self._process.stdout.close()
                    raise OSError("the lease keeper exited")
            self._write({"hold": [[run_id, token] for run_id, token in leases.items()]})
        except OSError:
            logger.warning("seawall saga: the lease keeper process could not run")
            self._use_process = False
            return False
        return True

    def _write(self, message: dict[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.lease / 3.0):
            with self._lock:
                leases = list(self._held.items())
            if not leases:
                continue
            try:
                if self._store is None:
                    self._store = self._current().clone()
                self._store.renew(leases, self.lease)
            except Exception:  # the next tick tries again; the lease may lapse meanwhile
                logger.exception("seawall saga: renewing leases failed")
                if self._store is not None:
                    with contextlib.suppress(Exception):
                        self._store.close()
                    self._store = None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._store is not None:
            self._store.close()
        process = self._process
        if process is not None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()  # the keeper exits at the end of its input
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a keeper stuck in a call
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


class Executor:
    """Runs attempts the log says have started, all at once, and holds their runs' leases
    (:class:`Heartbeat`) while they run."""

    def __init__(self, clock: Clock, size: int, heartbeat: Heartbeat) -> None:
        self.clock = clock
        self._wall: Callable[[], float] = time.time if type(clock) is SystemClock else clock.now
        self._size = size
        self.heartbeat = heartbeat
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._aloop_thread: threading.Thread | None = None

    def close(self) -> None:
        """Stop renewing leases; close the event loops and the threads."""
        self.heartbeat.close()
        if self._loop is not None:
            self._loop.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._aloop is not None and self._aloop_thread is not None:
            self._aloop.call_soon_threadsafe(self._aloop.stop)
            self._aloop_thread.join(5.0)
            if not self._aloop.is_running():
                self._aloop.close()

    def start(
        self,
        works: list[Work],
        running: dict[concurrent.futures.Future[Outcome], Work],
        queued: collections.deque[Work],
    ) -> None:
        """Start the attempts the log says began, all at once: each began when its start was
        committed, so a crash charges each run only the attempt it interrupted, and none
        waits behind another's (threads for ``def`` steps, tasks for ``async def`` ones).

        The heartbeat (and its keeper process) is told the leases first, before any attempt is
        handed to a thread: an attempt may hold the GIL from its first instant, and then no
        thread of this process would tell it until the attempt let go, maybe after the leases
        expired."""
        if not works:
            return
        self.heartbeat.hold(
            {w.loaded.run.run_id: w.loaded.run.token for w in (*running.values(), *works, *queued)}
        )
        first = works[0].pending
        assert first is not None
        if len(works) == 1 and not running and not first.is_async:
            # One attempt: run it here, as a plain call.
            future: concurrent.futures.Future[Outcome] = concurrent.futures.Future()
            future.set_result(self._call(works[0].pending))  # type: ignore[arg-type]
            running[future] = works[0]
            return
        virtual = isinstance(self.clock, VirtualClock)
        later: list[Work] = []
        for w in works:
            p = w.pending
            assert p is not None
            if p.is_async and virtual:
                later.append(w)  # on the virtual event loop, below
                continue
            if p.is_async:
                future = asyncio.run_coroutine_threadsafe(self._acall(p), self._event_loop())
            else:
                future = self._threads().submit(contextvars.copy_context().run, self._call, p)
            running[future] = w
        if later:
            # Virtual time: the async attempts run together on this thread's virtual loop,
            # while the sync ones run in their threads.
            outcomes = self._run_async([self._acall(w.pending) for w in later])  # type: ignore[arg-type]
            for w, outcome in zip(later, outcomes, strict=True):
                future = concurrent.futures.Future()
                future.set_result(outcome)
                running[future] = w

    def finished(self, running: dict[concurrent.futures.Future[Outcome], Work]) -> list[Work]:
        """Wait for attempts to end: on the system clock, for the first ones (their outcomes
        are committed while the others run: group commit, and no finished attempt waits for
        a slow one to be recorded); on virtual time, for all (in a fixed order)."""
        if isinstance(self.clock, VirtualClock):
            done = set(running)
            concurrent.futures.wait(done)
        else:
            done, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED
            )
        return self._take(running, done)

    def ended(self, running: dict[concurrent.futures.Future[Outcome], Work]) -> list[Work]:
        """The attempts that have ended by now, without waiting: taken into the commit about
        to record others' (a commit that waited its turn records every outcome that came in
        meanwhile, not one while the next waits for another turn)."""
        return self._take(running, {f for f in running if f.done()})

    @staticmethod
    def _take(
        running: dict[concurrent.futures.Future[Outcome], Work],
        done: set[concurrent.futures.Future[Outcome]],
    ) -> list[Work]:
        finished = [w for f, w in running.items() if f in done]
        outcomes = [f.result() for f in running if f in done]  # a crash propagates from here
        for f in done:
            del running[f]
        for w, outcome in zip(finished, outcomes, strict=True):
            w.outcome = outcome
        return finished

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._size, thread_name_prefix="seawall-saga-step"
            )
        return self._pool

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of this orchestrator's async attempts, in a thread of its own."""
        if self._aloop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="seawall-saga-loop", daemon=True
            )
            thread.start()
            self._aloop, self._aloop_thread = loop, thread
        return self._aloop

    def _call(self, p: Pending) -> Outcome:
        clock, wall = self.clock, self._wall
        started = wall()
        try:
            with one_attempt():
                if p.deadline == math.inf:
                    value = p.fn(p.ctx)
                else:
                    # The time left when the attempt began (on the store's clock), from now on
                    # this worker's clock: the two clocks may disagree, their intervals do not.
                    at = Deadline(clock.now() + (p.deadline - p.started), clock)
                    with deadline(at=at):
                        value = p.fn(p.ctx)
                if inspect.isawaitable(value):
                    close = getattr(value, "close", None)
                    if close is not None:
                        close()
                    raise permanent(
                        TypeError(
                            f"step {p.ctx.step!r}: {p.fn!r} returned an awaitable; "
                            "declare it `async def`"
                        )
                    )
        except Exception as exc:
            return Outcome(ok=False, value=exc, duration=wall() - started)
        return Outcome(ok=True, value=value, duration=wall() - started)

    async def _acall(self, p: Pending) -> Outcome:
        clock, wall = self.clock, self._wall
        started = wall()
        try:
            with one_attempt():
                if p.deadline == math.inf:
                    value = await p.fn(p.ctx)
                else:
                    at = Deadline(clock.now() + (p.deadline - p.started), clock)
                    async with deadline(at=at):
                        value = await p.fn(p.ctx)
        except Exception as exc:
            return Outcome(ok=False, value=exc, duration=wall() - started)
        return Outcome(ok=True, value=value, duration=wall() - started)

    def _run_async(self, coros: list[Any]) -> list[Outcome]:
        async def together() -> list[Outcome]:
            tasks = [asyncio.ensure_future(c) for c in coros]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                # (An attempt's errors are outcomes: only an interrupt is here.) The others
                # end too, cancelled, not left pending on the loop for ever.
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

        loop = self._loop
        if loop is None:
            if isinstance(self.clock, VirtualClock):
                loop = VirtualEventLoop(self.clock)
                # Epoch-sized readings: asyncio adds its clock resolution to the time to find
                # due timers, and 1e-9 vanishes next to 1.7e9 (one ulp there is 2.4e-7), so a
                # timer due exactly now would never run. A microsecond is enough.
                loop._clock_resolution = max(getattr(loop, "_clock_resolution", 0.0), 1e-6)
            else:
                loop = asyncio.new_event_loop()
            self._loop = loop
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return loop.run_until_complete(together())
        # Called from inside a running loop (an async application): run ours in a thread.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(loop.run_until_complete, together()).result()
