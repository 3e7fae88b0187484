"""OpenTelemetry spans for saga runs (extra ``otel``): a run, each step, each attempt.

A run's attempts may run in several workers and across restarts, and its spans are written by
whichever worker records each outcome. They are tied together by the run id: every span of a
run belongs to one trace whose id is derived from the run id (:meth:`TracingHook.trace_id`), and
has as parent one span id also derived from it (the run's root, which stands for the run as a
whole), so any worker, at any time, puts its spans of a run in the same trace with no state
shared between workers. Every span also carries ``seawall.saga.run_id``.

Spans are written when their outcome is in the log (hooks are called after the commit), with
their start and end times set from the event: an attempt's span ends when its outcome is
recorded and lasts the attempt's duration; a step's span begins when the step's first attempt
began (the log's ``started_at``, whichever worker ran it) and ends when the step succeeds or
gives up; the run's span covers the run from its creation to its final status.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from seawall._core.errors import error_summary
from seawall.saga._model import SagaEvent, Status

__all__ = ["TracingHook"]

S = Status
_FINAL = frozenset({S.SUCCEEDED, S.COMPENSATED, S.FAILED})
# Steps whose first attempt this process saw but whose end it has not (yet) recorded: the
# fallback start of a compensation's span. Bounded, as a worker may lose a run to another.
_MAX_OPEN = 10_000


def _ids(run_id: str) -> tuple[int, int]:
    """The trace id and the root span id of a run: 128 and 64 bits of a SHA-256 of its id."""
    digest = hashlib.sha256(b"seawall.saga.run\x00" + run_id.encode("utf-8", "replace")).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def _error_type(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        return type(error).__qualname__
    head, sep, _ = error.partition(":")
    return head if sep and head.isidentifier() else "Error"


class TracingHook:
    """An orchestrator hook that writes OpenTelemetry spans: one per run, per step (and per
    compensation) and per attempt, all in the run's trace.

    Span names have a bounded cardinality (the saga's and the step's names):
    ``saga <saga>`` for the run, ``step <saga>.<step>`` and ``compensate <saga>.<step>`` for a
    step, ``attempt <saga>.<step>`` (``attempt <saga>.<step>.compensate``) for an attempt,
    ``hold <saga>.<step>`` for a retry held back by a budget or an overloaded dependency, and
    ``saga <saga> needs attention`` when a run parks. Attributes: ``seawall.saga.name``,
    ``seawall.saga.run_id`` on every span; ``seawall.saga.step``, ``seawall.saga.phase`` and
    ``seawall.saga.idempotency_key`` on steps, attempts and holds; ``seawall.saga.attempt``,
    ``seawall.saga.retry_delay`` (seconds until the next attempt, when one follows) and
    ``seawall.saga.give_up_reason`` on attempts; ``seawall.saga.status`` and
    ``seawall.saga.reason`` on runs. A failed attempt's span has status ``ERROR``, the
    ``error.type`` attribute and the exception as an event; so does a step that gave up, and a
    run that failed, was compensated or parked.

    Args:
        tracer_provider: where the tracer comes from; the global provider if ``None`` (which
            records nothing until the application configures the SDK).

    Example:
        >>> from seawall import saga
        >>> saga.TracingHook.trace_id("order-42")
        '1a378145a7a27b85397286303a3ec115'
    """

    __slots__ = ("_open", "_trace", "_tracer")

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as err:  # pragma: no cover - depends on what is installed
            raise ImportError(
                "saga.TracingHook needs OpenTelemetry: pip install 'seawall[otel]'"
            ) from err
        from seawall._version import __version__

        if tracer_provider is None:
            tracer_provider = trace.get_tracer_provider()
        if not hasattr(tracer_provider, "get_tracer"):
            raise TypeError(
                f"tracer_provider must be an OpenTelemetry TracerProvider, got {tracer_provider!r}"
            )
        self._trace = trace
        self._tracer = tracer_provider.get_tracer("seawall.saga", __version__)
        self._open: dict[tuple[str, str, str], int] = {}

    @staticmethod
    def trace_id(run_id: str) -> str:
        """The id of the trace that holds every span of run *run_id*, in hex (32 digits): what
        to search for in a tracing backend, from a run id in the log."""
        return f"{_ids(run_id)[0]:032x}"

    def _parent(self, run_id: str) -> Any:
        trace = self._trace
        trace_id, span_id = _ids(run_id)
        root = trace.SpanContext(
            trace_id=trace_id,
            span_id=span_id,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(root))

    def _span(
        self,
        name: str,
        event: SagaEvent,
        start: int,
        end: int,
        attributes: dict[str, Any],
        error: BaseException | str | None = None,
        failed: str | None = None,
    ) -> None:
        attributes["seawall.saga.name"] = event.saga
        attributes["seawall.saga.run_id"] = event.run_id
        span = self._tracer.start_span(
            name,
            context=self._parent(event.run_id),
            kind=self._trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=min(start, end),
        )
        if error is not None:
            span.set_attribute("error.type", _error_type(error))
            if isinstance(error, BaseException):
                span.record_exception(error, timestamp=end, escaped=False)
            shown = error_summary(error) if isinstance(error, BaseException) else error
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, shown))
        elif failed is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, failed))
        span.end(end_time=end)

    def __call__(self, event: SagaEvent) -> None:
        now = time.time_ns()
        if event.kind == "run":
            self._run(event, now)
            return
        step = event.step or ""
        phase = event.phase or "action"
        comp = phase == "compensation"
        label = f"{event.saga}.{step}"
        key = f"{event.run_id}:{step}" + (":compensate" if comp else "")
        base: dict[str, Any] = {
            "seawall.saga.step": step,
            "seawall.saga.phase": phase,
            "seawall.saga.idempotency_key": key,
        }
        open_key = (event.run_id, step, phase)
        attempt_start = now - max(0, int(event.duration * 1e9))
        if event.kind == "attempt":
            if open_key not in self._open:
                if len(self._open) >= _MAX_OPEN:
                    del self._open[next(iter(self._open))]
                self._open[open_key] = attempt_start
            attrs = dict(base)
            attrs["seawall.saga.attempt"] = event.attempt
            if event.delay is not None:
                attrs["seawall.saga.retry_delay"] = event.delay
            if event.reason is not None:
                attrs[
                    "seawall.saga.give_up_reason"
                    if event.delay is None
                    else "seawall.saga.hold_reason"
                ] = event.reason
            self._span(
                f"attempt {label}" + (".compensate" if comp else ""),
                event,
                attempt_start,
                now,
                attrs,
                error=event.error,
            )
            if event.error is None:
                self._step(event, label, base, open_key, now, None)
            elif event.delay is None:
                self._step(event, label, base, open_key, now, event.reason or "gave up")
            return
        # A hold: a retry pushed out by a budget or an overloaded dependency.
        attrs = dict(base)
        if event.reason is not None:
            attrs["seawall.saga.hold_reason"] = event.reason
        if event.delay is not None:
            attrs["seawall.saga.retry_delay"] = event.delay
        self._span(f"hold {label}", event, now, now, attrs)
        if event.delay is None:  # held back once too often: the step gives up
            self._step(event, label, base, open_key, now, event.reason or "gave up")

    def _step(
        self,
        event: SagaEvent,
        label: str,
        base: dict[str, Any],
        open_key: tuple[str, str, str],
        now: int,
        gave_up: str | None,
    ) -> None:
        first = self._open.pop(open_key, now)
        start = first if event.started_at is None else int(event.started_at * 1e9)
        name = ("compensate " if event.phase == "compensation" else "step ") + label
        attrs = dict(base)
        if gave_up is not None:
            attrs["seawall.saga.give_up_reason"] = gave_up
        self._span(name, event, start, now, attrs, failed=gave_up)

    def _run(self, event: SagaEvent, now: int) -> None:
        status = event.status
        attrs: dict[str, Any] = {"seawall.saga.status": str(status.value)}
        if event.reason:
            attrs["seawall.saga.reason"] = event.reason
        if status is S.NEEDS_ATTENTION:
            self._span(
                f"saga {event.saga} needs attention",
                event,
                now,
                now,
                attrs,
                failed=event.reason or "needs attention",
            )
        elif status in _FINAL:
            start = now - max(0, int(event.duration * 1e9))
            failed = None if status is S.SUCCEEDED else (event.reason or status.value)
            self._span(f"saga {event.saga}", event, start, now, attrs, failed=failed)

    def __repr__(self) -> str:
        return "saga.TracingHook()"
