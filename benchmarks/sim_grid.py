"""The OCC grid as a `--grid` of its client counts: one process, two, and a local Dask cluster of
two workers; wall time, and whether the results are identical.

Run: python benchmarks/sim_grid.py [--trials 100] [--repeats 2]

The grid is `seawall sim occ --grid clients=10,20,...,190` (19 cells, the five algorithms,
--trials trials each, one seed), through seawall.sim._grid.run_grid: the same function the
command uses. The contenders are interleaved and the best of the repeats is reported, with the
ratio to one process. Each Dask cluster (2 single-threaded worker processes) is started inside
its timed run, as `--engine dask` does.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable
from typing import Any

from _interleaved import best_of

from seawall.sim._grid import run_grid
from seawall.sim._published import scenario_parameters

CLIENTS = list(range(10, 200, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import dask
    import distributed

    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}; "
        f"dask {dask.__version__}, distributed {distributed.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    params = scenario_parameters("occ", ("--trials", str(args.trials)))
    params.pop("clients")
    grid = {"clients": [[n] for n in CLIENTS]}

    contenders: dict[str, Callable[[], Any]] = {
        "1 process": lambda: run_grid("occ", params, grid, [0], workers=1),
        "2 processes": lambda: run_grid("occ", params, grid, [0], workers=2),
        "Dask local cluster, 2 workers": lambda: run_grid(
            "occ", params, grid, [0], workers=2, engine="dask"
        ),
    }
    best, results = best_of(contenders, args.repeats)
    reference = results["1 process"]
    base = best["1 process"]
    print()
    print(f"OCC grid, 19 cells x 5 algorithms x {args.trials} trials, best of {args.repeats}")
    print("| where | wall time | vs 1 process | results identical |")
    print("|---|---:|---:|---|")
    for name in contenders:
        same = "yes" if results[name]["cells"] == reference["cells"] else "NO"
        print(f"| {name} | {best[name]:.2f} s | {base / best[name]:.2f}x | {same} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
