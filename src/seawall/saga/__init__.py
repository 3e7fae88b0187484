"""Sagas: retries owned by a durable orchestrator, with the log operators need.

A saga is a sequence of steps, each with an action and an optional compensation. The
:class:`Orchestrator` applies each step's :class:`~seawall.RetryPolicy` through the sans-I/O core
(:class:`seawall.lowlevel.RetryState`) and writes every decision to a durable log (SQLite or
PostgreSQL) *before* acting on it: a retry wait is a ``next_retry_at`` in the log, not a sleep in
a worker, so a crash, a deploy or a second worker never resets a backoff, loses a run or runs a
finished step again. Inside a step, seawall policies make one attempt
(:func:`seawall.lowlevel.one_attempt`): the orchestrator is the layer that retries. See
``docs/saga.md``.

Example:
    >>> from seawall import saga
    >>> order = saga.Saga("order", [saga.Step("reserve", lambda ctx: {"ok": True})])
"""

from seawall._core.public import show_public_module
from seawall.saga._hooks import Hook, logging_hook
from seawall.saga._metrics import MetricsHook
from seawall.saga._model import (
    DEFAULT_POLICY,
    MAX_DEPTH,
    MAX_PAYLOAD_BYTES,
    HistoryEntry,
    OnExhausted,
    Run,
    Saga,
    SagaEvent,
    SchemaVersionError,
    Sleep,
    Status,
    Step,
    StepContext,
    StepRecord,
    WaitFor,
    WorkerLost,
)
from seawall.saga._orchestrator import Orchestrator
from seawall.saga._schema import SCHEMA_VERSION
from seawall.saga._tracing import TracingHook

__all__ = [
    "DEFAULT_POLICY",
    "SCHEMA_VERSION",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "HistoryEntry",
    "Hook",
    "MetricsHook",
    "OnExhausted",
    "Orchestrator",
    "Run",
    "Saga",
    "SagaEvent",
    "SchemaVersionError",
    "Sleep",
    "Status",
    "Step",
    "StepContext",
    "StepRecord",
    "TracingHook",
    "WaitFor",
    "WorkerLost",
    "logging_hook",
]

show_public_module(__name__, globals())
