"""The simulator's engines side by side: one local process, two, and a local Dask cluster of two
single-threaded workers (started inside each timed run, as ``--engine dask`` does), interleaved
rounds, the median round's time and every round's ratio shown, and each result compared with
one process's."""

from __future__ import annotations

import functools
import os
import platform
import statistics
from collections.abc import Callable
from typing import Any, TypeVar

from _interleaved import interleaved_rounds

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
    """Time ``run(workers=..., engine=...)`` on every engine, *repeats* interleaved rounds,
    and print one table: the median wall time, the runs per second (when *runs* is given), the
    ratio to one process in the median and in each round, and whether the engine's *result* is
    the same as one process's."""
    contenders = {name: functools.partial(run, **kw) for name, kw in ENGINES.items()}
    rounds, results = interleaved_rounds(contenders, repeats)
    reference = result(results["1 process"])
    rate = " runs/s |" if runs else ""
    print()
    print(title)
    print(f"| where | median wall time |{rate} vs 1 process | each round | results identical |")
    print("|---|---:|" + ("---:|" if runs else "") + "---:|---|---|")
    for name in contenders:
        same = "yes" if result(results[name]) == reference else "NO"
        wall = statistics.median(r[name] for r in rounds)
        ratios = [r["1 process"] / r[name] for r in rounds]
        each = f" {runs / wall:,.0f} |" if runs else ""
        shown = ", ".join(f"{x:.2f}x" for x in ratios)
        print(
            f"| {name} | {wall:.2f} s |{each} {statistics.median(ratios):.2f}x | {shown} | {same} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
