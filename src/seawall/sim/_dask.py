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

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["dask_map", "dask_setup"]

T = TypeVar("T")
R = TypeVar("R")


def dask_setup(worker: Any) -> None:
    """Run by distributed in each worker process of a local cluster (a ``preload``)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        # Ctrl-C goes to the process group; the command stops the cluster itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def dask_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    workers: int = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[R]:
    """``[fn(x) for x in items]`` on Dask: on the scheduler at *address*, or on a local cluster of
    *workers* single-threaded worker processes started (and stopped) for the call.

    Raises:
        ValueError: Dask is not installed (the ``dask`` extra).
    """
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ValueError(
            "engine 'dask' needs the dask extra: pip install 'seawall[dask]'"
        ) from None
    from seawall.sim._util import simulate

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
            # pure=False: every trial runs, even two with equal arguments.
            futures = [client.submit(simulate, fn, item, pure=False) for item in items]
            index = {f.key: i for i, f in enumerate(futures)}
            results: dict[int, R] = {}
            for future in as_completed(futures):  # type: ignore[no-untyped-call]
                results[index[future.key]] = future.result()
                if progress is not None:
                    progress(len(results), total)
            return [results[i] for i in range(total)]
    finally:
        if cluster is not None:
            cluster.close()
