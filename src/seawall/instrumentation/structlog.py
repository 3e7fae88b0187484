"""structlog adapter (extra ``structlog``): retry events as structured log entries.

Example:
    >>> import seawall
    >>> from seawall.instrumentation.structlog import StructlogHook
    >>> policy = seawall.RetryPolicy(name="users", hooks=[StructlogHook()])
"""

from __future__ import annotations

from typing import Any

import structlog

from seawall._core.redact import redact_text
from seawall._core.validate import shown
from seawall._strategies.retry import RetryEvent

__all__ = ["StructlogHook"]


def _redacted_name(name: str | None) -> str | None:
    return None if name is None else redact_text(name)


class StructlogHook:
    """A :class:`~seawall.RetryPolicy` hook that logs through structlog.

    Scheduled retries are logged at ``info`` as ``"seawall.retry"``, budget refusals at
    ``warning`` as ``"seawall.budget_exhausted"`` and give-ups after more than one attempt (or
    for a reason other than a permanent error) at ``warning`` as ``"seawall.give_up"``. Keys:
    ``policy``, ``attempt``, ``delay``, ``elapsed``, ``reason``, ``error`` (its ``repr``). Every
    URL in the error and the policy name loses its query string and user info: HTTP errors
    repeat the URL, and query strings carry API keys.

    Args:
        logger: a structlog logger; ``structlog.get_logger("seawall")`` by default.
        redact: remove query strings and user info from ``error`` (``False``: log the error's
            ``repr`` as it is, secrets included; for a debugging session, not production).
    """

    __slots__ = ("logger", "redact")

    def __init__(self, logger: Any = None, *, redact: bool = True) -> None:
        if not isinstance(redact, bool):
            raise TypeError(f"redact must be a bool, got {redact!r}")
        self.logger = logger if logger is not None else structlog.get_logger("seawall")
        self.redact = redact

    def __call__(self, event: RetryEvent) -> None:
        kind = event.kind
        if kind == "give_up" and event.reason == "not_retryable" and event.attempt <= 1:
            return  # an ordinary error the policy was never going to retry: not news
        fields = {
            "policy": event.policy if not self.redact else _redacted_name(event.policy),
            "attempt": event.attempt,
            "delay": round(event.delay, 6),
            "elapsed": round(event.elapsed, 6),
            "reason": event.reason,
            "error": None if event.error is None else self._describe(event.error),
        }
        if kind == "retry":
            self.logger.info("seawall.retry", **fields)
        elif kind in ("budget_exhausted", "give_up"):
            self.logger.warning(f"seawall.{kind}", **fields)

    def _describe(self, error: BaseException) -> str:
        text = shown(error)
        return redact_text(text) if self.redact else text

    def __repr__(self) -> str:
        return f"StructlogHook({self.logger!r})"
