"""Many seeds of one scenario: per-trial data, means with 95% confidence intervals, and a JSON
document that holds every parameter, the seeds and seawall's version, so that it re-runs exactly.

The document (``seawall sim NAME --seeds N --json``)::

    {"run": {"scenario": "metastable", "parameters": {...}, "seeds": [0, 1, ...],
             "seawall_version": "..."},
     "summary": {"naive.success": {"mean": 0.29, "ci95": [0.27, 0.31], "n": 10}, ...},
     "trials": [{"seed": 0, "metrics": {...}, "result": {...}}, ...]}

``seawall sim --from FILE`` reads ``run`` and runs the same scenario with the same parameters
and seeds. Trials run in worker processes (:func:`~seawall.sim._util.parallel_map`) or, with
``engine="dask"``, on a Dask cluster (:mod:`seawall.sim._dask`); every trial is a pure function of
its scenario, parameters and seed, so the results are identical wherever they ran.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ENGINES",
    "NOT_PARAMETERS",
    "mean_ci",
    "parameters_of",
    "run_trial",
    "run_trials",
    "summarize",
]

ENGINES: tuple[str, ...] = ("processes", "dask")

#: Namespace entries that are not parameters of the scenario (they do not change a result).
NOT_PARAMETERS = frozenset(
    {
        "command",
        "scenario",
        "json",
        "plot",
        "metrics",
        "workers",
        "seed",
        "seeds",
        "from_file",
        "engine",
        "list",
        "scenario_file",
        "policies",
        "cluster",
    }
)

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """The mean of *values* and its 95% confidence interval (Student's t), as (mean, lo, hi).

    One value has no interval: (v, v, v). No values: NaNs.
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = math.fsum(values) / n
    if n == 1:
        return mean, mean, mean
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    half = t * math.sqrt(var / n)
    return mean, mean - half, mean + half


def parameters_of(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's parameters in *args* (everything that can change a result but the seed)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in NOT_PARAMETERS}


def run_trial(job: tuple[str, Mapping[str, Any], int]) -> dict[str, Any]:
    """Run scenario *name* once, with *parameters* and *seed*, in this process.

    Returns ``{"seed", "metrics", "result"}`` with the result as JSON data (a worker sends back
    plain data, not result objects).
    """
    from seawall.sim._registry import SCENARIOS, load_entry_points
    from seawall.sim._report import jsonable
    from seawall.sim._util import InvalidParameters, SimulationError

    name, parameters, seed = job
    if name not in SCENARIOS:
        load_entry_points()
    scenario = SCENARIOS[name]
    args = argparse.Namespace(**parameters, seed=seed, workers=1)
    try:
        result = scenario.run(args, None)
    except SimulationError:
        raise
    except (ValueError, TypeError) as err:
        # Checked before the simulation starts: the parameters, not the simulator.
        raise InvalidParameters(str(err)) from err
    return {"seed": seed, "metrics": metrics_of(scenario, result), "result": jsonable(result)}


def metrics_of(scenario: Any, result: Any) -> dict[str, float | None]:
    """The scenario's headline numbers for *result* (its ``metrics`` function, else the
    top-level numbers of the result)."""
    from seawall.sim._report import jsonable

    if scenario.metrics is not None:
        out = scenario.metrics(result)
    else:
        data = jsonable(result)
        out = {}
        if isinstance(data, dict):
            for k, v in data.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = v
    return {
        k: (None if v is None or not math.isfinite(float(v)) else float(v)) for k, v in out.items()
    }


def summarize(trials: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per metric, across trials: mean, 95% CI and how many trials had a value."""
    keys: list[str] = []
    for t in trials:
        for k in t["metrics"]:
            if k not in keys:
                keys.append(k)
    out: dict[str, dict[str, Any]] = {}
    for k in keys:
        values = [t["metrics"].get(k) for t in trials]
        present = [float(v) for v in values if v is not None]
        mean, lo, hi = mean_ci(present)
        out[k] = {
            "mean": None if math.isnan(mean) else mean,
            "ci95": None if math.isnan(lo) else [lo, hi],
            "n": len(present),
        }
    return out


def run_trials(
    name: str,
    parameters: Mapping[str, Any],
    seeds: Sequence[int],
    *,
    workers: int = 1,
    engine: str = "processes",
    cluster: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run scenario *name* once per seed and return the document described above.

    Args:
        name: a registered scenario.
        parameters: its parameters (as :func:`parameters_of` gives them).
        seeds: the seeds, one trial each.
        workers: local processes (engine ``processes``), or Dask workers of a local cluster.
        engine: ``processes`` or ``dask``.
        cluster: with ``dask``, the address of an existing scheduler (else a local cluster).
        progress: called with (trials done, trials in all).

    Raises:
        ValueError: an unknown engine, or no seeds.
    """
    from seawall import __version__
    from seawall.sim._util import parallel_map

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    params = dict(parameters)
    jobs = [(name, params, s) for s in seeds]
    if engine == "dask":
        from seawall.sim._dask import dask_map

        trials = dask_map(run_trial, jobs, workers=workers, address=cluster, progress=progress)
    else:
        trials = parallel_map(run_trial, jobs, workers=workers, progress=progress)
    return {
        "run": {
            "scenario": name,
            "parameters": params,
            "seeds": seeds,
            "seawall_version": __version__,
        },
        "summary": summarize(trials),
        "trials": trials,
    }
