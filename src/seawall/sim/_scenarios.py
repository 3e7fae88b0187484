"""The built-in scenarios' command-line entries: options, short demo versions, tables, plots."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

from seawall.sim import _report
from seawall.sim._amplify import amplify
from seawall.sim._args import choice as _choice
from seawall.sim._args import count, positive, probability, whole
from seawall.sim._args import non_negative as _non_negative
from seawall.sim._file import read_policies, read_scenario, run_scenario_file
from seawall.sim._fleet import fleet
from seawall.sim._metastable import (
    METASTABLE_STRATEGIES,
    TRIGGERS,
    metastable,
)
from seawall.sim._occ import OCC_ALGORITHMS, occ
from seawall.sim._registry import Progress, Scenario, register_scenario
from seawall.sim._servers import SERVER_MODELS
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


def overload_metrics(r: Any) -> dict[str, float | None]:
    """Per strategy: success, load, goodput and attempts/s from 30 s after the trigger to the
    end; when goodput recovered (the mean over runs, ``None`` unless every run did), the share
    of the runs that recovered and the number of runs."""
    out: dict[str, float | None] = {}
    for s in r.series:
        after = [k for k in range(len(s.goodput)) if k * r.bin_width >= r.trigger_end + 30]
        out[f"{s.strategy}.success"] = s.success
        out[f"{s.strategy}.load"] = s.load
        if after:
            good = sum(s.goodput[k] for k in after) / len(after)
            offered = sum(s.offered[k] for k in after) / len(after)
            out[f"{s.strategy}.late_goodput"] = good
            out[f"{s.strategy}.late_offered"] = offered
            # Attempts the server received per request it served (SRE book ch. 21: with
            # client-side throttling, about K).
            out[f"{s.strategy}.late_per_success"] = offered / good if good > 0 else None
        if r.trigger_end <= 0:
            continue  # no trigger, nothing to recover from
        times = [t for t in s.recovered_at if t is not None]
        out[f"{s.strategy}.recovered_at"] = (
            sum(times) / len(times) if len(times) == len(s.recovered_at) else None
        )
        # The share of the runs that came back (a bistable system: some do, some do not), and
        # how many runs there were: --seeds pools them into one proportion (Wilson interval).
        out[f"{s.strategy}.recovered"] = len(times) / len(s.recovered_at)
        out[f"{s.strategy}.runs"] = float(len(s.recovered_at))
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


# -- metastable, ramp, bronson: one overload model, each experiment with its own defaults ----

#: Each overload experiment's defaults (the keyword arguments of :func:`metastable`).
OVERLOAD_DEFAULTS: dict[str, dict[str, Any]] = {
    # A spike of 80/s for 5 s over 40/s; latency fixed at arrival, 1 s + 10 ms per request in.
    "metastable": {
        "strategies": ("naive", "backoff", "published_backoff", "budget", "budget_shedding"),
    },
    # The same server and clients, the trigger the ramp of Brooker's simulator
    # (simple_collapse_sim/sim.py, run_sim_ramp): 80 - 1.6 * |t - 25| arrivals a second, from
    # 40/s at the start up to 80/s at 25 s and down to none at 75 s, over 80 s.
    "ramp": {
        "strategies": ("naive", "backoff", "published_backoff", "budget", "budget_shedding"),
        "trigger": "peak",
        "rate": 40.0,
        "spike_rate": 80.0,
        "spike_start": 0.0,
        "spike_end": 25.0,
        "duration": 80.0,
    },
    # Bronson et al., "Metastable Failures in Distributed Systems", HotOS'21: 280 QPS against a
    # server of 300 QPS (30 slots of 100 ms, FIFO), 1 s timeout, one retry, and for 10 s a step
    # in the server's latency past the timeout (its capacity unchanged).
    "bronson": {
        "strategies": ("retry_once", "no_retries"),
        "duration": 240.0,
        "rate": 280.0,
        "spike_rate": 280.0,
        "spike_start": 0.0,
        "spike_end": 0.0,
        "server": "limit",
        "concurrency": 30,
        "base_latency": 0.1,
        "network_mean": 0.001,
        "timeout": 1.0,
        "attempts": 2,
        "latency_step": (10.0, 20.0, 1.0),
    },
    # Google SRE book, ch. 21 "Handling Overload", client-side throttling: demand of 4 times
    # what the server can take (10 slots of 100 ms and a queue of 20; beyond it, refused at
    # once), one attempt per request, with and without an AdaptiveThrottle (K = 2).
    "throttle": {
        "strategies": ("no_retries", "adaptive_throttle"),
        "duration": 120.0,
        "rate": 400.0,
        "spike_rate": 400.0,
        "spike_start": 0.0,
        "spike_end": 0.0,
        "server": "limit",
        "concurrency": 10,
        "queue_limit": 20,
        "base_latency": 0.1,
        "network_mean": 0.005,
        "timeout": 1.0,
        "attempts": 1,
    },
}


def _overload_defaults(name: str) -> dict[str, Any]:
    import inspect

    out = {
        k: v.default
        for k, v in inspect.signature(metastable).parameters.items()
        if v.default is not inspect.Parameter.empty
    }
    out.update(OVERLOAD_DEFAULTS[name])
    return out


def _queue_limit(text: str) -> float:
    if text.strip().lower() in ("inf", "none", "unbounded"):
        return math.inf
    return whole(text)


def _overload_args(name: str) -> Any:
    d = _overload_defaults(name)

    def add(p: argparse.ArgumentParser) -> None:
        def num(flag: str, key: str, kind: Any, text: str) -> None:
            p.add_argument(flag, type=kind, default=d[key], help=f"{text} ({d[key]:g})")

        num("--duration", "duration", positive, "seconds simulated")
        num("--rate", "rate", positive, "arrivals/s")
        num("--spike-rate", "spike_rate", positive, "arrivals/s at the top of the trigger")
        num("--spike-start", "spike_start", _non_negative, "trigger start, s")
        num("--spike-end", "spike_end", _non_negative, "trigger end, s")
        num("--timeout", "timeout", positive, "client timeout per attempt, s")
        num("--attempts", "attempts", count, "attempts per request")
        num("--shed-limit", "shed_limit", count, "server sheds above this many in flight")
        num("--base-latency", "base_latency", positive, "server latency when empty, s")
        num("--per-request", "per_request", _non_negative, "latency added per request in, s")
        num("--network-mean", "network_mean", positive, "mean one-way network latency, s")
        num("--concurrency", "concurrency", count, "slots of the limit server")
        num("--queue-limit", "queue_limit", _queue_limit, "queue of the limit server")
        p.add_argument("--trials", type=count, default=1, help="independent runs, averaged (1)")
        p.add_argument(
            "--server",
            type=_choice(SERVER_MODELS),
            default=d["server"],
            help=f"server model: {' '.join(SERVER_MODELS)} ({d['server']})",
        )
        p.add_argument(
            "--trigger",
            type=_choice(TRIGGERS),
            default=d["trigger"],
            help=(
                "spike (a jump), ramp (up, then back at once) or peak (up, then down at the "
                f"same slope, to zero) ({d['trigger']})"
            ),
        )
        p.add_argument(
            "--outage",
            type=_non_negative,
            nargs=2,
            default=list(d["outage"]) if d["outage"] else None,
            metavar=("START", "END"),
            help="a window in which the server stalls ("
            + (f"{d['outage'][0]:g} {d['outage'][1]:g}" if d["outage"] else "none")
            + ")",
        )
        step = d["latency_step"]
        p.add_argument(
            "--latency-step",
            type=_non_negative,
            nargs=3,
            default=list(step) if step else None,
            metavar=("START", "END", "EXTRA"),
            help="a window in which every request reaches the server EXTRA s late, its "
            "capacity unchanged (" + (" ".join(f"{x:g}" for x in step) if step else "none") + ")",
        )
        p.add_argument(
            "--policies",
            dest="policies_data",
            type=_policy_file,
            metavar="POLICIES.toml",
            help="also run every route of this seawall policy file (seawall.config) as a strategy",
        )
        p.add_argument(
            "--strategies",
            type=_choice(METASTABLE_STRATEGIES),
            nargs="+",
            default=list(d["strategies"]),
            metavar="NAME",
            help=f"strategies: {' '.join(METASTABLE_STRATEGIES)} ({' '.join(d['strategies'])})",
        )

    return add


def _overload_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return metastable(
        strategies=a.strategies,
        duration=a.duration,
        rate=a.rate,
        spike_rate=a.spike_rate,
        spike_start=a.spike_start,
        spike_end=a.spike_end,
        timeout=a.timeout,
        attempts=a.attempts,
        shed_limit=a.shed_limit,
        base_latency=a.base_latency,
        per_request=a.per_request,
        network_mean=a.network_mean,
        server=a.server,
        concurrency=a.concurrency,
        # None: unbounded (an infinity is null in a JSON result, which --from re-runs)
        queue_limit=math.inf if getattr(a, "queue_limit", None) is None else a.queue_limit,
        trigger=a.trigger,
        outage=tuple(a.outage) if a.outage else None,
        latency_step=tuple(a.latency_step) if getattr(a, "latency_step", None) else None,
        policies=a.policies_data,
        runs=a.trials,
        seed=a.seed,
        workers=a.workers,
        progress=progress,
    )


def _overload_demo(name: str) -> Any:
    def demo(seed: int, workers: int, progress: Progress | None) -> Any:
        kwargs = dict(OVERLOAD_DEFAULTS[name])
        runs = 2 if name == "metastable" else 1  # the demo's short versions: seconds each
        if name == "bronson":
            kwargs["duration"] = 45.0
        if name == "throttle":
            kwargs["duration"] = 40.0
        return metastable(seed=seed, runs=runs, workers=workers, progress=progress, **kwargs)

    return demo


register_scenario(
    Scenario(
        name="metastable",
        summary="a load spike tips a slow-under-load server into a collapse retries sustain",
        description=(
            "The spike model of Brooker's simulator_example (simple_collapse_sim): server "
            "latency 1 s + 0.01 s x requests in it, fixed at arrival (no limit; "
            "timed-out work still done; --server for the other models), network Exp(0.1 s) "
            "each way, client timeout 3 s, 3 attempts; Poisson 40/s with a spike to 80/s in "
            "[20 s, 25 s). Goodput over time for naive retries, backoff, a RetryBudget, and a "
            "budget plus server-side shedding."
        ),
        add_arguments=_overload_args("metastable"),
        run=_overload_run,
        metrics=overload_metrics,
        demo=_overload_demo("metastable"),
        render=_report.render_metastable,
        plot=_report.plot_metastable,
    )
)

register_scenario(
    Scenario(
        name="ramp",
        summary="the metastable server, triggered by a ramp of load instead of a spike",
        description=(
            "The ramp of Brooker's simulator_example (simple_collapse_sim, run_sim_ramp): the "
            "metastable scenario's server and clients, and 80 - 1.6 x |t - 25| arrivals a "
            "second, from 40/s up to 80/s at 25 s and down to none at 75 s."
        ),
        add_arguments=_overload_args("ramp"),
        run=_overload_run,
        metrics=overload_metrics,
        demo=_overload_demo("ramp"),
        render=_report.render_metastable,
        plot=_report.plot_metastable,
    )
)

register_scenario(
    Scenario(
        name="bronson",
        summary="retry after timeout (Bronson et al., HotOS'21): a latency step, stuck at 2x load",
        description=(
            "280 requests/s against a server of 300/s (30 slots of 100 ms, a FIFO queue), a "
            "1 s timeout and one retry at once; for 10 s the server's latency steps up past the "
            "timeout (its capacity unchanged). Every first try times out and is retried: 560 "
            "attempts/s against 300/s build a queue that keeps every request past its timeout "
            "after the step, zero goodput, for good. Below half the capacity (--rate 140) the "
            "doubled load still fits, and the server recovers when the step ends."
        ),
        add_arguments=_overload_args("bronson"),
        run=_overload_run,
        metrics=overload_metrics,
        demo=_overload_demo("bronson"),
        render=_report.render_metastable,
        plot=_report.plot_metastable,
    )
)


register_scenario(
    Scenario(
        name="throttle",
        summary="client-side adaptive throttling (SRE book ch. 21) against 4x overload",
        description=(
            "400 requests/s against a server that takes 100/s (10 slots of 100 ms and a queue "
            "of 20; beyond it, refused at once), one attempt each. Without throttling the "
            "server receives every request, 4 for each it serves; an AdaptiveThrottle (K = 2) "
            "rejects the excess in the client, and the server receives about 2 per success."
        ),
        add_arguments=_overload_args("throttle"),
        run=_overload_run,
        metrics=overload_metrics,
        demo=_overload_demo("throttle"),
        render=_report.render_metastable,
        plot=_report.plot_metastable,
    )
)


# -- file: an experiment described in a scenario file ------------------------------------


def _policy_file(text: str) -> Any:
    try:
        return read_policies(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _scenario_file(text: str) -> Any:
    try:
        return read_scenario(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _file_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenario",
        dest="spec",
        type=_scenario_file,
        required=True,
        metavar="FILE.toml",
        help="the scenario file (arrivals, server, failures, clients; see docs/simulator.md)",
    )
    p.add_argument(
        "--policies",
        dest="policies_data",
        type=_policy_file,
        metavar="POLICIES.toml",
        help="run the routes of this seawall policy file as the clients (simulate production)",
    )
    p.add_argument("--trials", type=count, default=1, help="independent runs, averaged (1)")


def _file_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return run_scenario_file(
        a.spec,
        policies=a.policies_data,
        runs=a.trials,
        seed=a.seed,
        workers=a.workers,
        progress=progress,
    )


def _file_demo(seed: int, workers: int, progress: Progress | None) -> Any:
    data = {
        "run": {"duration": 60.0},
        "arrivals": {"shape": "bursts", "rate": 40.0, "bursts": [[20.0, 400.0]]},
        "clients": {"strategies": ["naive", "budget_shedding"]},
    }
    return run_scenario_file(data, seed=seed, workers=workers, progress=progress)


register_scenario(
    Scenario(
        name="file",
        summary="an overload experiment from a scenario file (TOML), optionally your policy file",
        description=(
            "Arrival shape (constant, poisson, step, ramp, bursts), server model, failures "
            "(independent, correlated outages) and client strategies from --scenario FILE; "
            "--policies runs the routes of a seawall policy file as the clients."
        ),
        add_arguments=_file_args,
        run=_file_run,
        demo=_file_demo,
        render=_report.render_metastable,
        plot=_report.plot_metastable,
        metrics=overload_metrics,
    )
)
