"""Seeded randomness, isolation from the process's real state, and a small process pool."""

from __future__ import annotations

import contextvars
import functools
import multiprocessing
import os
import random
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from seawall._core.switch import ISOLATED

__all__ = [
    "MAX_DURATION",
    "MAX_EVENTS",
    "TERMINATE_WAIT",
    "InvalidParameters",
    "SimulationError",
    "check_volume",
    "costliest_first",
    "isolated",
    "parallel_map",
    "run_isolated",
    "simulate",
    "terminate",
    "trial_rng",
]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

#: The longest simulated time a scenario accepts (seconds): about 11.6 days.
MAX_DURATION = 1e6
#: The most arrivals (or attempts) a run may expect: beyond it a run would take hours.
MAX_EVENTS = 50_000_000


class InvalidParameters(ValueError):
    """A trial's parameters were refused (bad input), raised from a worker process."""


class SimulationError(RuntimeError):
    """A scenario failed while it ran (not while it checked its parameters): a bug, not bad input.

    The original exception is the ``__cause__``.
    """


def check_volume(name: str, expected: float, limit: float = MAX_EVENTS) -> None:
    """Refuse a run that would make more than *limit* arrivals or attempts (about *expected*).

    Raises:
        ValueError: naming the parameter(s) that make the run too large.
    """
    if not expected <= limit:  # NaN too
        raise ValueError(
            f"{name} asks for about {expected:.3g} simulated requests; the limit is {limit:.3g} "
            "(shorten the duration or lower the rate)"
        )


def trial_rng(seed: int, *parts: object) -> random.Random:
    """A generator for one trial, derived from the seed and the trial's coordinates.

    A string seed is hashed with SHA-512 by :class:`random.Random`, so the stream is the same in
    every process and on every run, whatever order the trials run in.
    """
    return random.Random(f"seawall-sim:{seed}:" + ":".join(str(p) for p in parts))


def _isolated_body(fn: Callable[..., R], args: Any, kwargs: Any) -> R:
    ISOLATED.set(True)
    return fn(*args, **kwargs)


def run_isolated(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Call *fn* in a fresh context: no ambient deadline, no ``one_attempt()`` block, and the
    kill switch ignored.

    A simulated run models other processes on virtual time: a real-time ``seawall.deadline``
    around the caller, or ``SEAWALL_RETRIES=off`` meant for this process's real calls, must
    not change it.
    """
    if ISOLATED.get():
        return fn(*args, **kwargs)
    return contextvars.Context().run(_isolated_body, fn, args, kwargs)


def isolated(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a scenario function so that it runs through :func:`run_isolated`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return run_isolated(fn, *args, **kwargs)

    return wrapper


def _die_with_parent(parent: int) -> None:
    """Make this worker exit when the parent does, however it ends (even SIGKILL)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the kernel kills us with it
        except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        # Portable fallback: an orphan is re-parented, so its parent id changes.
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="seawall-sim-parent-watch", daemon=True).start()


def _init_worker(parent: int) -> None:
    # Ctrl-C goes to the whole process group; the parent alone handles it and stops the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM for the group would otherwise kill workers mid-result: let the parent stop them.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent)


def simulate(fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
    """Run one simulation (after its parameters were checked): isolated, and any exception it
    raises reported as a :class:`SimulationError` (a failure of the simulator, not bad input)."""
    try:
        return run_isolated(fn, *args, **kwargs)
    except (SimulationError, InvalidParameters):
        raise
    except Exception as err:
        raise SimulationError(f"the simulation failed: {type(err).__name__}: {err}") from err


def _call_indexed(arg: tuple[Callable[[T], R], int, T]) -> tuple[int, R]:
    fn, index, item = arg
    return index, simulate(fn, item)


def costliest_first(items: Sequence[T], cost: Callable[[T], float] | None) -> list[int]:
    """The positions of *items*, the costliest (by *cost*, an estimate) first; ties and
    ``cost=None`` keep the input order.

    Workers that take items in this order finish close together (longest processing time
    first, Graham 1969): the last item to start is a small one, not the largest, which would
    otherwise run alone at the end while the other workers wait.
    """
    if cost is None:
        return list(range(len(items)))
    costs = [cost(item) for item in items]
    return sorted(range(len(items)), key=lambda i: -costs[i])


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    cost: Callable[[T], float] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]``, over *workers* processes when there is more than one.

    *fn* must be a module-level function (it is pickled). Results come back in input order;
    with *cost* (an estimate of each item's run time, called here, not pickled) the workers
    take the items costliest first (:func:`costliest_first`).
    Each call runs isolated (:func:`run_isolated`). The workers die with this process: on an
    exception (``KeyboardInterrupt`` included) they are terminated, and if this process is
    killed outright they exit on their own.

    Raises:
        SimulationError: a call raised; its exception is the cause.
    """
    total = len(items)
    if progress is not None:
        progress(0, total)
    if workers <= 1 or total <= 1:
        out: list[R] = []
        for i, item in enumerate(items):
            out.append(_call_indexed((fn, i, item))[1])
            if progress is not None:
                progress(i + 1, total)
        return out
    results: dict[int, R] = {}
    # "spawn" starts clean interpreters: no fork of a process that may hold threads or locks.
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(min(workers, total), initializer=_init_worker, initargs=(os.getpid(),))
    try:
        jobs = [(fn, i, items[i]) for i in costliest_first(items, cost)]
        for index, value in pool.imap_unordered(_call_indexed, jobs, chunksize=1):
            results[index] = value
            if progress is not None:
                progress(len(results), total)
        pool.close()
    except BaseException:
        terminate(pool)
        raise
    pool.join()
    return [results[i] for i in range(total)]


#: How long :func:`terminate` waits for a pool to end (seconds).
TERMINATE_WAIT = 10.0


def terminate(pool: Any, wait: float = TERMINATE_WAIT) -> bool:
    """Terminate *pool* (its workers killed) and join it, waiting at most *wait* seconds;
    whether it ended.

    ``Pool.terminate()`` can wait for ever: its task handler, sending its last sentinel, waits
    for the result queue's lock, which a worker killed in the middle of sending a result never
    releases (python/cpython#96995, open; the workers are killed by then). It runs in a daemon
    thread here, so that an error in a worker reaches the caller all the same; past the wait
    the pool's own threads (daemons too) are left behind, blocked."""
    ended = threading.Event()

    def stop() -> None:
        pool.terminate()
        pool.join()
        ended.set()

    threading.Thread(target=stop, name="seawall-sim-terminate", daemon=True).start()
    return ended.wait(wait)
