"""Seeded randomness and a small process pool for the scenarios."""

from __future__ import annotations

import multiprocessing
import random
import signal
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["parallel_map", "trial_rng"]

T = TypeVar("T")
R = TypeVar("R")


def trial_rng(seed: int, *parts: object) -> random.Random:
    """A generator for one trial, derived from the seed and the trial's coordinates.

    A string seed is hashed with SHA-512 by :class:`random.Random`, so the stream is the same in
    every process and on every run, whatever order the trials run in.
    """
    return random.Random(f"seawall-sim:{seed}:" + ":".join(str(p) for p in parts))


def _ignore_sigint() -> None:
    # Ctrl-C goes to the whole process group; the parent alone handles it and stops the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _call_indexed(arg: tuple[Callable[[T], R], int, T]) -> tuple[int, R]:
    fn, index, item = arg
    return index, fn(item)


def parallel_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]``, over *workers* processes when there is more than one.

    *fn* must be a module-level function (it is pickled). Results come back in input order.
    """
    total = len(items)
    if progress is not None:
        progress(0, total)
    if workers <= 1 or total <= 1:
        out: list[R] = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress is not None:
                progress(i + 1, total)
        return out
    results: dict[int, R] = {}
    # "spawn" starts clean interpreters: no fork of a process that may hold threads or locks.
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(min(workers, total), initializer=_ignore_sigint)
    try:
        jobs = [(fn, i, item) for i, item in enumerate(items)]
        for index, value in pool.imap_unordered(_call_indexed, jobs, chunksize=1):
            results[index] = value
            if progress is not None:
                progress(len(results), total)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return [results[i] for i in range(total)]
