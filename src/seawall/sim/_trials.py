"""Many seeds of one scenario: per-trial data, means with 95% confidence intervals, and a JSON
document that holds every parameter, the seeds and seawall's version, so that it re-runs exactly.

The intervals respect the range of what they bound. A share of runs (``NAME.recovered``, with
the trial's ``NAME.runs``: how many runs of a bistable system came back) pools the runs of every
trial and takes the Wilson score interval of that proportion, which stays inside [0, 1] and is
not empty at 0 of 30 or 30 of 30. Every other metric (rates, goodput, ratios such as a p99.9
cut) takes a percentile bootstrap of the mean over trials: resampling the trials themselves, so
the interval stays between the smallest and the largest trial and never goes below zero for a
goodput. The bootstrap's own draws come from a fixed seed: the same trials give the same
interval.

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
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ENGINES",
    "NOT_PARAMETERS",
    "bootstrap_ci",
    "mean_ci",
    "parameters_of",
    "run_trial",
    "run_trials",
    "summarize",
    "summarize_values",
    "wilson",
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
        "grid",
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

    Symmetric, so it can leave the range of the values (below zero for a goodput near zero):
    :func:`summarize` uses :func:`bootstrap_ci` and :func:`wilson` instead.

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


#: Resamples of the percentile bootstrap, and the seed of its draws (fixed: a pure function).
BOOTSTRAP_RESAMPLES = 2000
_BOOTSTRAP_SEED = 20_250_101
_Z95 = 1.959963984540054  # the two-sided 95% quantile of the standard normal


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion, *successes* of *trials* (``trials >= 1``).

    Unlike the normal approximation, it stays within [0, 1] and does not collapse to a point at
    0 of n or n of n (0 of 30 gives [0, 0.114]).
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    n, z = trials, _Z95
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    # Exactly 0 or 1 at the ends: rounding must not push a bound past the observed share.
    return (0.0 if successes == 0 else lo), (1.0 if successes == n else hi)


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean of *values*.

    Resamples *values* with replacement; the 2.5% and 97.5% points of the resampled means. It
    lies within ``[min(values), max(values)]``, so it respects any range the values respect.
    One value (or all equal): that value twice. Deterministic: the draws have a fixed seed.
    """
    n = len(values)
    if n == 0:
        raise ValueError("values must not be empty")
    lo_v, hi_v = min(values), max(values)
    if n == 1 or lo_v == hi_v:
        return float(lo_v), float(hi_v)
    rng = random.Random(_BOOTSTRAP_SEED)
    pick = rng.choices
    means = sorted(math.fsum(pick(values, k=n)) / n for _ in range(resamples))
    lo = means[int(0.025 * (resamples - 1))]
    hi = means[math.ceil(0.975 * (resamples - 1))]
    return max(lo_v, lo), min(hi_v, hi)


def summarize_values(
    key: str, metrics: Sequence[Mapping[str, Any]], values: Sequence[float | None]
) -> dict[str, Any]:
    """The summary of one metric: *values* (one per trial, ``None`` where a trial had none);
    *metrics* are the trials' metrics, where a share of runs finds its ``.runs``.

    ``{"mean", "ci95", "n", "method"}``; a share of runs adds ``successes`` and ``trials`` (runs
    pooled over the trials) and its method is ``wilson``; otherwise the method is
    ``bootstrap`` (``single`` for one value, ``none`` for none).
    """
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"mean": None, "ci95": None, "n": 0, "method": "none"}
    if key.endswith(".recovered"):
        runs_key = key[: -len(".recovered")] + ".runs"
        pairs = [
            (float(v), m.get(runs_key))
            for v, m in zip(values, metrics, strict=True)
            if v is not None
        ]
        runs = [r for _, r in pairs if isinstance(r, (int, float)) and r >= 1]
        if len(runs) == len(pairs):
            k = sum(round(v * r) for (v, _), r in zip(pairs, runs, strict=True))
            n = sum(int(r) for r in runs)
            lo, hi = wilson(k, n)
            return {
                "mean": k / n,
                "ci95": [lo, hi],
                "n": len(pairs),
                "method": "wilson",
                "successes": k,
                "trials": n,
            }
    mean = math.fsum(present) / len(present)
    if len(present) == 1:
        return {"mean": mean, "ci95": None, "n": 1, "method": "single"}
    lo, hi = bootstrap_ci(present)
    return {"mean": mean, "ci95": [lo, hi], "n": len(present), "method": "bootstrap"}


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


def check_engine(engine: str) -> None:
    """Raises ValueError if *engine* is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")


def trial_cost(job: tuple[str, Mapping[str, Any], int]) -> float:
    """An estimate of one trial's run time, from its scenario's ``cost`` (0 without one).

    Only the order of the estimates matters: the costliest trials are started first. A trial
    whose parameters the estimate cannot read costs 0 (its scenario refuses it when it runs).
    """
    from seawall.sim._registry import SCENARIOS

    name, parameters, _ = job
    scenario = SCENARIOS.get(name)
    if scenario is None or scenario.cost is None:
        return 0.0
    try:
        return float(scenario.cost(parameters))
    except (TypeError, ValueError, KeyError, OverflowError):
        return 0.0


def map_trials(
    jobs: Sequence[tuple[str, Mapping[str, Any], int]],
    *,
    workers: int = 1,
    engine: str = "processes",
    cluster: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_trial` for each job, in order, on *engine*; the costliest trials start first
    (:func:`trial_cost`), so that the workers finish close together."""
    from seawall.sim._util import parallel_map

    check_engine(engine)
    if engine == "dask":
        from seawall.sim._dask import dask_map

        return dask_map(
            run_trial, jobs, workers=workers, address=cluster, progress=progress, cost=trial_cost
        )
    return parallel_map(run_trial, jobs, workers=workers, progress=progress, cost=trial_cost)


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
    """Per metric, across trials: mean, 95% CI (Wilson for a share of runs, else a bootstrap
    of the mean), how many trials had a value, and the method (see :func:`summarize_values`)."""
    keys: list[str] = []
    for t in trials:
        for k in t["metrics"]:
            if k not in keys:
                keys.append(k)
    metrics = [t["metrics"] for t in trials]
    return {k: summarize_values(k, metrics, [m.get(k) for m in metrics]) for k in keys}


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

    check_engine(engine)
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    params = dict(parameters)
    jobs = [(name, params, s) for s in seeds]
    trials = map_trials(jobs, workers=workers, engine=engine, cluster=cluster, progress=progress)
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
