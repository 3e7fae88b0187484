"""Retry budgets: bound the total load that retries add when a dependency is sick."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Budget"]


@runtime_checkable
class Budget(Protocol):
    """What a policy asks of a shared budget. One budget may serve many policies and threads.

    A policy calls :meth:`on_request` before the first attempt of each logical call, then
    :meth:`on_success` or :meth:`on_failure` after every attempt, and :meth:`allow_retry` before
    each retry (only when it would otherwise retry). A failure is an error the policy would retry
    (or ``Overloaded``); permanent errors such as a 404 count as successes: the dependency
    answered.
    """

    def on_request(self) -> None:
        """A logical call starts. May raise :class:`~seawall.Overloaded` to reject it locally."""

    def allow_retry(self, error: BaseException) -> bool:
        """Withdraw for one retry (or hedge) after *error*; ``False`` refuses it."""

    def on_success(self) -> None:
        """An attempt succeeded (or failed permanently: the dependency answered)."""

    def on_failure(self, error: BaseException) -> None:
        """An attempt failed with a transient error or an overload signal."""
