"""The command-line entries of the overload experiments: metastable, ramp, bronson and
throttle (one model, each experiment with its own defaults), and an experiment from a scenario
file; options, short demo versions, tables, plots, and the headline numbers for ``--seeds``."""

from __future__ import annotations

import argparse
import math
from typing import Any

from seawall.sim import _report
from seawall.sim._args import choice as _choice
from seawall.sim._args import count, positive, whole
from seawall.sim._args import non_negative as _non_negative
from seawall.sim._file import read_policies, read_scenario, run_scenario_file
from seawall.sim._metastable import (
    METASTABLE_STRATEGIES,
    TRIGGERS,
    metastable,
)
from seawall.sim._registry import Progress, Scenario, register_scenario
from seawall.sim._servers import SERVER_MODELS

__all__: list[str] = []


# -- headline numbers for --seeds (means with 95% confidence intervals) --------------------


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
