"""The ``hedge`` scenario's command-line entry: options, demo version, table and plot."""

from __future__ import annotations

import argparse
from typing import Any

from seawall.sim._hedge import HEDGE_PERCENTILES, HedgeResult, hedge
from seawall.sim._registry import Progress, Scenario, register_scenario

__all__ = ["plot_hedge", "render_hedge"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def _hedge_metrics(r: HedgeResult) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for row in r.rows:
        for field in ("p50", "p99", "p999", "extra_load"):
            out[f"{row.strategy}.{field}"] = getattr(row, field)
    out["p99_cut"] = r.p99_cut
    hedged = [row for row in r.rows if row.quantile is not None]
    base = [row for row in r.rows if row.quantile is None]
    if hedged and base and hedged[0].p999 > 0:
        out["p999_cut"] = base[0].p999 / hedged[0].p999
    return out


def render_hedge(result: HedgeResult, console: Any) -> None:
    from rich.table import Table

    bound = "none" if result.max_extra_load is None else f"{result.max_extra_load:.0%}"
    table = Table(
        title=(
            f"hedge: {result.requests} requests x {result.fanout} leaves, leaf median "
            f"{result.median * 1000:g} ms, {result.tail_probability:.0%} stall; extra-load "
            f"bound {bound}"
        ),
        title_justify="left",
    )
    for i, c in enumerate(
        ["strategy", "p50 ms", "p99 ms", "p99.9 ms", "leaf p99", "load", "hedges won"]
    ):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in result.rows:
        table.add_row(
            "none" if r.quantile is None else f"hedge {r.strategy}",
            _ms(r.p50),
            _ms(r.p99),
            _ms(r.p999),
            _ms(r.leaf_p99),
            f"{r.extra_load:+.1%}",
            "-" if r.quantile is None else f"{r.wins}/{r.hedges}",
        )
    console.print(table)
    cut = result.p99_cut
    if cut == cut:  # not NaN
        first = next(r for r in result.rows if r.quantile is not None)
        console.print(
            f"user p99 {cut:.1f}x shorter hedging at the live {first.strategy}, for "
            f"{first.extra_load:.1%} more leaf requests\n",
            markup=False,
        )


def plot_hedge(result: HedgeResult, path: str) -> None:
    from seawall.sim._report import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [f"p{q * 100:g}" for q in HEDGE_PERCENTILES]
    for r in result.rows:
        label = "no hedging" if r.quantile is None else f"hedge at {r.strategy}"
        label += f" ({r.extra_load:+.1%} load)"
        ax.plot(xs, [v * 1000 for v in r.percentiles], marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xlabel("percentile of user requests")
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_title(f"Fan-out of {result.fanout}: the tail, without and with hedging")
    ax.legend()
    _save(fig, path)


def _quantile(text: str) -> float:
    t = text.strip().lower().removeprefix("p")
    try:
        value = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a percentile like p95 or 0.95, got {text!r}"
        ) from None
    if value >= 1:
        value /= 100
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a percentile like p95 or 0.95, got {text!r}")
    return value


def _hedge_args(p: argparse.ArgumentParser) -> None:
    from seawall.sim._args import count, positive, probability

    p.add_argument("--requests", type=count, default=2000, help="user requests (2000)")
    p.add_argument("--fanout", type=count, default=10, help="leaf calls per request (10)")
    p.add_argument(
        "--at",
        dest="quantiles",
        type=_quantile,
        nargs="+",
        default=[0.95, 0.99],
        metavar="Q",
        help="hedge at these live percentiles of leaf latency (p95 p99)",
    )
    p.add_argument("--rate", type=positive, default=100.0, help="requests/s (100)")
    p.add_argument(
        "--stall", type=probability, default=0.03, help="probability a leaf stalls (3%%)"
    )
    p.add_argument(
        "--max-extra-load",
        type=probability,
        default=0.1,
        help="hedges per leaf call at most, the Hedge's bound (10%%)",
    )


def _hedge_run(a: argparse.Namespace, progress: Progress | None) -> Any:
    return hedge(
        requests=a.requests,
        fanout=a.fanout,
        quantiles=a.quantiles,
        rate=a.rate,
        tail_probability=a.stall,
        max_extra_load=a.max_extra_load,
        seed=a.seed,
        progress=progress,
    )


register_scenario(
    Scenario(
        name="hedge",
        metrics=_hedge_metrics,
        summary="fan-out requests to heavy-tailed servers: p99 with and without hedging",
        description=(
            "After Dean and Barroso, 'The Tail at Scale' (CACM 2013), not its system: "
            "each request calls --fanout leaves and waits for all; a leaf takes log-normal "
            "10 ms and stalls 100 ms x Pareto(1.2) with probability --stall. Without hedging, "
            "then with a real seawall.Hedge at the live p95 (and p99) of a LatencyTracker, "
            "bounded by --max-extra-load: p50, p99, p99.9 and the extra load."
        ),
        add_arguments=_hedge_args,
        run=_hedge_run,
        demo=lambda seed, workers, progress: hedge(requests=1000, seed=seed, progress=progress),
        render=render_hedge,
        plot=plot_hedge,
    )
)
