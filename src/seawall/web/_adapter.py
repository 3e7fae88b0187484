"""The one place where the page meets the simulator and the saga demo.

Each experiment calls one public scenario function of :mod:`seawall.sim` with the short
settings of ``seawall demo``, and turns its result object into plain JSON: series to draw and
rows to tabulate. When the simulator's functions or result objects change, this module is the
one to follow them.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any

from seawall.sim._report import jsonable

__all__ = ["EXPERIMENTS", "Experiment", "jsonable", "run_experiment", "saga_log"]


def _metastable(seed: int) -> dict[str, Any]:
    from seawall.sim import metastable

    r = metastable(seed=seed, runs=1)
    times = [(i + 0.5) * r.bin_width for i in range(len(r.series[0].goodput))]
    return {
        "charts": [
            {
                "title": "Goodput over time (successful requests per second)",
                "x": "time (s)",
                "y": "goodput (/s)",
                "marks": [[r.spike_start, r.spike_end]],
                "series": [
                    {"name": s.strategy, "x": times, "y": list(s.goodput)} for s in r.series
                ],
            },
            {
                "title": "Attempts reaching the server per second",
                "x": "time (s)",
                "y": "offered load (/s)",
                "marks": [[r.spike_start, r.spike_end]],
                "series": [
                    {"name": s.strategy, "x": times, "y": list(s.offered)} for s in r.series
                ],
            },
        ],
        "table": {
            "columns": ["strategy", "recovered", "success", "attempts per request"],
            "rows": [
                [s.strategy, "yes" if s.recovered else "no", s.success, s.load] for s in r.series
            ],
        },
        "note": (
            f"{r.rate:g} requests/s, a spike to {r.spike_rate:g}/s from {r.spike_start:g} s to "
            f"{r.spike_end:g} s (shaded); seed {r.seed}."
        ),
    }


def _occ(seed: int) -> dict[str, Any]:
    from seawall.sim import occ

    r = occ((10, 25, 50, 100, 150), trials=20, seed=seed)
    algorithms = list(dict.fromkeys(row.algorithm for row in r.rows))

    def series(field: str) -> list[dict[str, Any]]:
        return [
            {
                "name": a,
                "x": [row.clients for row in r.rows if row.algorithm == a],
                "y": [getattr(row, field) for row in r.rows if row.algorithm == a],
            }
            for a in algorithms
        ]

    return {
        "charts": [
            {
                "title": "Work: write calls until every client has written once",
                "x": "clients",
                "y": "calls",
                "series": series("calls"),
            },
            {
                "title": "Time: seconds until the last client's write succeeded",
                "x": "clients",
                "y": "seconds",
                "series": series("completion"),
            },
        ],
        "table": {
            "columns": ["algorithm", "clients", "calls", "completion (s)"],
            "rows": [[row.algorithm, row.clients, row.calls, row.completion] for row in r.rows],
        },
        "note": f"Optimistic concurrency, {r.trials} trials per point; seed {r.seed}.",
    }


def _sweep(seed: int) -> dict[str, Any]:
    from seawall.sim import sweep

    r = sweep(duration=3.0, failure_rates=(0.01, 0.1, 0.3, 0.5, 0.75), seed=seed)
    strategies = list(dict.fromkeys(row.strategy for row in r.rows))

    def series(field: str) -> list[dict[str, Any]]:
        return [
            {
                "name": s,
                "x": [row.failure_rate for row in r.rows if row.strategy == s],
                "y": [getattr(row, field) for row in r.rows if row.strategy == s],
            }
            for s in strategies
        ]

    return {
        "charts": [
            {
                "title": "Load: attempts sent per request",
                "x": "failure rate",
                "y": "attempts per request",
                "series": series("load"),
            },
            {
                "title": "Success: requests that finally succeeded",
                "x": "failure rate",
                "y": "success",
                "series": series("success"),
            },
        ],
        "table": {
            "columns": ["strategy", "failure rate", "success", "load", "throttled"],
            "rows": [
                [row.strategy, row.failure_rate, row.success, row.load, row.throttled]
                for row in r.rows
            ],
        },
        "note": f"Retry budgets against no budget as failures grow; seed {r.seed}.",
    }


def _hedge(seed: int) -> dict[str, Any]:
    from seawall.sim import hedge

    r = hedge(requests=1000, seed=seed)
    return {
        "charts": [
            {
                "title": "User-request latency (ms, log scale): p50, p99, p99.9",
                "x": "percentile",
                "y": "ms",
                "kind": "bars",
                "scale": "log",
                "categories": ["p50", "p99", "p99.9"],
                "series": [
                    {"name": row.strategy, "y": [1000 * v for v in (row.p50, row.p99, row.p999)]}
                    for row in r.rows
                ],
            }
        ],
        "table": {
            "columns": ["strategy", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "extra load", "hedges"],
            "rows": [
                [
                    row.strategy,
                    1000 * row.p50,
                    1000 * row.p99,
                    1000 * row.p999,
                    row.extra_load,
                    row.hedges,
                ]
                for row in r.rows
            ],
        },
        "note": (f"{r.requests} requests fanning out to {r.fanout} leaves each; seed {r.seed}."),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class Experiment:
    """One of the simulator's experiments as the page shows it."""

    name: str
    title: str
    summary: str
    run: Callable[[int], dict[str, Any]]


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "metastable",
            "Metastable failure",
            "A short load spike; do retries keep the server down after it ends?",
            _metastable,
        ),
        Experiment(
            "occ",
            "Optimistic concurrency",
            "Clients racing to write: the work and time each backoff takes.",
            _occ,
        ),
        Experiment(
            "sweep",
            "Retry budgets",
            "Load and success as the failure rate grows, with and without budgets.",
            _sweep,
        ),
        Experiment(
            "hedge",
            "Hedging",
            "Fan-out requests against slow-tailed servers, without and with hedges.",
            _hedge,
        ),
    )
}

