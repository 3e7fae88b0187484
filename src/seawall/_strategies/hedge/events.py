"""What a hedge hands out and reads: the event its hooks receive, the error its budget hears
when the attempts in flight are slow, and the latency tracker an adaptive delay reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from seawall._core.public import public

__all__ = ["HedgeDelayPassed", "HedgeEvent", "HedgeHook", "QuantileSource"]


@public("seawall.lowlevel")
@runtime_checkable
class QuantileSource(Protocol):
    """What an adaptive hedge delay needs: a live latency distribution (a LatencyTracker)."""

    def record(self, seconds: float) -> None:
        """Add one latency sample."""

    def quantile(self, q: float) -> float | None:
        """The latency below which a fraction *q* of the samples fall (``None``: no data)."""


@public("seawall.lowlevel")
class HedgeDelayPassed(TimeoutError):
    """What a budget's ``allow_retry`` receives for a hedge started because an attempt was slow."""


@public("seawall.lowlevel")
class HedgeEvent(NamedTuple):
    """What a hedge hook receives. Immutable and cheap to create (a named tuple).

    Attributes:
        kind: ``"hedge"`` (an extra attempt was started), ``"win"`` (an extra attempt answered
            the call first) or ``"budget_exhausted"`` (the budget refused an extra attempt).
        policy: the hedge's ``name`` (or ``None``).
        attempt: the number of the attempt started, refused or winning (2 for the first hedge).
        error: why the extra attempt was wanted: a :class:`HedgeDelayPassed` when the attempts
            in flight were slow, else the retryable error of the attempt that failed
            (``None`` for ``"win"``).
    """

    kind: Literal["hedge", "win", "budget_exhausted"]
    policy: str | None
    attempt: int
    error: BaseException | None


HedgeHook = Callable[[HedgeEvent], None]
