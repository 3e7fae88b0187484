"""The hedging figures the README quotes, from one source: the demo's own JSON.

``seawall demo`` runs the ``hedge`` scenario (1,000 fan-out requests, seed 0) and writes its
result into ``summary.json``. ``docs/figures/hedging.json`` keeps that result; the README's
hedging sentences are rendered from it, between ``<!-- hedging:NAME -->`` and
``<!-- /hedging:NAME -->`` markers, and ``tests/test_hedging_figures.py`` fails when the file,
the demo and the README disagree.

Regenerate (after a change to the simulator or to the hedge)::

    .venv/bin/python tests/hedging_figures.py                      # runs the demo's scenario
    .venv/bin/python tests/hedging_figures.py seawall-report/summary.json   # or reads a demo's file
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures" / "hedging.json"
README = ROOT / "README.md"
SEED = 0  # the demo's default seed
_SPAN = re.compile(
    r"<!-- hedging:(?P<name>[a-z-]+) -->(?P<text>.*?)<!-- /hedging:(?P=name) -->", re.S
)


def demo_result(seed: int = SEED) -> dict[str, Any]:
    """What ``seawall demo --seed SEED`` writes for the hedge scenario (its ``result``)."""
    from seawall.sim import SCENARIOS
    from seawall.sim._report import jsonable

    data: dict[str, Any] = jsonable(SCENARIOS["hedge"].demo(seed, 1, None))
    return data


def from_summary(path: pathlib.Path) -> dict[str, Any]:
    """The hedge scenario's result from a demo's ``summary.json``."""
    summary = json.loads(path.read_text(encoding="utf-8"))
    data: dict[str, Any] = summary["scenarios"]["hedge"]["result"]
    return data


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIGURES.read_text(encoding="utf-8"))
    return data


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers the README quotes, from the demo's hedge result."""
    rows = {row["strategy"]: row for row in result["rows"]}
    none, p95 = rows["none"], rows["p95"]
    return {
        "requests": result["requests"],
        "fanout": result["fanout"],
        "seed": result["seed"],
        "p99_ms": round(none["p99"] * 1000),
        "hedged_p99_ms": round(p95["p99"] * 1000),
        "cut": round(none["p99"] / p95["p99"], 1),
        "extra_percent": round(p95["extra_load"] * 100, 1),
    }


def render(name: str, result: dict[str, Any]) -> str:
    """The README's sentence *name*, from the demo's hedge result."""
    f = figures(result)
    if name == "fan-out":
        return (
            f"Hedged fan-out (the demo's `hedge` scenario: {f['requests']:,} requests, each "
            f"waiting for {f['fanout']} heavy-tailed leaf calls, seed {f['seed']}): hedging each "
            f"leaf call at the live p95 cuts the user's p99 from {f['p99_ms']:,} ms to "
            f"{f['hedged_p99_ms']:,} ms ({f['cut']}x) for {f['extra_percent']}% more leaf "
            "requests."
        )
    if name == "summary":
        return (
            f"In the demo's fan-out, on virtual time: p99 cut {f['cut']}x for "
            f"{f['extra_percent']}% extra requests."
        )
    raise KeyError(name)


def spans(text: str) -> dict[str, str]:
    """The rendered spans of *text*, by name (whitespace folded, as Markdown reads it)."""
    return {m["name"]: " ".join(m["text"].split()) for m in _SPAN.finditer(text)}


def rewrite(text: str, result: dict[str, Any]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m["name"]
        return f"<!-- hedging:{name} -->{render(name, result)}<!-- /hedging:{name} -->"

    return _SPAN.sub(one, text)


def write(result: dict[str, Any]) -> None:
    """Store *result* in docs/figures/hedging.json and render the README's spans from it."""
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    text = README.read_text(encoding="utf-8")
    README.write_text(rewrite(text, result), encoding="utf-8")


if __name__ == "__main__":
    source = demo_result() if len(sys.argv) < 2 else from_summary(pathlib.Path(sys.argv[1]))
    write(source)
    print(f"{FIGURES.relative_to(ROOT)} and README.md: {figures(source)}")
