"""Trials on a Dask cluster (the ``dask`` extra): a local one, or an existing scheduler.

Each trial is a pure function of (scenario, parameters, seed), so where it runs does not change
its result: ``engine="dask"`` gives the same document as local processes for the same seeds.

A local cluster's worker processes stop with the command: when it exits (Ctrl-C, SIGTERM) it
closes the cluster, and when it is killed outright each worker exits as soon as the pipe to its
parent closes (distributed's own ``AsyncProcess`` watch). Ctrl-C in a terminal reaches the whole
process group: the workers ignore it (:func:`dask_setup`, run in each worker as a preload), so
the command alone handles it and closes them in order, instead of each dying mid-trial.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["chunk_size", "dask_map", "dask_setup"]

#: Chunks per worker thread: enough that a slow chunk does not leave the others idle at the end.
CHUNKS_PER_WORKER = 4

T = TypeVar("T")
R = TypeVar("R")


def dask_setup(worker: Any) -> None:
    """Run by distributed in each worker process of a local cluster (a ``preload``)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        # Ctrl-C goes to the process group; the command stops the cluster itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)


#: Up to this many items per worker thread, each item is a task of its own.
SINGLE_TASKS_PER_WORKER = 16


def chunk_size(total: int, threads: int) -> int:
    """How many items one task runs: one while there are few items for the worker threads,
    else about :data:`CHUNKS_PER_WORKER` tasks per thread.

    A task per item costs the scheduler a round trip and a pickled result each, which for many
    small trials (thousands of seeds) is more than the trials themselves; with few items, as
    many tasks as items spread the work best.
    """
    threads = max(1, threads)
    if total <= threads * SINGLE_TASKS_PER_WORKER:
        return 1
    return max(1, math.ceil(total / (threads * CHUNKS_PER_WORKER)))


def _run_chunk(arg: tuple[Callable[[Any], Any], Sequence[Any]]) -> list[Any]:
    from seawall.sim._util import simulate

    fn, items = arg
    return [simulate(fn, item) for item in items]  # each isolated, as a task of its own would be


def dask_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    chunk: int | None = None,
    cost: Callable[[T], float] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]`` on Dask: on the scheduler at *address*, or on a local cluster of
    *workers* single-threaded worker processes started (and stopped) for the call.

    Items go in chunks of *chunk* per task (``None``: :func:`chunk_size` for the cluster's worker
    threads); the results are the same whatever the chunks. With *cost* (an estimate of each
    item's run time) the costliest items are submitted first, and so run first.

    Raises:
        ValueError: Dask is not installed (the ``dask`` extra), or *chunk* < 1.
    """
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk!r}")
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ValueError(
            "engine 'dask' needs the dask extra: pip install 'seawall[dask]'"
        ) from None
    from seawall.sim._util import costliest_first, simulate

    total = len(items)
    if progress is not None:
        progress(0, total)
    cluster: Any = None
    if address is None:
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=max(1, workers),
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port: never 8787 taken by another cluster
            silence_logs=50,  # logging.CRITICAL: a worker losing its scheduler at close
            preload=["seawall.sim._dask"],  # dask_setup, above
        )
        address = cluster.scheduler_address
    try:
        with Client(address) as client:  # type: ignore[no-untyped-call]
            threads = sum(client.nthreads().values()) or workers
            size = chunk if chunk is not None else chunk_size(total, threads)
            count = math.ceil(total / size) if total else 0
            # Chunk j holds the j-th costliest item, the (j + count)-th, ...: the costliest
            # items (or, without costs, neighbours: a grid's cells of growing cost) go to
            # different chunks, and the chunk with the costliest item is submitted first.
            # The scheduler starts tasks in the order they were submitted.
            order = costliest_first(items, cost)
            positions = [order[j::count] for j in range(count)]
            # pure=False: every chunk runs, even two with equal arguments.
            futures = [
                client.submit(simulate, _run_chunk, (fn, [items[i] for i in p]), pure=False)
                for p in positions
            ]
            index = {f.key: p for p, f in zip(positions, futures, strict=True)}
            results: dict[int, R] = {}
            for future in as_completed(futures):  # type: ignore[no-untyped-call]
                for i, value in zip(index[future.key], future.result(), strict=True):
                    results[i] = value
                if progress is not None:
                    progress(len(results), total)
            return [results[i] for i in range(total)]
    finally:
        if cluster is not None:
            cluster.close()
