"""Saga metrics through the existing recorders (:mod:`seawall.instrumentation`)."""

from __future__ import annotations

from seawall.instrumentation import Recorder
from seawall.saga._model import SagaEvent, Status

__all__ = ["MetricsHook"]

_COUNTED = frozenset({Status.SUCCEEDED, Status.COMPENSATED, Status.FAILED, Status.NEEDS_ATTENTION})


class MetricsHook:
    """An orchestrator hook that reports attempts and runs to a
    :class:`~seawall.instrumentation.Recorder`.

    Each step's attempts are ``seawall_attempts_total{policy="<saga>.<step>"}`` (a
    compensation's ``"<saga>.<step>.compensate"``), with their durations, retries
    (``seawall_retries_total``), give-ups by reason (``seawall_give_ups_total``) and budget
    holds (``seawall_budget_refusals_total``). Runs that end, or need attention, are
    ``seawall_saga_runs_total{saga, status}`` when the recorder has ``saga_run`` (a
    :class:`~seawall.instrumentation.SagaRecorder`, as seawall's own recorders are).

    Args:
        recorder: where the signals go.
    """

    __slots__ = ("_saga_run", "recorder")

    def __init__(self, recorder: Recorder) -> None:
        if not isinstance(recorder, Recorder):
            raise TypeError(
                f"recorder must implement seawall.instrumentation.Recorder, got {recorder!r}"
            )
        self.recorder = recorder
        self._saga_run = getattr(recorder, "saga_run", None)

    def __call__(self, event: SagaEvent) -> None:
        r = self.recorder
        if event.kind == "run":
            if event.status in _COUNTED and self._saga_run is not None:
                self._saga_run(event.saga, event.status.value)
            return
        label = f"{event.saga}.{event.step}"
        if event.phase == "compensation":
            label += ".compensate"
        if event.kind == "hold":
            if event.reason == "budget":
                r.budget_refusal(label)
            if event.delay is None and event.reason is not None:  # held back no more: gave up
                r.give_up(label, event.reason)
            return
        if event.error is None:
            r.attempt(label, "success", event.duration)
            return
        r.attempt(label, "failure", event.duration)
        if event.delay is None:
            if event.reason is not None:
                r.give_up(label, event.reason)
        elif event.reason is None:
            r.retry(label)
        # else held back by the budget: the hold event counts the refusal; no give-up

    def __repr__(self) -> str:
        return f"saga.MetricsHook({self.recorder!r})"
