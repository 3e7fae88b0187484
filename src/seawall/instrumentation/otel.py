"""OpenTelemetry adapter (extra ``otel``): seawall's metrics as OpenTelemetry instruments.

Instrument names are ``seawall.<key>`` (``seawall.attempts``, ``seawall.attempt_duration``,
...), with the same attributes as the Prometheus labels, so a Prometheus exporter of the
OpenTelemetry SDK shows the same series names as :mod:`seawall.instrumentation.prometheus`.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics

from seawall._version import __version__
from seawall.instrumentation._core import METRICS

__all__ = ["OpenTelemetryRecorder"]


class OpenTelemetryRecorder:
    """A :class:`~seawall.instrumentation.Recorder` that records OpenTelemetry measurements.

    Args:
        meter_provider: where instruments come from; the global provider if ``None`` (which
            records nothing until the application configures the SDK).
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        if meter_provider is None:
            meter_provider = metrics.get_meter_provider()
        meter = meter_provider.get_meter("seawall", __version__)
        self._instruments: dict[str, Any] = {}
        for m in METRICS:
            if m.kind == "counter":
                self._instruments[m.key] = meter.create_counter(
                    f"seawall.{m.key}", unit=m.unit, description=m.help
                )
            else:
                # OpenTelemetry names carry the unit separately: seawall.attempt_duration in "s".
                self._instruments[m.key] = meter.create_histogram(
                    f"seawall.{m.key.removesuffix('_seconds')}", unit=m.unit, description=m.help
                )
        self._labels = {m.key: m.labels for m in METRICS}
        # Attribute dicts are reused: building one per measurement would dominate the cost.
        self._attrs: dict[tuple[str, ...], dict[str, str]] = {}

    def _attributes(self, key: str, *values: str) -> dict[str, str]:
        cache_key = (key, *values)
        attrs = self._attrs.get(cache_key)
        if attrs is None:
            attrs = dict(zip(self._labels[key], values, strict=True))
            self._attrs[cache_key] = attrs
        return attrs

    def attempt(self, policy: str, outcome: str, duration: float) -> None:
        self._instruments["attempts"].add(1, self._attributes("attempts", policy, outcome))
        if duration >= 0:
            self._instruments["attempt_duration_seconds"].record(
                duration, self._attributes("attempt_duration_seconds", policy, outcome)
            )

    def retry(self, policy: str) -> None:
        self._instruments["retries"].add(1, self._attributes("retries", policy))

    def budget_refusal(self, policy: str) -> None:
        self._instruments["budget_refusals"].add(1, self._attributes("budget_refusals", policy))

    def give_up(self, policy: str, reason: str) -> None:
        self._instruments["give_ups"].add(1, self._attributes("give_ups", policy, reason))

    def breaker_transition(self, breaker: str, state: str) -> None:
        self._instruments["breaker_transitions"].add(
            1, self._attributes("breaker_transitions", breaker, state)
        )

    def hedge(self, policy: str) -> None:
        self._instruments["hedges"].add(1, self._attributes("hedges", policy))

    def hedge_win(self, policy: str) -> None:
        self._instruments["hedge_wins"].add(1, self._attributes("hedge_wins", policy))

    def shed(self, server: str, reason: str) -> None:
        self._instruments["sheds"].add(1, self._attributes("sheds", server, reason))

    def fleet_transition(self, fleet: str, state: str) -> None:
        self._instruments["fleet_transitions"].add(
            1, self._attributes("fleet_transitions", fleet, state)
        )

    def __repr__(self) -> str:
        return "OpenTelemetryRecorder()"
