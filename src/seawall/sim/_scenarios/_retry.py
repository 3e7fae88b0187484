"""The command-line entries of the retry scenarios storm, occ, amplify, fleet and sweep:
options, short demo versions, tables, plots, and the headline numbers for ``--seeds``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from seawall.sim import _report
from seawall.sim._amplify import amplify
from seawall.sim._args import choice as _choice
from seawall.sim._args import count, positive, probability, whole
from seawall.sim._args import non_negative as _non_negative
from seawall.sim._fleet import fleet
from seawall.sim._occ import OCC_ALGORITHMS, occ
from seawall.sim._registry import Progress, Scenario, register_scenario
from seawall.sim._storm import storm
from seawall.sim._sweep import (
    DEFAULT_FAILURE_RATES,
    DEFAULT_SWEEP_STRATEGIES,
    SWEEP_STRATEGIES,
    sweep,
)

__all__: list[str] = []


# -- headline numbers for --seeds (means with 95% confidence intervals) --------------------


def _storm_metrics(r: Any) -> dict[str, float | None]:
    return {f"peak.{jitter}": float(n) for jitter, n in r.peaks.items()}


def _occ_metrics(r: Any) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for row in r.rows:
        out[f"{row.algorithm}.N{row.clients}.calls"] = row.calls
        out[f"{row.algorithm}.N{row.clients}.completion"] = row.completion
    return out


def _amplify_metrics(r: Any) -> dict[str, float | None]:
    return {f"{row.strategy}.per_request": row.per_request for row in r.rows}


def _fleet_metrics(r: Any) -> dict[str, float | None]:
    return {f"{row.strategy}.P{row.processes}.per_request": row.per_request for row in r.rows}


def _sweep_metrics(r: Any) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for row in r.rows:
        key = f"{row.strategy}.p{row.failure_rate:g}"
        out[f"{key}.success"] = row.success
        out[f"{key}.load"] = row.load
    for row in r.splits:
        key = f"{row.strategy}.clients{row.clients}.p{row.failure_rate:g}"
        out[f"{key}.success"] = row.success
        out[f"{key}.load"] = row.load
    return out


# -- storm ---------------------------------------------------------------------------------


def _storm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=count, default=100, help="clients failing at once (100)")
    p.add_argument("--max-attempts", type=count, default=5, help="attempts per call (5)")
    p.add_argument("--base", type=positive, default=0.1, help="backoff base, seconds (0.1)")
    p.add_argument("--cap", type=positive, default=2.0, help="backoff cap, seconds (2)")
    p.add_argument(
        "--outage", type=_non_negative, default=1.0, help="seconds the dependency is down (1)"
    )


def _storm_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return storm(
        a.clients,
        max_attempts=a.max_attempts,
        base=a.base,
        cap=a.cap,
        outage=a.outage,
        seed=a.seed,
    )


register_scenario(
    Scenario(
        name="storm",
        metrics=_storm_metrics,
        summary="one client's retry trace, and N clients' retry times by jitter kind",
        description=(
            "(a) One client calls a dependency that is down for --outage seconds: each attempt, "
            "its failure and the wait chosen by the policy, until success or give-up. "
            "(b) --clients clients fail at the same instant and retry: a histogram of retry "
            "times without jitter (a storm: all at once) and with full jitter (spread)."
        ),
        add_arguments=_storm_args,
        run=_storm_run,
        demo=lambda seed, workers, progress: storm(seed=seed),
        render=_report.render_storm,
        plot=_report.plot_storm,
    )
)


# -- occ -----------------------------------------------------------------------------------


def _occ_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clients",
        type=count,
        nargs="+",
        default=list(range(10, 200, 10)),
        metavar="N",
        help="numbers of clients (10 20 ... 190)",
    )
    p.add_argument("--trials", type=count, default=100, help="trials per cell (100)")
    p.add_argument(
        "--algorithms",
        type=_choice(OCC_ALGORITHMS),
        nargs="+",
        default=list(OCC_ALGORITHMS),
        metavar="NAME",
        help=f"backoff algorithms ({' '.join(OCC_ALGORITHMS)})",
    )
    p.add_argument("--base", type=positive, default=0.005, help="backoff base, seconds (0.005)")
    p.add_argument("--cap", type=positive, default=2.0, help="backoff cap, seconds (2)")


def _occ_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return occ(
        a.clients,
        algorithms=a.algorithms,
        trials=a.trials,
        seed=a.seed,
        base=a.base,
        cap=a.cap,
        workers=a.workers,
        progress=progress,
    )


def _occ_cost(p: Mapping[str, Any]) -> float:
    # Measured: one trial of N clients takes about N ** 1.5 (10 clients 0.1 s, 190 clients 5 s
    # for 100 trials of the five algorithms).
    clients = p.get("clients", [100])
    return float(
        p.get("trials", 100)
        * len(p.get("algorithms", OCC_ALGORITHMS))
        * sum(int(n) ** 1.5 for n in clients)
    )


register_scenario(
    Scenario(
        name="occ",
        metrics=_occ_metrics,
        cost=_occ_cost,
        summary="optimistic concurrency: N clients, conditional writes, backoff on conflict",
        description=(
            "The AWS Architecture Blog experiment (Exponential Backoff And Jitter, 2015): N "
            "clients read a versioned row and write it conditionally, backing off on conflict "
            "until their one write succeeds. Network hops take |Normal(10 ms, 2 ms)|. Reports "
            "mean write calls and time to completion per algorithm."
        ),
        add_arguments=_occ_args,
        run=_occ_run,
        demo=lambda seed, workers, progress: occ(
            (10, 25, 50, 100, 150), trials=20, seed=seed, workers=workers, progress=progress
        ),
        render=_report.render_occ,
        plot=_report.plot_occ,
    )
)


# -- amplify -------------------------------------------------------------------------------


def _amplify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layers", type=count, default=3, help="services above the leaf (3)")
    p.add_argument(
        "--attempts", type=count, default=4, help="attempts per layer (4: the SRE book's 3 retries)"
    )
    p.add_argument("--requests", type=count, default=1000, help="requests sent (1000)")
    p.add_argument("--ratio", type=probability, default=0.1, help="retry budget ratio (0.1)")


def _amplify_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    if a.ratio == 0:
        raise ValueError("--ratio must be > 0")
    return amplify(a.layers, a.attempts, a.requests, ratio=a.ratio, seed=a.seed)


register_scenario(
    Scenario(
        name="amplify",
        metrics=_amplify_metrics,
        summary="L layers x A attempts against a failing leaf: naive, one-layer rule, budget",
        description=(
            "The Google SRE book's example (ch. 22): requests go through --layers services, "
            "each a real RetryPolicy with --attempts attempts, to a leaf that always fails. "
            "Leaf calls per request: naive nesting (A**L), seawall's one-layer rule (A), and "
            "with a retry budget (about 1 + ratio)."
        ),
        add_arguments=_amplify_args,
        run=_amplify_run,
        demo=lambda seed, workers, progress: amplify(seed=seed),
        render=_report.render_amplify,
    )
)


# -- fleet ---------------------------------------------------------------------------------


def _fleet_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--processes", type=count, nargs="+", default=[1, 2, 4, 8, 16, 32],
        help="fleet sizes (1 2 4 8 16 32)",
    )  # fmt: skip
    p.add_argument("--rate", type=positive, default=2.0, help="calls/s per process (2)")
    p.add_argument("--duration", type=positive, default=60.0, help="seconds simulated (60)")
    p.add_argument("--ratio", type=probability, default=0.1, help="retry budget ratio (0.1)")
    p.add_argument(
        "--min-per-second", type=_non_negative, default=10.0, help="budget floor per s (10)"
    )


def _fleet_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return fleet(
        a.processes,
        rate=a.rate,
        duration=a.duration,
        ratio=a.ratio,
        min_per_second=a.min_per_second,
        seed=a.seed,
    )


register_scenario(
    Scenario(
        name="fleet",
        metrics=_fleet_metrics,
        summary="N client processes against a dead dependency: a budget each, or one shared",
        description=(
            "Each of --processes client processes calls a dependency that is down, through a "
            "real RetryPolicy. With a RetryBudget per process every process has its own floor, "
            "so the fleet's amplification does not fall as the fleet grows; with one budget "
            "for the fleet (seawall.redis.SharedRetryBudget) it falls towards 1 + ratio."
        ),
        add_arguments=_fleet_args,
        run=_fleet_run,
        demo=lambda seed, workers, progress: fleet((1, 4, 16), duration=30.0, seed=seed),
        render=_report.render_fleet,
    )
)


# -- sweep ---------------------------------------------------------------------------------


def _sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=count, default=100, help="open-loop clients (100)")
    p.add_argument("--rate", type=positive, default=10.0, help="requests/s per client (10)")
    p.add_argument("--duration", type=positive, default=10.0, help="seconds of arrivals (10)")
    p.add_argument(
        "--p",
        dest="failure_rates",
        type=probability,
        nargs="+",
        default=list(DEFAULT_FAILURE_RATES),
        metavar="P",
        help="probabilities that an attempt fails (1%% 5%% 10%% 20%% 30%% 50%% 75%%)",
    )
    p.add_argument(
        "--strategies",
        type=_choice(SWEEP_STRATEGIES),
        nargs="+",
        default=list(DEFAULT_SWEEP_STRATEGIES),
        metavar="NAME",
        help=f"strategies ({' '.join(SWEEP_STRATEGIES)})",
    )
    p.add_argument(
        "--splits",
        type=whole,
        nargs="*",
        default=[10, 100, 1000],
        metavar="N",
        help="client counts sharing the same total load (10 100 1000; none: skip)",
    )
    p.add_argument(
        "--split-p", type=probability, default=0.5, help="failure probability for the splits (0.5)"
    )


def _sweep_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    splits = [n for n in a.splits if n > 0]
    if len(splits) != len(a.splits):
        raise ValueError("--splits must be whole numbers >= 1")
    return sweep(
        a.clients,
        rate=a.rate,
        duration=a.duration,
        failure_rates=a.failure_rates,
        strategies=a.strategies,
        splits=splits,
        split_failure_rate=a.split_p,
        seed=a.seed,
        workers=a.workers,
        progress=progress,
    )


register_scenario(
    Scenario(
        name="sweep",
        metrics=_sweep_metrics,
        summary="success rate and load of retry strategies as the failure rate grows",
        description=(
            "After Brooker, 'Fixing retries with token buckets and circuit breakers' (2022): "
            "100 open-loop Poisson clients at 10/s for 10 s; each attempt fails independently "
            "with probability p. Compares no retries, 3 retries, RetryBudget, TokenBucket and "
            "AdaptiveThrottle (each per client), and by name the post's own bucket and breaker "
            "(brooker_bucket, brooker_breaker): success rate and load (attempts per request). "
            "Then the same total load split over other numbers of clients."
        ),
        add_arguments=_sweep_args,
        run=_sweep_run,
        demo=lambda seed, workers, progress: sweep(
            duration=3.0,
            failure_rates=(0.01, 0.1, 0.3, 0.5, 0.75),
            seed=seed,
            workers=workers,
            progress=progress,
        ),
        render=_report.render_sweep,
        plot=_report.plot_sweep,
    )
)
