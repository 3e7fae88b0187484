"""Prometheus adapter (extra ``prometheus``): seawall's metrics in a ``prometheus_client`` registry.

Example:
    >>> import prometheus_client, seawall
    >>> from seawall.instrumentation import MetricsHook
    >>> from seawall.instrumentation.prometheus import PrometheusRecorder
    >>> recorder = PrometheusRecorder(registry=prometheus_client.CollectorRegistry())
    >>> policy = seawall.RetryPolicy(name="users", hooks=[MetricsHook(recorder)])
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import prometheus_client

from seawall.instrumentation._core import LATENCY_BUCKETS, METRICS

__all__ = ["PrometheusRecorder"]


class PrometheusRecorder:
    """A :class:`~seawall.instrumentation.Recorder` backed by ``prometheus_client`` metrics.

    Registers ``seawall_attempts_total``, ``seawall_retries_total``,
    ``seawall_budget_refusals_total``, ``seawall_give_ups_total``,
    ``seawall_breaker_transitions_total``, ``seawall_hedges_total``, ``seawall_hedge_wins_total``,
    ``seawall_sheds_total`` and the histogram ``seawall_attempt_duration_seconds`` (see
    ``docs/observability.md``).

    Args:
        registry: where to register; the default process-wide registry if ``None``. Create one
            recorder per registry (registering the same names twice is an error).
        buckets: histogram bucket bounds for attempt latency, in seconds.
    """

    def __init__(
        self,
        registry: prometheus_client.CollectorRegistry | None = None,
        *,
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        if registry is None:
            registry = prometheus_client.REGISTRY
        if not isinstance(registry, prometheus_client.CollectorRegistry):
            raise TypeError(f"registry must be a prometheus_client registry, got {registry!r}")
        bounds = tuple(buckets)
        if not bounds or any(not isinstance(b, (int, float)) or b <= 0 for b in bounds):
            raise ValueError(f"buckets must be positive numbers, got {buckets!r}")
        self.registry = registry
        self.metrics: dict[str, Any] = {}
        for m in METRICS:
            if m.kind == "counter":
                # prometheus_client appends "_total" to counter names.
                metric: Any = prometheus_client.Counter(
                    f"seawall_{m.key}", m.help, m.labels, registry=registry
                )
            else:
                metric = prometheus_client.Histogram(
                    f"seawall_{m.key}", m.help, m.labels, registry=registry, buckets=bounds
                )
            self.metrics[m.key] = metric
        # labels() takes a lock and builds a key on every call: cache the children.
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def _child(self, key: str, *labels: str) -> Any:
        cache_key = (key, *labels)
        child = self._children.get(cache_key)
        if child is None:
            with self._lock:
                child = self.metrics[key].labels(*labels)
                self._children[cache_key] = child
        return child

    def attempt(self, policy: str, outcome: str, duration: float) -> None:
        self._child("attempts", policy, outcome).inc()
        if duration >= 0:  # False for NaN, too
            self._child("attempt_duration_seconds", policy, outcome).observe(duration)

    def retry(self, policy: str) -> None:
        self._child("retries", policy).inc()

    def budget_refusal(self, policy: str) -> None:
        self._child("budget_refusals", policy).inc()

    def give_up(self, policy: str, reason: str) -> None:
        self._child("give_ups", policy, reason).inc()

    def breaker_transition(self, breaker: str, state: str) -> None:
        self._child("breaker_transitions", breaker, state).inc()

    def hedge(self, policy: str) -> None:
        self._child("hedges", policy).inc()

    def hedge_win(self, policy: str) -> None:
        self._child("hedge_wins", policy).inc()

    def shed(self, server: str, reason: str) -> None:
        self._child("sheds", server, reason).inc()

    def fleet_transition(self, fleet: str, state: str) -> None:
        self._child("fleet_transitions", fleet, state).inc()

    def __repr__(self) -> str:
        return f"PrometheusRecorder(registry={self.registry!r})"
