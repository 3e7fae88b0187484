"""Production metrics for a simulator run: the same counters operators see, fed by the real hooks.

Scenarios build their policies with :func:`retry_hooks` (``()`` normally, so that the default
logging hook does not log every simulated retry), their breakers with :func:`breaker_hooks` and
their hedges with :func:`hedge_hooks`. Inside :func:`collect_metrics`, these return the hooks of a
:class:`~seawall.instrumentation.MetricsHook`, which the real ``RetryState``, ``CircuitBreaker``
and ``Hedge`` call at the points where they would fire in production; the counters then hold
``seawall_attempts_total``, ``seawall_retries_total`` and the rest for the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from seawall.instrumentation import Counters, MetricsHook

__all__ = ["breaker_hooks", "collect_metrics", "hedge_hooks", "metrics_json", "retry_hooks"]

_hook: MetricsHook | None = None


@contextlib.contextmanager
def collect_metrics(counters: Counters) -> Iterator[Counters]:
    """Policies built by the scenarios inside this block report to *counters* (one process)."""
    global _hook
    previous, _hook = _hook, MetricsHook(counters)
    try:
        yield counters
    finally:
        _hook = previous


def retry_hooks() -> tuple[Any, ...]:
    """Hooks for a scenario's ``RetryPolicy``: none, or the metrics hook inside collect_metrics."""
    return () if _hook is None else (_hook,)


def breaker_hooks() -> tuple[Any, ...]:
    """``hooks`` for a scenario's ``CircuitBreaker``."""
    return () if _hook is None else (_hook.breaker_hook,)


def hedge_hooks() -> tuple[Any, ...]:
    """Hooks for a scenario's ``Hedge``."""
    return () if _hook is None else (_hook.hedge_hook,)


def metrics_json(counters: Counters) -> dict[str, float]:
    """The series as ``{'seawall_retries_total{policy="sweep-retry_budget"}': 12, ...}``."""
    out: dict[str, float] = {}
    for line in counters.format().splitlines():
        series, _, value = line.rpartition(" ")
        number = float(value)
        out[series] = int(number) if number.is_integer() else number
    return out
