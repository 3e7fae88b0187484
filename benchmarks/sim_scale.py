"""A 1,000-run sweep on 1 and 2 local processes and on a local Dask cluster: wall time, and
whether the results are identical.

Run: python benchmarks/sim_scale.py [--runs 1000] [--repeats 3]

Each run is one trial of `seawall sim sweep` (20 clients at 10/s for 30 s, 3 retries, p = 0.3)
with its own seed, through seawall.sim._trials.run_trials: the same function `--seeds N` uses.
The contenders are interleaved (1 process, 2 processes, Dask, then again) and the best of the
repeats is reported, with the ratio to one process. The Dask cluster (2 single-threaded worker
processes) is started inside each timed run, as `--engine dask` does; its start-up is included.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable
from typing import Any

from _interleaved import best_of

from seawall.sim._published import scenario_parameters
from seawall.sim._trials import run_trials

ARGV = ("--clients", "20", "--duration", "30", "--p", "0.3", "--splits")
ARGV += ("--strategies", "retries_3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    import dask
    import distributed

    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}; "
        f"dask {dask.__version__}, distributed {distributed.__version__}"
    )
    params = scenario_parameters("sweep", ARGV)
    seeds = list(range(args.runs))
    contenders: dict[str, Callable[[], Any]] = {
        "1 process": lambda: run_trials("sweep", params, seeds, workers=1),
        "2 processes": lambda: run_trials("sweep", params, seeds, workers=2),
        "Dask local cluster, 2 workers": lambda: run_trials(
            "sweep", params, seeds, workers=2, engine="dask"
        ),
    }
    best, results = best_of(contenders, args.repeats)
    reference = results["1 process"]
    base = best["1 process"]
    print()
    print(f"{args.runs} runs, best of {args.repeats}")
    print("| where | wall time | runs/s | vs 1 process | results identical |")
    print("|---|---:|---:|---:|---|")
    for name in contenders:
        same = "yes" if results[name] == reference else "NO"
        wall = best[name]
        print(f"| {name} | {wall:.2f} s | {args.runs / wall:,.0f} | {base / wall:.2f}x | {same} |")


if __name__ == "__main__":
    main()