# A run takes seconds: the page asks once per (experiment, seed), and two requests for the same
# one wait for the first instead of running it twice.
_LOCK = threading.Lock()


@functools.lru_cache(maxsize=32)
def _cached(name: str, seed: int) -> dict[str, Any]:
    experiment = EXPERIMENTS[name]
    result: dict[str, Any] = jsonable(experiment.run(seed))
    return {"name": name, "title": experiment.title, "seed": seed, **result}


def run_experiment(name: str, seed: int = 0) -> dict[str, Any]:
    """Run experiment *name* (one of :data:`EXPERIMENTS`) with *seed*; JSON data.

    Raises:
        KeyError: no such experiment.
    """
    if name not in EXPERIMENTS:
        raise KeyError(name)
    with _LOCK:
        return _cached(name, seed)


HISTORY_COLUMNS = ["at", "event", "step", "phase", "attempt", "delay", "error", "detail"]


def _history_rows(history: list[dict[str, Any]]) -> list[list[str]]:
    """The run's history as ``seawall saga show`` prints it, one row per entry."""

    def shown(value: Any) -> str:
        return "-" if value is None or value == "" else str(value)

    return [
        [
            shown(h.get("at")),
            shown(h.get("event")),
            shown(h.get("step")),
            shown(h.get("phase")),
            shown(h.get("attempt")),
            "-" if h.get("delay") is None else f"{h['delay']:.3f}",
            shown(h.get("error")),
            shown(", ".join(f"{k}={v}" for k, v in (h.get("detail") or {}).items())),
        ]
        for h in history
    ]


def saga_log(seed: int = 0) -> dict[str, Any]:
    """Run the saga demo of ``seawall demo``: its log tables and the run as JSON.

    The run's history, the widest of the tables, comes as ``history`` (``columns`` and
    ``rows``), for the page to lay out as a table whose long cells wrap, rather than as text.
    """
    from seawall.saga._demo import demo

    tables, run = demo(seed)
    run = jsonable(run)
    texts = []
    history_title = "history"
    for title, text in tables:
        if text.split()[: len(HISTORY_COLUMNS)] == HISTORY_COLUMNS:
            history_title = title
        else:
            texts.append({"title": title, "text": text})
    return {
        "seed": seed,
        "tables": texts,
        "history": {
            "title": history_title,
            "columns": HISTORY_COLUMNS,
            "rows": _history_rows(run.get("history", [])),
        },
        "run": run,
    }
