"""Hedge: the hedging policy, its sans-I/O decisions and its decorator, and :func:`hedge`."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

from seawall._core import validate as _validate
from seawall._core.classify import RetryOn, Verdict, classify, compile_errors
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.decorate import decorate
from seawall._core.events import check_hooks, emit
from seawall._core.public import public
from seawall._core.switch import SWITCH
from seawall._strategies.budget import Budget, answer_callback
from seawall._strategies.deadline import remaining
from seawall._strategies.hedge.drivers import asyncio_acall, trio_acall
from seawall._strategies.hedge.events import HedgeEvent, HedgeHook, QuantileSource

__all__ = ["Hedge", "hedge"]

P = ParamSpec("P")
T = TypeVar("T")

# A whole token, less float rounding: ten calls earning 0.1 each make 0.9999999999999999.
_ONE_TOKEN = 1.0 - 1e-9


class _Shared:
    """The state a :class:`Hedge` shares with its :meth:`Hedge.withdrawing_only` views.

    One lock guards every update: a Hedge may serve event loops in several threads, and
    ``n += 1`` on an attribute is a read, an add and a write. Under the GIL of CPython 3.10+ no
    thread switch falls between them in practice, but nothing promises it, and on a
    free-threaded build (3.13t) another thread does interleave: counts are lost, or one
    load-bound token is spent twice. The lock is uncontended almost always; no difference
    showed beside the tens of microseconds of the task a hedged call runs.
    """

    __slots__ = ("calls", "hedges", "lock", "recorded", "tokens", "wins")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens = 0.0
        self.calls = 0
        self.hedges = 0
        self.wins = 0
        self.recorded = 0


@public("seawall")
class Hedge:
    """A reusable hedging policy for ``async`` calls; see :func:`hedge` for the one-shot form.

    Starts one attempt; if it has not finished after ``delay``, starts another (up to
    ``max_attempts`` in flight), returns the first success and cancels the others, awaiting them
    so that their cleanup has run when the call returns. Following gRPC's hedging policy, an
    attempt failing with a retryable error starts the next one at once, and any other error ends
    the call.

    **Only for idempotent operations**: a hedged request may be executed more than once.

    Args:
        delay: seconds to wait before each extra attempt, or a latency tracker (any object with
            ``record(seconds)`` and ``quantile(q)``, such as :class:`seawall.LatencyTracker`):
            the delay is then its live ``quantile``, and every successful call records its
            latency there, as does every attempt that fails (Finagle's backup requests track
            a percentile the same way).
        max_attempts: most attempts per call, the first included (gRPC ``maxAttempts``).
        quantile: the percentile of an adaptive delay (0.95 for p95).
        min_samples: with an adaptive delay, do not hedge on time until the tracker holds this
            many samples (its ``count``; a tail estimate from a handful of samples is noise).
        min_delay: never hedge sooner than this (seconds).
        max_extra_load: bound extra attempts to this fraction of calls (0.05 = 5 %): each call
            earns that fraction of a token, each extra attempt spends one, and at most
            ``max(1, 100 * max_extra_load)`` tokens are saved up (Finagle's
            ``BackupRequestFilter`` bounds its backups with a retry budget the same way).
        budget: a shared :class:`~seawall.Budget` (``RetryBudget``, ``TokenBucket``): extra
            attempts draw from it like retries (``allow_hedge`` if it has one, else
            ``allow_retry``), so hedging stops when the dependency is sick.
        replicas: call attempt *i* as ``fn(replicas[i % len(replicas)], *args, **kwargs)``, to
            send each attempt to another replica.
        retry_on: errors after which the next attempt starts at once (the others end the call).
            ``Permanent`` and ``Overloaded`` errors always end it.
        clock: where latency is measured (the system clock by default; a
            :class:`~seawall.VirtualClock` under :func:`seawall.testing.run`). Waits run on the
            event loop's timers, which must follow the same clock.
        name: keys the per-name kill switch: with retries off, no extra attempts are made; also
            the ``policy`` of hook events (metric labels).
        hooks: callables receiving a :class:`HedgeEvent` when an extra attempt starts, wins,
            or is refused by the budget (e.g. ``MetricsHook(recorder).hedge_hook``).

    Drivers other than :meth:`acall` (an event loop of their own, the simulator) make the same
    decisions through the sans-I/O methods :meth:`start_call`, :meth:`admit`,
    :meth:`on_error` and :meth:`on_success`, as :class:`~seawall.lowlevel.RetryState` does for
    retries.

    Attributes:
        calls: calls made through this policy.
        hedges: extra attempts started.
        wins: calls answered by an extra attempt.
        recorded: latencies recorded in the tracker of an adaptive delay.

    These counters are shared with the policy's :meth:`withdrawing_only` views and are safe to
    update from several threads (each running its own event loop).
    """

    __slots__ = (
        "_answer",
        "_delay",
        "_hooks",
        "_matcher",
        "_reports_to_budget",
        "_shared",
        "_tracker",
        "budget",
        "clock",
        "max_attempts",
        "max_extra_load",
        "min_delay",
        "min_samples",
        "name",
        "quantile",
        "replicas",
    )

    def __init__(
        self,
        delay: float | QuantileSource,
        *,
        max_attempts: int = 2,
        quantile: float = 0.95,
        min_samples: int = 20,
        min_delay: float = 0.0,
        max_extra_load: float | None = None,
        budget: Budget | None = None,
        replicas: Sequence[Any] | None = None,
        retry_on: RetryOn = (ConnectionError, TimeoutError),
        clock: Clock | None = None,
        name: str | None = None,
        hooks: Sequence[HedgeHook] = (),
    ) -> None:
        self._tracker: QuantileSource | None
        if isinstance(delay, QuantileSource):
            self._tracker = delay
            self._delay = math.inf
        else:
            self._tracker = None
            self._delay = _validate.seconds("delay", delay)
        self.max_attempts = _validate.count("max_attempts", max_attempts, minimum=1)
        if isinstance(quantile, bool) or not isinstance(quantile, (int, float)):
            raise TypeError(f"quantile must be a number, got {quantile!r}")
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be > 0 and < 1, got {quantile!r}")
        self.quantile = float(quantile)
        self.min_samples = _validate.count("min_samples", min_samples)
        self.min_delay = _validate.seconds("min_delay", min_delay)
        if max_extra_load is not None:
            if isinstance(max_extra_load, bool) or not isinstance(max_extra_load, (int, float)):
                raise TypeError(f"max_extra_load must be a number or None, got {max_extra_load!r}")
            if not 0 <= max_extra_load <= max_attempts - 1 or math.isnan(max_extra_load):
                raise ValueError(
                    f"max_extra_load must be between 0 and max_attempts - 1, got {max_extra_load!r}"
                )
            max_extra_load = float(max_extra_load)
        self.max_extra_load = max_extra_load
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must implement seawall.Budget, got {budget!r}")
        self.budget = budget
        if replicas is not None:
            if isinstance(replicas, (str, bytes)) or not isinstance(replicas, Sequence):
                raise TypeError(f"replicas must be a sequence, got {replicas!r}")
            if not replicas:
                raise ValueError("replicas must not be empty")
            replicas = tuple(replicas)
        self.replicas = replicas
        self._matcher = compile_errors(retry_on, "retry_on")
        self._answer = answer_callback(budget) if budget is not None else None
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}")
        self.name = name
        self._hooks: tuple[HedgeHook, ...] = check_hooks(hooks)
        # False only in the views withdrawing_only() returns; never changed on a policy in use.
        self._reports_to_budget = True
        self._shared = _Shared()

    def withdrawing_only(self) -> Hedge:
        """This policy, for a layer whose retry policy reports to the same budget.

        The returned view draws its extra attempts from the budget exactly as this policy does,
        but reports neither requests nor outcomes to it: the retry layer around it does, so
        nothing is counted twice (:class:`~seawall.Pipeline`, the HTTP transports and
        :meth:`~seawall.config.PolicyRegistry.hedge` use it). The view shares this policy's latency
        tracker, load-bound tokens and counters, and takes its settings as they are now. This
        policy is not changed: used on its own elsewhere, it still reports to its budget.

        Returns:
            A new :class:`Hedge` (or this one, if it already reports nothing).
        """
        if not self._reports_to_budget:
            return self
        view = copy.copy(self)  # a shallow copy: the tracker and the _Shared state are shared
        view._reports_to_budget = False
        return view

    @property
    def reports_to_budget(self) -> bool:
        """``False`` for a :meth:`withdrawing_only` view: it only withdraws from the budget."""
        return self._reports_to_budget

    @property
    def calls(self) -> int:
        """Calls made through this policy (and its views)."""
        return self._shared.calls

    @property
    def hedges(self) -> int:
        """Extra attempts started."""
        return self._shared.hedges

    @property
    def wins(self) -> int:
        """Calls answered by an extra attempt."""
        return self._shared.wins

    @property
    def recorded(self) -> int:
        """Latencies recorded in the tracker of an adaptive delay (successes and failures)."""
        return self._shared.recorded

    @property
    def delay(self) -> float:
        """The wait before the next extra attempt now (``inf``: hedge only after failures)."""
        tracker = self._tracker
        if tracker is None:
            return max(self._delay, self.min_delay)
        # The tracker's own count when it has one: it may be shared with other code.
        seen = getattr(tracker, "count", None)
        if isinstance(seen, bool) or not isinstance(seen, int):
            seen = self._shared.recorded
        if seen < self.min_samples:
            return math.inf
        value = tracker.quantile(self.quantile)
        if value is None or not math.isfinite(value):
            return math.inf
        return max(value, self.min_delay)

    # -- the sans-I/O decisions: acall and other drivers (the simulator) share them ------------

    def start_call(self) -> float:
        """A call starts: count it, earn its share of the load bound, report it to the budget.

        Returns:
            The wait before the first extra attempt (:attr:`delay` now; ``inf``: none on time).
        """
        if self._reports_to_budget and self.budget is not None:
            self.budget.on_request()
        shared = self._shared
        bound = self.max_extra_load
        with shared.lock:
            shared.calls += 1
            if bound is not None:
                shared.tokens = min(shared.tokens + bound, max(1.0, 100.0 * bound))
        return self.delay

    def admit(self, error: BaseException, attempt: int = 2) -> bool:
        """May extra attempt number *attempt* start now? If so, it is counted as a hedge.

        Checks the kill switch, then the load bound, then the budget (a withdrawal). The driver
        must also keep attempts within :attr:`max_attempts`.

        Args:
            error: why: a :class:`HedgeDelayPassed` when the attempts in flight were slow, or
                the retryable error of an attempt that failed.
            attempt: the number the new attempt would have (2 for the first hedge); for hooks.

        Returns:
            ``True``: start it now. ``False``: do not (and start no more on time).
        """
        if not SWITCH.enabled or (self.name is not None and self.name in SWITCH.disabled_names):
            return False
        shared = self._shared
        bound = self.max_extra_load
        # A read without the lock, to skip the budget when no token is left; re-checked below.
        if bound is not None and shared.tokens < _ONE_TOKEN:
            return False
        budget = self.budget
        if budget is not None:
            allow = getattr(budget, "allow_hedge", None) or budget.allow_retry
            if not allow(error):
                self._fire("budget_exhausted", attempt, error)
                return False
        with shared.lock:
            if bound is not None:
                if shared.tokens < _ONE_TOKEN:
                    return False  # another caller took the last token meanwhile
                shared.tokens -= 1.0
            shared.hedges += 1
        self._fire("hedge", attempt, error)
        return True

    def on_error(self, error: BaseException, latency: float | None = None) -> bool:
        """An attempt failed with *error*: report it to the budget; does it end the call?

        Args:
            error: what the attempt raised.
            latency: how long that attempt ran (seconds, from its own start). With an adaptive
                delay it is recorded in the tracker: an error is an answer too, and a slow tail
                that ends in errors (timeouts) must count in the percentile, or the delay reads
                low and hedges fire too early. A cancelled attempt (not an ``Exception``) is
                not recorded: it did not answer, and how long it ran is only a lower bound.

        Returns:
            ``True`` when the error is not retryable (``Permanent``, ``Overloaded``, or outside
            ``retry_on``): cancel the other attempts and raise it. ``False``: the next attempt
            may start at once (ask :meth:`admit`).
        """
        # The call's own deadline (the ambient one) decides whether a DeadlineExceeded is one
        # slow attempt or the end of the call, as for a retry.
        verdict = classify(error, self._matcher, None, remaining() > 0.0)
        fatal = verdict is not Verdict.RETRY
        budget = self.budget
        if budget is not None and self._reports_to_budget:
            hears = verdict.hears
            if hears == "failure":
                budget.on_failure(error)
            elif hears == "answer":
                assert self._answer is not None
                self._answer(error)
        tracker = self._tracker
        if tracker is not None and latency is not None and isinstance(error, Exception):
            tracker.record(max(0.0, latency))
            shared = self._shared
            with shared.lock:
                shared.recorded += 1
        return fatal

    def on_success(self, latency: float, attempt: int = 1) -> None:
        """Attempt number *attempt* answered the call after *latency* seconds (the whole call's).

        Counts a win when an extra attempt answered, reports success to the budget and records
        the latency in the tracker of an adaptive delay.
        """
        shared = self._shared
        if attempt > 1:
            with shared.lock:
                shared.wins += 1
            self._fire("win", attempt, None)
        if self.budget is not None and self._reports_to_budget:
            self.budget.on_success()
        tracker = self._tracker
        if tracker is not None:
            tracker.record(max(0.0, latency))
            with shared.lock:
                shared.recorded += 1

    def _fire(self, kind: Any, attempt: int, error: BaseException | None) -> None:
        if self._hooks:
            emit(self._hooks, HedgeEvent(kind, self.name, attempt, error))

    # -- the driver: the asyncio or the trio loop ---------------------------------------------

    async def acall(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """Await ``fn(*args, **kwargs)``, hedged.

        Returns:
            The first successful attempt's value.

        Raises:
            BaseException: the first non-retryable error, or the last error when every attempt
                failed; the original exception, unchanged.
        """
        from seawall._core.compat import running_trio

        if running_trio():
            return await trio_acall(self, fn, args, kwargs)
        return await asyncio_acall(self, fn, args, kwargs)

    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]]
    ) -> Callable[P, Coroutine[Any, Any, T]]:
        """Decorate an ``async def`` function (asyncio or trio)."""
        acall = self.acall

        async def run(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            return await acall(fn, *args, **kwargs)

        return decorate(fn, "hedge", None, run)

    def __repr__(self) -> str:
        delay = "adaptive" if self._tracker is not None else f"{self._delay!r}"
        return f"Hedge(delay={delay}, max_attempts={self.max_attempts}, calls={self.calls})"


@public("seawall")
async def hedge(
    fn: Callable[..., Awaitable[T]],
    /,
    *args: Any,
    delay: float | QuantileSource,
    max_attempts: int = 2,
    budget: Budget | None = None,
    replicas: Sequence[Any] | None = None,
    quantile: float = 0.95,
    retry_on: RetryOn = (ConnectionError, TimeoutError),
    clock: Clock | None = None,
) -> T:
    """Await ``fn(*args)``; if it is slower than *delay*, start another attempt; first wins.

    The one-shot form of :class:`Hedge` (whose arguments these are). To bound the extra load
    across calls (``max_extra_load``), build one :class:`Hedge` and reuse it.

    **Only for idempotent operations.**

    Example:
        ``await seawall.hedge(fetch, key, delay=0.05, replicas=["a", "b"])`` calls
        ``fetch("a", key)``, then ``fetch("b", key)`` if no answer came within 50 ms.
    """
    policy = Hedge(
        delay,
        max_attempts=max_attempts,
        budget=budget,
        replicas=replicas,
        quantile=quantile,
        retry_on=retry_on,
        clock=clock,
    )
    return await policy.acall(fn, *args)
