"""Whether seawall's figure agrees with the published one (:func:`judge`), and the verdicts as
tables: Markdown for ``docs/simulator.md`` (:func:`published_table`), rich for ``seawall sim
verify`` (:func:`render_verify`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from seawall.sim._experiments import Experiment

__all__ = ["judge", "published_table", "render_verify"]


def judge(e: Experiment | Mapping[str, Any], summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whether seawall's mean agrees with the published figure of *e*.

    Returns ``{"agrees": bool | None, "difference": float | None, "text": str}``: the
    difference is seawall's mean minus the figure (``None`` without a mean); ``agrees`` is
    ``None`` for a row that is not comparable.
    """
    x = dataclasses.asdict(e) if isinstance(e, Experiment) else dict(e)
    mean = None if summary is None else summary.get("mean")
    if mean is None:
        return {"agrees": False, "difference": None, "text": "no figure (no trial gave one)"}
    value, tol, unit = x["value"], x["tolerance"], x["unit"]
    allowed = tol * abs(value) if x["relative"] else tol
    diff = mean - value
    slack = 1e-9 * max(1.0, abs(value))
    if x["compare"] == "at_most":
        ok = diff <= allowed + slack
    elif x["compare"] == "at_least":
        ok = -diff <= allowed + slack
    else:
        ok = abs(diff) <= allowed + slack
    by = _difference(diff, value, unit)
    if not x["comparable"]:
        return {"agrees": None, "difference": diff, "text": f"another system: differs by {by}"}
    if ok:
        text = "agrees" if abs(diff) <= slack else f"agrees ({by})"
        return {"agrees": True, "difference": diff, "text": text}
    return {"agrees": False, "difference": diff, "text": f"differs by {by}"}


def _difference(diff: float, value: float, unit: str) -> str:
    if unit in ("%", "share"):
        return f"{diff * 100:+.1f} points"
    text = _figure(diff, unit, signed=True)
    if value:
        text += f", {diff / abs(value):+.1%}"
    return text


def _figure(value: float, unit: str, *, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if unit == "%":
        return f"{value:{sign}.1%}"
    if unit == "share":
        return f"{value:{sign}.0%}"
    if unit == "x":
        return f"{value:{sign}.2f}x"
    if unit == "/s":
        return f"{value:{sign}.1f}/s"
    if unit == "s":
        return f"{value:{sign}.1f} s"
    return f"{value:{sign}.4g}"


def _ours(e: Mapping[str, Any], s: Mapping[str, Any] | None) -> str:
    unit = e["unit"]
    if s is None or s.get("mean") is None:
        return "never" if e["metric"].endswith("recovered_at") else "-"
    if s.get("method") == "wilson":
        text = f"{s['successes']} of {s['trials']} runs"
    else:
        text = _figure(s["mean"], unit)
    ci = s.get("ci95")
    if ci is not None and ci[1] > ci[0]:
        text += f" [{_figure(ci[0], unit)}, {_figure(ci[1], unit)}]"
    return text


def published_table(doc: Mapping[str, Any]) -> str:
    """The Markdown table of *doc* (what :func:`run_published` returns)."""
    lines = [
        "| source | what it reports | published | seawall (95% CI) | verdict |",
        "|---|---|---|---|---|",
    ]
    for item in doc["experiments"]:
        e, s = item["experiment"], item["summary"]
        n = len(item["values"])
        got = 0 if s is None else s.get("n", 0)
        seeds = f"{got} of {n} seeds" if got != n else f"{n} seeds"
        verdict = item["verdict"]["text"]
        published = e["published"]
        if e["reference"]:
            published += f" ({e['reference']})"
        claim = e["claim"]
        if e["note"]:
            claim += f" [{e['note']}]"
        cells = (e["source"], claim, published, f"{_ours(e, s)}, {seeds}", verdict)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render_verify(doc: Mapping[str, Any], console: Any) -> None:
    """The verdicts as a table on a ``rich`` console."""
    from rich.table import Table

    table = Table(title="published figures against seawall's (mean over seeds, 95% CI)")
    for column in ("experiment", "published", "seawall", "tolerance", "verdict"):
        table.add_column(column, justify="left")
    for item in doc["experiments"]:
        e, s = item["experiment"], item["summary"]
        tol = e["tolerance"]
        if e["relative"]:
            band = f"{tol:.0%}"
        elif tol == 0:
            band = "exact"
        else:
            band = _figure(tol, e["unit"]).lstrip("+")
        band = {"at_most": "<= ", "at_least": ">= "}.get(e["compare"], "± ") + band
        if e["compare"] != "near" and tol == 0:
            band = {"at_most": "at most", "at_least": "at least"}[e["compare"]]
        table.add_row(e["key"], e["published"], _ours(e, s), band, item["verdict"]["text"])
    console.print(table)
