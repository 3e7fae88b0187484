"""Tables (rich), plots (matplotlib, Agg) and JSON for the scenarios' results.

rich and matplotlib come with the ``sim`` extra; they are imported only when a table is printed
or a plot is drawn, so the scenarios themselves run on a bare install.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from seawall.sim._amplify import AmplifyResult
from seawall.sim._fleet import FLEET_STRATEGIES, FleetResult
from seawall.sim._metastable import MetastableResult
from seawall.sim._occ import OccResult
from seawall.sim._storm import StormResult
from seawall.sim._sweep import SweepResult, SweepRow

__all__ = ["histogram_lines", "jsonable", "occ_markdown"]


def jsonable(value: Any) -> Any:
    """A result object as plain JSON data (NaN and infinities become ``None``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def histogram_lines(
    times: Mapping[str, Sequence[float]], width: float = 0.1, bar: int = 30
) -> list[str]:
    """A text histogram of retry start times: one row per bin, one column per series.

    Every bar is scaled to the largest bin of all series, so that heights compare across them.
    """
    if not times:
        return []
    top = max((max(ts) for ts in times.values() if ts), default=0.0)
    nbins = int(top / width) + 1
    counts = {name: [0] * nbins for name in times}
    for name, ts in times.items():
        for t in ts:
            counts[name][min(nbins - 1, int(t / width))] += 1
    peak = max((max(c) for c in counts.values()), default=0) or 1
    cell = bar + 5
    lines = ["time (s)    " + "".join(f"{name:<{cell}}" for name in times)]
    for k in range(nbins):
        if all(counts[n][k] == 0 for n in times):
            continue
        row = f"{f'{k * width:.1f}-{(k + 1) * width:.1f}':<12}"
        for name in times:
            c = counts[name][k]
            row += f"{'#' * math.ceil(bar * c / peak) + ' ' + str(c) if c else '.':<{cell}}"
        lines.append(row.rstrip())
    return lines


def _table(title: str, columns: Sequence[str]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 or c == "outcome" else "right")
    return table


# -- storm ---------------------------------------------------------------------------------


def render_storm(result: StormResult, console: Any) -> None:
    table = _table(
        f"storm (a): one client, dependency down for the first {result.outage:g} s "
        f"(max_attempts={result.max_attempts}, full jitter, base {result.base:g} s)",
        ["attempt", "started (s)", "outcome", "wait before next (s)"],
    )
    for step in result.trace:
        table.add_row(
            str(step.attempt),
            f"{step.started:.3f}",
            step.error or "success",
            "-" if step.wait is None else f"{step.wait:.3f}",
        )
    console.print(table)
    verdict = "succeeded" if result.succeeded else f"gave up ({result.reason})"
    console.print(f"the call {verdict} after {len(result.trace)} attempts\n")
    shown = {k: v for k, v in result.retry_times.items() if k in ("none", "full")}
    console.print(
        f"storm (b): {result.clients} clients fail at t=0 and retry; retry start times, "
        "no jitter vs full jitter",
        markup=False,
    )
    console.print("\n".join(histogram_lines(shown or result.retry_times)), markup=False)
    peaks = ", ".join(f"{k}: {v}" for k, v in result.peaks.items())
    console.print(
        f"most retries starting within the same {result.bin_width * 1000:g} ms: {peaks}\n",
        markup=False,
    )


def plot_storm(result: StormResult, path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    top = max((max(t) for t in result.retry_times.values() if t), default=1.0)
    bins = [i * 0.05 for i in range(int(top / 0.05) + 2)]
    for name, times in result.retry_times.items():
        ax.hist(times, bins=bins, histtype="step", linewidth=1.5, label=name)
    ax.set_xlabel("retry start time (s after the shared failure)")
    ax.set_ylabel("retries per 50 ms")
    ax.set_title(f"{result.clients} clients failing at once: retry times by jitter")
    ax.legend(title="jitter")
    _save(fig, path)


# -- occ -----------------------------------------------------------------------------------


def occ_markdown(result: OccResult) -> str:
    """The occ table (mean write calls and completion time) as Markdown."""
    algorithms = list(dict.fromkeys(r.algorithm for r in result.rows))
    clients = sorted({r.clients for r in result.rows})
    head = "| N | " + " | ".join(f"{a} calls / time" for a in algorithms) + " |"
    lines = [head, "|" + "---|" * (len(algorithms) + 1)]
    for n in clients:
        cells = []
        for a in algorithms:
            r = result.row(a, n)
            cells.append(f"{r.calls:,.0f} / {r.completion:.2f} s")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_occ(result: OccResult, console: Any) -> None:
    algorithms = list(dict.fromkeys(r.algorithm for r in result.rows))
    clients = sorted({r.clients for r in result.rows})
    for what, fmt in (("write calls", "{:,.0f}"), ("time to completion (s)", "{:.2f}")):
        table = _table(
            f"occ: mean {what} until every client has written once ({result.trials} trials)",
            ["N", *algorithms],
        )
        for n in clients:
            vals = []
            for a in algorithms:
                r = result.row(a, n)
                vals.append(fmt.format(r.calls if what == "write calls" else r.completion))
            table.add_row(str(n), *vals)
        console.print(table)


def _two_line_charts(
    path: str,
    title: str,
    xlabel: str,
    xs: Sequence[float],
    names: Sequence[str],
    left: tuple[str, Callable[[str, Any], float]],
    right: tuple[str, Callable[[str, Any], float]],
    *,
    right_log: bool = False,
) -> None:
    """Two line charts side by side over *xs*, a line per name; a side is (label, y(name, x))."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (ylabel, y) in zip(axes, (left, right), strict=True):
        for name in names:
            ax.plot(xs, [y(name, x) for x in xs], marker="o", label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    if right_log:
        axes[1].set_yscale("log")
    axes[0].legend()
    fig.suptitle(title)
    _save(fig, path)


def plot_occ(result: OccResult, path: str) -> None:
    _two_line_charts(
        path,
        f"Optimistic concurrency: work and time per backoff ({result.trials} trials)",
        "clients (N)",
        sorted({r.clients for r in result.rows}),
        list(dict.fromkeys(r.algorithm for r in result.rows)),
        ("total write calls", lambda a, n: result.row(a, n).calls),
        ("time to completion (s)", lambda a, n: result.row(a, n).completion),
        right_log=True,
    )


# -- amplify -------------------------------------------------------------------------------


def render_amplify(result: AmplifyResult, console: Any) -> None:
    table = _table(
        f"amplify: {result.layers} layers x {result.attempts} attempts, failing leaf, "
        f"{result.requests} requests",
        ["strategy", "leaf calls per request", "arithmetic"],
    )
    for r in result.rows:
        table.add_row(r.strategy, f"{r.per_request:.2f}", f"{r.bound:.2f}")
    console.print(table)


# -- fleet ---------------------------------------------------------------------------------


def render_fleet(result: FleetResult, console: Any) -> None:
    table = _table(
        f"fleet: calls per request to a dead dependency (arithmetic); "
        f"{result.rate:g}/s per process",
        ["processes", *FLEET_STRATEGIES],
    )
    for n in sorted({r.processes for r in result.rows}):
        table.add_row(
            str(n),
            *(
                f"{result.row(s, n).per_request:.2f} ({result.row(s, n).bound:.2f})"
                for s in FLEET_STRATEGIES
            ),
        )
    console.print(table)


# -- sweep ---------------------------------------------------------------------------------


def render_sweep(result: SweepResult, console: Any) -> None:
    strategies = list(dict.fromkeys(r.strategy for r in result.rows))
    ps = sorted({r.failure_rate for r in result.rows})
    clients = result.rows[0].clients if result.rows else 0
    for what in ("success rate", "load (attempts per request)"):
        table = _table(
            f"sweep: {what}; {clients} clients x {result.rate:g} req/s for {result.duration:g} s",
            ["p", *strategies],
        )
        for p in ps:
            table.add_row(f"{p:.0%}", *(_cell(result.row(s, p), what) for s in strategies))
        console.print(table)
    if result.splits:
        split_p = result.splits[0].failure_rate
        table = _table(
            f"sweep: the same total load over more clients (p = {split_p:.0%}, budgets per "
            "client): success / load",
            ["clients", *strategies],
        )
        for n in sorted({r.clients for r in result.splits}):
            row = {r.strategy: r for r in result.splits if r.clients == n}
            table.add_row(
                str(n),
                *(f"{row[s].success:.0%} / {row[s].load:.2f}" for s in strategies if s in row),
            )
        console.print(table)


def _cell(r: SweepRow, what: str) -> str:
    return f"{r.success:.1%}" if what == "success rate" else f"{r.load:.2f}"


def plot_sweep(result: SweepResult, path: str) -> None:
    _two_line_charts(
        path,
        "Retry strategies as the dependency gets sicker",
        "probability an attempt fails",
        sorted({r.failure_rate for r in result.rows}),
        list(dict.fromkeys(r.strategy for r in result.rows)),
        ("success rate", lambda s, p: result.row(s, p).success),
        ("load (attempts per request)", lambda s, p: result.row(s, p).load),
    )


# -- metastable ----------------------------------------------------------------------------


def render_metastable(result: MetastableResult, console: Any) -> None:
    trigger = []
    if result.spike_end > result.spike_start:
        trigger.append(
            f"{result.trigger} to {result.spike_rate:g} req/s in "
            f"[{result.spike_start:g} s, {result.spike_end:g} s)"
        )
    if result.outage:
        trigger.append(f"server stalled in [{result.outage[0]:g} s, {result.outage[1]:g} s)")
    step = getattr(result, "latency_step", None)
    if step:
        trigger.append(f"latency +{step[2]:g} s in [{step[0]:g} s, {step[1]:g} s)")
    table = _table(
        f"{result.server} server: {result.rate:g} req/s, {', '.join(trigger) or 'no trigger'}, "
        f"{result.duration:g} s, {result.runs} run(s)",
        ["strategy", "success", "load", "goodput 30 s after the trigger", "recovered at"],
    )
    after = (
        [
            k
            for k in range(len(result.series[0].goodput))
            if k * result.bin_width >= result.trigger_end + 30
        ]
        if result.series
        else []
    )
    for s in result.series:
        tail = sum(s.goodput[k] for k in after) / len(after) if after else math.nan
        times = [t for t in s.recovered_at if t is not None]
        if not trigger:
            rec = "- (no trigger)"
        elif len(times) == len(s.recovered_at):
            rec = f"{sum(times) / len(times):.0f} s"
        elif times:
            rec = f"{len(times)}/{len(s.recovered_at)} runs"
        else:
            rec = "never (stays collapsed)"
        table.add_row(s.strategy, f"{s.success:.1%}", f"{s.load:.2f}", f"{tail:.1f}/s", rec)
    console.print(table)


def plot_metastable(result: MetastableResult, path: str) -> None:
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for s in result.series:
        xs = [(k + 0.5) * result.bin_width for k in range(len(s.goodput))]
        ax1.plot(xs, s.goodput, label=s.strategy)
        ax2.plot(xs, s.offered, label=s.strategy)
    for ax in (ax1, ax2):
        ax.axvspan(result.spike_start, result.spike_end, color="grey", alpha=0.2)
    ax1.set_ylabel("goodput (successes/s)")
    ax2.set_ylabel("attempts reaching the server /s")
    ax2.set_xlabel("time (s); shaded: the load spike")
    ax1.legend()
    ax1.set_title(
        f"Metastable failure: {result.rate:g} req/s, spike to {result.spike_rate:g} req/s"
    )
    _save(fig, path)


# -- plumbing ------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, no GUI toolkit imported
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
