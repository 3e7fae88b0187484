"""structlog adapter (extra ``structlog``): retry events as structured log entries.

Example:
    >>> import seawall
    >>> from seawall.instrumentation.structlog import StructlogHook
    >>> policy = seawall.RetryPolicy(name="users", hooks=[StructlogHook()])
"""

from __future__ import annotations

from typing import Any

import structlog

from seawall._strategies.retry import RetryEvent

__all__ = ["StructlogHook"]


class StructlogHook:
    """A :class:`~seawall.RetryPolicy` hook that logs through structlog.

    Scheduled retries are logged at ``info`` as ``"seawall.retry"``, budget refusals at
    ``warning`` as ``"seawall.budget_exhausted"`` and give-ups after more than one attempt (or
    for a reason other than a permanent error) at ``warning`` as ``"seawall.give_up"``. Keys:
    ``policy``, ``attempt``, ``delay``, ``elapsed``, ``reason``, ``error`` (its ``repr``).

    Args:
        logger: a structlog logger; ``structlog.get_logger("seawall")`` by default.
    """

    __slots__ = ("logger",)

    def __init__(self, logger: Any = None) -> None:
        self.logger = logger if logger is not None else structlog.get_logger("seawall")

    def __call__(self, event: RetryEvent) -> None:
        kind = event.kind
        if kind == "give_up" and event.reason == "not_retryable" and event.attempt <= 1:
            return  # an ordinary error the policy was never going to retry: not news
        fields = {
            "policy": event.policy,
            "attempt": event.attempt,
            "delay": round(event.delay, 6),
            "elapsed": round(event.elapsed, 6),
            "reason": event.reason,
            "error": repr(event.error) if event.error is not None else None,
        }
        if kind == "retry":
            self.logger.info("seawall.retry", **fields)
        elif kind in ("budget_exhausted", "give_up"):
            self.logger.warning(f"seawall.{kind}", **fields)

    def __repr__(self) -> str:
        return f"StructlogHook({self.logger!r})"
