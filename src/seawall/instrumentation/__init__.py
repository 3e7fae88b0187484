"""Observability: hooks and metrics adapters for retry policies, breakers, hedges and servers.

The core vocabulary (:class:`Recorder`, :class:`MetricsHook`, :class:`Counters`) has no
dependency. Adapters import their library only in their own module:
``seawall.instrumentation.prometheus`` (extra ``prometheus``),
``seawall.instrumentation.otel`` (extra ``otel``) and ``seawall.instrumentation.structlog``
(extra ``structlog``). See ``docs/observability.md`` for the metric names.

Nothing seawall logs or labels carries a secret: errors are logged through :func:`redact_text`
(URLs without query strings or user info), headers never (see ``docs/observability.md``).
"""

from seawall._core.public import show_public_module
from seawall._core.redact import REDACTED, redact_text, redact_url
from seawall._strategies.retry import Hook, RetryEvent, logging_hook
from seawall.instrumentation._core import (
    ATTEMPT_OUTCOMES,
    FLEET_STATES,
    LATENCY_BUCKETS,
    MAX_NAMES,
    METRICS,
    SHED_REASONS,
    Counters,
    Metric,
    MetricsHook,
    Recorder,
    SagaRecorder,
)

__all__ = [
    "ATTEMPT_OUTCOMES",
    "FLEET_STATES",
    "LATENCY_BUCKETS",
    "MAX_NAMES",
    "METRICS",
    "REDACTED",
    "SHED_REASONS",
    "Counters",
    "Hook",
    "Metric",
    "MetricsHook",
    "Recorder",
    "RetryEvent",
    "SagaRecorder",
    "logging_hook",
    "redact_text",
    "redact_url",
]

show_public_module(__name__, globals())
