"""Figures the fuzz and soak runs produce, for ``docs/reliability.md``.

Each run writes one JSON file, ``<name>.json``, into the directory named by the environment
variable ``SEAWALL_FIGURES`` (``make reliability`` sets it to ``docs/figures``), else into
``.figures/`` at the top of the checkout (ignored by git). ``scripts/reliability.py`` renders the
page's tables from the files in ``docs/figures``; ``tests/test_reliability_docs.py`` checks that
the page shows what those files say.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent


def figures_dir() -> pathlib.Path:
    chosen = os.environ.get("SEAWALL_FIGURES")
    return pathlib.Path(chosen) if chosen else ROOT / ".figures"


def record_figures(name: str, figures: dict[str, Any]) -> pathlib.Path:
    """Write *figures* (with the Python version and CPU count of the run) to ``<name>.json``."""
    import seawall

    directory = figures_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    data = {
        "run": {
            "seawall": seawall.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        **figures,
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


# -- the page ---------------------------------------------------------------------------------

PAGE = ROOT / "docs" / "reliability.md"
DOC_FIGURES = ROOT / "docs" / "figures"
BEGIN = "<!-- figures: made by `make reliability` from docs/figures/*.json; do not edit -->"
END = "<!-- end of figures -->"


def _load(directory: pathlib.Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    return data


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,}"


def render(directory: pathlib.Path = DOC_FIGURES) -> str:
    """The figures section of docs/reliability.md, from the JSON files in *directory*."""
    soak = _load(directory, "soak")
    ctor = _load(directory, "hostile_constructors")
    conf = _load(directory, "hostile_config")
    run = soak["run"]
    g1, g2 = soak["goodput_per_second"]
    a1, a2 = soak["application_throughput_per_second"]
    lines = [
        BEGIN,
        "",
        f"Measured on {run['cpus']} CPUs, Python {run['python']}, seawall {run['seawall']}.",
        "",
        "**Load held** (the soak test: a fleet of "
        f"{soak['clients']} clients, {soak['seconds']:g} s of real time against a shedding "
        "server on 127.0.0.1)",
        "",
        "| figure | value |",
        "|---|---|",
        f"| server capacity | {_n(soak['capacity_per_second'])} requests/s |",
        f"| offered load | {_n(soak['offered_per_second'])} calls/s "
        f"({soak['offered_per_second'] / soak['capacity_per_second']:.1f}x capacity) |",
        f"| logical calls / attempts | {_n(soak['calls'])} / {_n(soak['attempts'])} |",
        f"| goodput, first and second window | {g1:g} and {g2:g} answers/s "
        f"(at least {soak['goodput_share_of_capacity']:.0%} of capacity) |",
        f"| application throughput, same windows | {a1:g} and {a2:g} requests/s |",
        f"| retry amplification, whole run | {soak['amplification']:.3f}x "
        f"({_n(soak['attempts'] - soak['calls'])} retries; the budgets allowed "
        f"{_n(soak['retries_allowed_by_budgets'])}) |",
        f"| retry amplification, during the 5 s outage | {soak['outage_amplification']:.3f}x |",
        f"| latest end of a retry wait | {soak['max_retry_wait_end_seconds']:g} s "
        f"(deadline {soak['deadline_seconds']:g} s) |",
        f"| calls that ended after their deadline | {_n(soak['calls_past_deadline'])} (the "
        f"slowest ended {abs(soak['latest_end_vs_deadline_seconds']):g} s "
        f"{'before' if soak['latest_end_vs_deadline_seconds'] <= 0 else 'after'} it) |",
        f"| memory growth, first to second window | {soak['rss_growth_bytes'] / 2**20:.1f} MiB"
        f" resident; largest growth of one object type: {_n(soak['largest_object_growth'])} "
        f"over {_n(soak['calls_between_censuses'])} calls |",
        f"| file descriptors | {soak['fd_growth']:+g} (median, second window less first); "
        f"{soak['fds_after_close']:+d} after the clients closed |",
        "",
        f"**Faults survived** ({_n(soak['faults_total'])} injected in the soak test)",
        "",
        "| fault | injected |",
        "|---|---|",
    ]
    lines += [f"| {kind} | {_n(count)} |" for kind, count in soak["faults_injected"].items()]
    lines += [
        "",
        "| outcome of a logical call | calls |",
        "|---|---|",
    ]
    lines += [f"| {outcome} | {_n(count)} |" for outcome, count in soak["outcomes"].items()]
    lines += [
        "",
        f"POSTs without an `Idempotency-Key` that reached the server: {_n(soak['posts_at_server'])}"
        f"; duplicated: **{_n(soak['duplicated_posts'])}**. GETs sent again after a failure: "
        f"{_n(soak['gets_sent_again'])}.",
        "",
        "**Bad inputs tried** (the property tests, hypothesis with a fixed seed)",
        "",
        "| target | tried | refused, naming the field | accepted and worked | escaped |",
        "|---|---|---|---|---|",
        f"| {ctor['parameters']} parameters of {ctor['constructors']} constructors "
        f"| {_n(ctor['values'])} | {_n(ctor['refused_naming_the_parameter'])} "
        f"| {_n(ctor['accepted_and_worked'])} | {_n(ctor['escaped'])} |",
        f"| {conf['fields']} policy-file fields | {_n(conf['values'])} "
        f"| {_n(conf['refused_naming_the_field'])} | {_n(conf['accepted_and_worked'])} "
        f"| {_n(conf['escaped'])} |",
        f"| deeply nested policy files and mappings | {conf['deep_files']} "
        f"| {conf['deep_files']} | 0 | 0 |",
        "",
        END,
    ]
    return "\n".join(lines)


def page_figures(text: str) -> str:
    """The figures section of the page's *text* (between the markers)."""
    start = text.index(BEGIN)
    end = text.index(END, start) + len(END)
    return text[start:end]


def write_page(directory: pathlib.Path = DOC_FIGURES) -> bool:
    """Rewrite the figures section of docs/reliability.md; whether it changed."""
    text = PAGE.read_text(encoding="utf-8")
    new = text.replace(page_figures(text), render(directory))
    if new != text:
        PAGE.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    print("docs/reliability.md", "updated" if write_page() else "unchanged")
