"""Grids: one scenario over every combination of some of its parameters, each cell over seeds.

``seawall sim occ --grid base=0.005,0.01 cap=1,2 --seeds 10`` runs the four cells (every
combination of the values given), each with seeds 0 to 9; every trial of every cell goes to the
same pool of processes (or Dask workers) at once, so the cells run side by side. The JSON
document is the ``--seeds`` one per cell, under a ``run`` record that holds the grid, so that
``seawall sim --from FILE`` re-runs it::

    {"run": {"scenario": "occ", "parameters": {...}, "grid": {"base": [...], "cap": [...]},
             "seeds": [...], "seawall_version": "..."},
     "cells": [{"parameters": {"base": 0.005, "cap": 1.0}, "summary": {...},
                "trials": [...]}, ...]}

A grid value is parsed as the option would parse it on the command line; an option that takes
several values (``--clients 10 20``) takes one per cell (``--grid clients=10,20,50``).
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seawall.sim._args import MAX_TRIALS

__all__ = ["grid_cells", "parse_grid", "run_grid"]

#: At most this many cells in one grid (a typo should not start a week of work).
MAX_CELLS = 10_000


def _action(parser: argparse.ArgumentParser, key: str) -> argparse.Action:
    dest = key.replace("-", "_")
    for action in parser._actions:
        if action.dest == dest and action.option_strings:
            return action
    raise ValueError(f"--grid {key}: not an option of this scenario")


def parse_grid(parser: argparse.ArgumentParser, specs: Sequence[str]) -> dict[str, list[Any]]:
    """``["base=0.005,0.01", "cap=1,2"]`` as ``{"base": [0.005, 0.01], "cap": [1.0, 2.0]}``,
    each value parsed by the scenario's own option (*parser* is its subparser).

    Raises:
        ValueError: a malformed spec, an unknown or repeated key, a value the option refuses,
            or more than :data:`MAX_CELLS` cells.
    """
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ValueError(f"--grid {spec!r}: write KEY=V1,V2,...")
        action = _action(parser, key)
        dest = action.dest
        if dest in grid:
            raise ValueError(f"--grid {key}: given twice")
        if action.nargs == 0:
            raise ValueError(f"--grid {key}: a flag takes no values")
        values = []
        for raw in text.split(","):
            raw = raw.strip()
            try:
                value = action.type(raw) if callable(action.type) else raw
            except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
                raise ValueError(f"--grid {key}={raw}: {err}") from None
            if action.choices is not None and value not in action.choices:
                raise ValueError(f"--grid {key}={raw}: not one of {list(action.choices)}")
            many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
            values.append([value] if many else value)
        grid[dest] = values
    size = 1
    for values in grid.values():
        size *= len(values)
    if size > MAX_CELLS:
        raise ValueError(f"--grid: {size} cells; at most {MAX_CELLS}")
    return grid


def grid_cells(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first key varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


def run_grid(
    name: str,
    parameters: Mapping[str, Any],
    grid: Mapping[str, Sequence[Any]],
    seeds: Sequence[int],
    *,
    workers: int = 1,
    engine: str = "processes",
    cluster: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run scenario *name* with *parameters*, over every cell of *grid*, once per seed; the
    document described above. The trials of all cells run in one pool."""
    from seawall import __version__
    from seawall.sim._trials import check_engine, map_trials, summarize

    check_engine(engine)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    cells = grid_cells(grid)
    jobs = [(name, {**parameters, **cell}, seed) for cell in cells for seed in seeds]
    trials = map_trials(jobs, workers=workers, engine=engine, cluster=cluster, progress=progress)
    n = len(seeds)
    out = []
    for i, cell in enumerate(cells):
        mine = trials[i * n : (i + 1) * n]
        out.append({"parameters": cell, "summary": summarize(mine), "trials": mine})
    return {
        "run": {
            "scenario": name,
            "parameters": dict(parameters),
            "grid": {k: list(v) for k, v in grid.items()},
            "seeds": seeds,
            "seawall_version": __version__,
        },
        "cells": out,
    }


def _cell_label(cell: Mapping[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, list):
            return " ".join(show(x) for x in v)
        return f"{v:g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={show(v)}" for k, v in cell.items())


def render_grid(doc: Mapping[str, Any], console: Any, metrics: Sequence[str] = ()) -> None:
    """One row per cell and metric: mean and 95% interval (*metrics*: only those)."""
    from rich.table import Table

    run = doc["run"]
    seeds = run["seeds"]
    table = Table(
        title=f"{run['scenario']}: {len(doc['cells'])} cells x {len(seeds)} seeds, mean and 95% CI"
    )
    for column in ("cell", "metric", "mean", "95% CI"):
        table.add_column(column, justify="left" if column in ("cell", "metric") else "right")
    for cell in doc["cells"]:
        label = _cell_label(cell["parameters"])
        for key, s in cell["summary"].items():
            if metrics and key not in metrics:
                continue
            mean = "-" if s["mean"] is None else f"{s['mean']:.4g}"
            if s.get("method") == "wilson":
                mean += f" ({s['successes']} of {s['trials']} runs)"
            ci = "-" if s["ci95"] is None else f"[{s['ci95'][0]:.4g}, {s['ci95'][1]:.4g}]"
            table.add_row(label, key, mean, ci)
            label = ""
    console.print(table)


def run_grid_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``seawall sim NAME --grid KEY=V1,V2 ...``: the table, or the JSON with ``--json``."""
    import json
    import sys

    from rich.console import Console

    from seawall.sim._trials import parameters_of

    if getattr(args, "metrics", False) or getattr(args, "plot", None):
        raise ValueError("--grid runs many cells: it does not go with --metrics or --plot")
    grid = parse_grid(parser, args.grid)
    params = parameters_of(args)
    for key in grid:
        params.pop(key, None)
    count = args.seeds or 1
    trials = math.prod(len(values) for values in grid.values()) * count
    if trials > MAX_TRIALS:
        raise ValueError(
            f"--grid: {trials // count} cells x {count} seeds = {trials} trials; "
            f"at most {MAX_TRIALS}"
        )
    seeds = list(range(args.seed, args.seed + count))
    doc = run_grid(
        args.scenario,
        params,
        grid,
        seeds,
        workers=args.workers,
        engine=args.engine,
        cluster=args.cluster,
    )
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        render_grid(doc, Console())
    return 0
