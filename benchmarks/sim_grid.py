"""The OCC grid as a `--grid` of its client counts: one process, two, and a local Dask cluster of
two workers; wall time, and whether the results are identical.

Run: python benchmarks/sim_grid.py [--trials 100] [--repeats 5]

The grid is `seawall sim occ --grid clients=10,20,...,190` (19 cells, the five algorithms,
--trials trials each, one seed), through seawall.sim._grid.run_grid: the same function the
command uses. The contenders are interleaved; the median round's time is reported, with the ratio
to one process in the median and in every round. Each Dask cluster (2 single-threaded worker
processes) is started inside its timed run, as `--engine dask` does.
"""

from __future__ import annotations

import argparse

from _engines import compare_engines, print_machine

from seawall.sim._grid import run_grid
from seawall.sim._published import scenario_parameters

CLIENTS = list(range(10, 200, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print_machine()
    params = scenario_parameters("occ", ("--trials", str(args.trials)))
    params.pop("clients")
    grid = {"clients": [[n] for n in CLIENTS]}
    compare_engines(
        lambda **engine: run_grid("occ", params, grid, [0], **engine),
        args.repeats,
        f"OCC grid, 19 cells x 5 algorithms x {args.trials} trials, "
        f"median of {args.repeats} interleaved rounds",
        result=lambda doc: doc["cells"],
    )


if __name__ == "__main__":
    main()
