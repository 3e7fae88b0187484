"""A 1,000-run sweep on 1 and 2 local processes and on a local Dask cluster: wall time, and
whether the results are identical.

Run: python benchmarks/sim_scale.py [--runs 1000] [--repeats 5]

Each run is one trial of `seawall sim sweep` (20 clients at 10/s for 30 s, 3 retries, p = 0.3)
with its own seed, through seawall.sim._trials.run_trials: the same function `--seeds N` uses.
The contenders are interleaved (1 process, 2 processes, Dask, then again); the median round's
time is reported, with the ratio to one process in the median and in every round. The Dask cluster (2 single-threaded worker
processes) is started inside each timed run, as `--engine dask` does; its start-up is included.
"""

from __future__ import annotations

import argparse

from _engines import compare_engines, print_machine

from seawall.sim._published import scenario_parameters
from seawall.sim._trials import run_trials

ARGV = ("--clients", "20", "--duration", "30", "--p", "0.3", "--splits")
ARGV += ("--strategies", "retries_3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print_machine()
    params = scenario_parameters("sweep", ARGV)
    seeds = list(range(args.runs))
    compare_engines(
        lambda **engine: run_trials("sweep", params, seeds, **engine),
        args.repeats,
        f"{args.runs} runs, median of {args.repeats} interleaved rounds",
        runs=args.runs,
    )


if __name__ == "__main__":
    main()
