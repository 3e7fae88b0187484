"""The simulator's engines side by side: one local process, two, and a local Dask cluster of two
single-threaded workers (started inside each timed run, as ``--engine dask`` does), interleaved,
the best of the repeats kept, and each result compared with one process's."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable
from typing import Any, TypeVar

from _interleaved import best_of

T = TypeVar("T")

#: Each contender's engine arguments (``workers``, ``engine``) of run_trials / run_grid.
ENGINES: dict[str, dict[str, Any]] = {
    "1 process": {"workers": 1},
    "2 processes": {"workers": 2},
    "Dask local cluster, 2 workers": {"workers": 2, "engine": "dask"},
}


def print_machine() -> None:
    """The machine line beside every table: cores, Python, dask, the load."""
    import dask
    import distributed

    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}; "
        f"dask {dask.__version__}, distributed {distributed.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def compare_engines(
    run: Callable[..., T],
    repeats: int,
    title: str,
    *,
    result: Callable[[T], object] = lambda r: r,
    runs: int | None = None,
) -> None:
    """Time ``run(workers=..., engine=...)`` on every engine and print one table: the wall time,
    the runs per second (when *runs* is given), the ratio to one process, and whether the
    engine's *result* is the same as one process's."""
    contenders = {name: functools.partial(run, **kw) for name, kw in ENGINES.items()}
    best, results = best_of(contenders, repeats)
    reference = result(results["1 process"])
    base = best["1 process"]
    rate = " runs/s |" if runs else ""
    print()
    print(title)
    print(f"| where | wall time |{rate} vs 1 process | results identical |")
    print("|---|---:|" + ("---:|" if runs else "") + "---:|---|")
    for name in contenders:
        same = "yes" if result(results[name]) == reference else "NO"
        wall = best[name]
        each = f" {runs / wall:,.0f} |" if runs else ""
        print(f"| {name} | {wall:.2f} s |{each} {base / wall:.2f}x | {same} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
