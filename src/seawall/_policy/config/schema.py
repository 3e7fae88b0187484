"""What a policy file describes, validated: :class:`RouteConfig`, :class:`BudgetConfig`,
:class:`HedgeConfig`, and :class:`ConfigError`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from seawall._core.clock import Clock
from seawall._core.public import public
from seawall._policy.config.conditions import _RetryOn
from seawall._strategies.backoff import Backoff
from seawall._strategies.budget import RetryBudget
from seawall._strategies.hedge import Hedge, HedgeHook
from seawall._strategies.latency import LatencyTracker
from seawall._strategies.retry import Hook, RetryPolicy

if TYPE_CHECKING:
    from seawall._policy.http import HttpRules


__all__ = ["BudgetConfig", "ConfigError", "HedgeConfig", "RouteConfig"]


@public("seawall.config")
class ConfigError(ValueError):
    """A policy file or mapping is invalid.

    Attributes:
        path: the dotted path of the offending field (``routes.users.retry_policy.num_retries``).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class BudgetConfig:
    """``budget = {percent_can_retry, min_retries_per_sec, ttl}``: a route's
    :class:`~seawall.RetryBudget`, under Finagle's names with Finagle's meaning.

    Over any ``ttl`` seconds, retries may be at most ``percent_can_retry`` per 100 requests, plus
    ``min_retries_per_sec * ttl``. ``percent`` maps to ``ratio = percent / 100``,
    ``min_per_second`` is ``min_retries_per_sec`` and ``window`` is ``ttl``, in seconds.
    """

    percent: float
    min_per_second: float
    window: float

    def build(self, clock: Clock | None) -> RetryBudget:
        return RetryBudget(
            ratio=self.percent / 100.0,
            min_per_second=self.min_per_second,
            window=self.window,
            clock=clock,
        )


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class HedgeConfig:
    """``hedge = {delay, max_attempts, percentile, max_extra_percent}``: a route's hedging.

    Attributes:
        delay: seconds to wait before sending a hedged request; with ``percentile``, the
            shortest wait (``min_delay``).
        max_attempts: total requests, the first included.
        percentile: hedge at this live percentile of the route's latency (95 for p95): the
            delay follows a :class:`~seawall.LatencyTracker` (``None``: a fixed delay).
        max_extra_percent: at most this many hedges per 100 calls (``max_extra_load``).
    """

    delay: float
    max_attempts: int
    percentile: float | None = None
    max_extra_percent: float | None = None

    def build(
        self,
        *,
        name: str | None = None,
        budget: RetryBudget | None = None,
        clock: Clock | None = None,
        hooks: Sequence[HedgeHook] = (),
    ) -> Hedge:
        """The :class:`~seawall.Hedge` these settings describe."""
        delay: float | LatencyTracker = self.delay
        if self.percentile is not None:
            delay = LatencyTracker(clock=clock)
        return Hedge(
            delay,
            max_attempts=self.max_attempts,
            quantile=(self.percentile or 95.0) / 100.0,
            min_delay=self.delay if self.percentile is not None else 0.0,
            max_extra_load=(
                None if self.max_extra_percent is None else self.max_extra_percent / 100.0
            ),
            budget=budget,
            clock=clock,
            name=name,
            hooks=hooks,
        )

    def describe(self) -> dict[str, Any]:
        """The settings as a plain dict (unset optional fields left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class RouteConfig:
    """One validated route policy (see the module docs for the fields).

    Attributes:
        name: the route's name; also the policy's ``name`` (metrics, logs, kill switch).
        num_retries: retries after the first attempt (``max_attempts = num_retries + 1``).
        retry_on: the conditions, as written.
        retry_statuses: HTTP statuses to retry, when ``retry_on`` names any (else ``None``).
        timeout: seconds for the whole call, waits included (``None``: no limit).
        per_try_timeout: seconds per attempt (``None``: no limit).
        back_off: the delays between attempts.
        budget: the retry budget, if any.
        hedge: the hedging settings, if any.
        enabled: ``False`` turns retries off for this name (the per-name kill switch).
    """

    name: str
    num_retries: int
    retry_on: tuple[str, ...]
    retry_statuses: frozenset[int] | None
    timeout: float | None
    per_try_timeout: float | None
    back_off: Backoff
    budget: BudgetConfig | None
    hedge: HedgeConfig | None
    enabled: bool
    # When retry_on is given: the application's classes it names, and the failure conditions
    # (connect-failure, reset, ...; "5xx" and "gateway-error" bring "reset").
    _errors: tuple[type[BaseException], ...] | None = dataclasses.field(
        default=None, repr=False, compare=True
    )
    _conditions: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=True)

    def build(
        self,
        *,
        budget: RetryBudget | None = None,
        hooks: Sequence[Hook] | None = None,
        clock: Clock | None = None,
    ) -> RetryPolicy:
        """The :class:`~seawall.RetryPolicy` this route describes."""
        kwargs: dict[str, Any] = {}
        if self._errors is not None:
            kwargs["retry_on"] = self.retry_errors
        return RetryPolicy(
            max_attempts=self.num_retries + 1,
            backoff=self.back_off,
            timeout=self.timeout,
            attempt_timeout=self.per_try_timeout,
            budget=budget,
            clock=clock,
            name=self.name,
            hooks=hooks,
            **kwargs,
        )

    @property
    def retry_errors(
        self,
    ) -> tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None:
        """What ``retry_on`` retries among errors: the policy's ``retry_on`` (classes, or a
        predicate for conditions such as ``reset``), or ``None`` when ``retry_on`` is not given
        (the policy's default applies). An HTTP integration that decides on transport errors
        itself can ask it too."""
        if self._errors is None:
            return None
        return _RetryOn(self._conditions, self._errors) if self._conditions else self._errors

    def http_rules(self) -> HttpRules:
        """:class:`HttpRules` for the HTTP integrations, retrying this route's statuses."""
        from seawall._policy.http import HttpRules

        if self.retry_statuses is None:
            return HttpRules()
        return HttpRules(retry_statuses=self.retry_statuses)

    def describe(self) -> dict[str, Any]:
        """A plain dict of the settings, for admin pages and logs."""
        b = self.back_off
        return {
            "max_attempts": self.num_retries + 1,
            "retry_on": list(self.retry_on),
            "retry_statuses": sorted(self.retry_statuses) if self.retry_statuses else None,
            "timeout": self.timeout,
            "per_try_timeout": self.per_try_timeout,
            "back_off": _describe_back_off(b),
            "budget": _describe_budget(self.budget) if self.budget else None,
            "hedge": self.hedge.describe() if self.hedge else None,
        }


def _describe_budget(budget: BudgetConfig) -> dict[str, float]:
    """The budget under the names a policy file gives it today (not the deprecated ``percent``,
    ``min`` and ``window``), so that what is shown can be written back as it is."""
    return {
        "percent_can_retry": budget.percent,
        "min_retries_per_sec": budget.min_per_second,
        "ttl": budget.window,
    }


def _describe_back_off(b: Backoff) -> dict[str, Any]:
    view: dict[str, Any] = {"base": b.base, "max": b.cap, "jitter": b.jitter}
    if b.cumulative:
        view["curve"] = "envoy"  # (2**N - 1) * base, not base * 2**n
    return view
