"""CircuitBreaker: stop calling a dependency that keeps failing, and probe it before trusting it.

The breaker keeps a sliding window of recent outcomes (the last N calls, or the last T seconds).
When enough calls have been seen and too many failed (or were too slow), it opens: calls fail
fast with :class:`CircuitOpen` for a jittered while. Then it admits a fixed number of concurrent
probes (half-open); their results close it again or re-open it.

The lock guards only the bookkeeping, never the protected call, so concurrent callers (threads or
tasks) never wait for each other.
"""

from __future__ import annotations

import collections
import math
import random
import threading
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Literal, NamedTuple, ParamSpec, TypeVar, overload

from seawall._core import validate as _validate
from seawall._core.classify import RetryOn, classify, compile_errors
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.decorate import decorate
from seawall._core.errors import Overloaded
from seawall._core.events import check_hooks, emit
from seawall._core.public import public

__all__ = ["BreakerEvent", "BreakerState", "CircuitBreaker", "CircuitOpen"]

P = ParamSpec("P")
T = TypeVar("T")

BreakerState = Literal["closed", "open", "half_open", "isolated"]


@public("seawall")
class CircuitOpen(Overloaded):
    """The circuit breaker rejected the call without making it.

    A subclass of :class:`~seawall.Overloaded`, so no :class:`~seawall.RetryPolicy` retries it:
    an open breaker fails fast through every layer.

    Attributes:
        breaker: the breaker's ``name`` (or ``None``).
        retry_after: seconds until the breaker admits a probe, if known (``None`` while isolated).
    """

    def __init__(self, breaker: str | None, retry_after: float | None, state: BreakerState) -> None:
        name = f" {breaker!r}" if breaker else ""
        when = f"; retry in {retry_after:.3f} s" if retry_after is not None else ""
        super().__init__(f"circuit breaker{name} is {state.replace('_', '-')}{when}", retry_after)
        self.breaker = breaker
        self.state = state
        self.retry_after = retry_after


@public("seawall.lowlevel")
class BreakerEvent(NamedTuple):
    """What a breaker's hook receives. Immutable and cheap to create (a named tuple), and shaped
    like the other strategies' events: ``kind`` and ``policy`` first.

    Attributes:
        kind: ``"state_change"``.
        policy: the breaker's ``name`` (or ``None``).
        old: the state left.
        new: the state entered.
        at: clock reading of the change.
        failure_ratio: the window's failure ratio when the change was decided (``nan`` if unknown).
        slow_ratio: the window's slow-call ratio then (``nan`` if unknown).
    """

    kind: Literal["state_change"]
    policy: str | None
    old: BreakerState
    new: BreakerState
    at: float
    failure_ratio: float = math.nan
    slow_ratio: float = math.nan

    @property
    def breaker(self) -> str | None:
        """The former name of :attr:`policy`."""
        return self.policy


StateHook = Callable[[BreakerEvent], None]
FailureOn = RetryOn


def default_is_failure(exc: BaseException) -> bool:
    """Whether an error counts against the dependency: what a budget would hear as a failure
    (:func:`seawall.lowlevel.classify`).

    Permanent errors (a 404, bad input) are answers, not sickness. Overload signals, timeouts
    and transient errors count as failures; cancellation counts as nothing.
    """
    return classify(exc).hears == "failure"


class _CountWindow:
    """The outcomes of the last *size* calls.

    A bounded deque of outcome codes (bit 1: failed, bit 2: slow). ``deque.append`` is atomic,
    so a plain success is recorded without taking the breaker's lock; totals are counted (in C)
    only when a failure asks whether to open.
    """

    __slots__ = ("outcomes", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.outcomes: collections.deque[int] = collections.deque(maxlen=size)

    def add(self, failed: bool, slow: bool, now: float) -> None:
        self.outcomes.append(failed | (slow << 1))

    def totals(self, now: float) -> tuple[int, int, int]:
        d = self.outcomes
        both = d.count(3)
        return len(d), d.count(1) + both, d.count(2) + both

    def clear(self) -> None:
        self.outcomes.clear()


class _TimeWindow:
    """The outcomes of the last *seconds*, in *buckets* slices (resilience4j's time-based window).

    Time is cut into slices of ``seconds / buckets``; a call lands in the slice of its end time,
    and slices older than the window are dropped, so the window slides by one slice at a time.
    """

    __slots__ = ("_calls", "_epoch", "_fail", "_slow", "buckets", "width")

    def __init__(self, seconds: float, buckets: int) -> None:
        self.buckets = buckets
        self.width = seconds / buckets
        self._epoch = [-1] * buckets
        self._calls = [0] * buckets
        self._fail = [0] * buckets
        self._slow = [0] * buckets

    def add(self, failed: bool, slow: bool, now: float) -> None:
        epoch = math.floor(now / self.width)
        i = epoch % self.buckets
        if self._epoch[i] != epoch:
            self._epoch[i] = epoch
            self._calls[i] = self._fail[i] = self._slow[i] = 0
        self._calls[i] += 1
        self._fail[i] += failed
        self._slow[i] += slow

    def totals(self, now: float) -> tuple[int, int, int]:
        oldest = math.floor(now / self.width) - self.buckets
        calls = failures = slow = 0
        for i, epoch in enumerate(self._epoch):
            if epoch > oldest:
                calls += self._calls[i]
                failures += self._fail[i]
                slow += self._slow[i]
        return calls, failures, slow

    def clear(self) -> None:
        self._epoch = [-1] * self.buckets


# Permission to make one call: (generation, is_probe, start time). A plain tuple: it is made on
# every call, and building a tuple costs a fraction of building an object.
Permit = tuple[int, bool, float]


def _never(outcome: int) -> None:  # pragma: no cover - guarded by _lock_free_success
    raise AssertionError("lock-free success path used without a count window")


@public("seawall")
class CircuitBreaker:
    """Closed, open, half-open: fail fast while a dependency is sick, then probe it.

    Defaults follow resilience4j's ``CircuitBreakerConfig`` (failure ratio 50 %, count window of
    100 calls) with a smaller minimum of calls and a single half-open probe.

    Use it with :meth:`call` / :meth:`acall`, as a decorator, or drive it by hand with
    :meth:`acquire` and :meth:`record` / :meth:`release` (the simulator does).

    Args:
        failure_ratio: open when at least this share of the window's calls failed, in (0, 1].
        minimum_calls: never open on fewer calls than this in the window.
        window_calls: a count-based window: the last N calls (default 100).
        window_seconds: a time-based window instead: the calls of the last T seconds.
        window_buckets: how many slices a time-based window slides by (default 10).
        slow_call_duration: a call that takes at least this long counts as slow (``None``: off).
        slow_call_ratio: open when at least this share of the window's calls were slow.
        open_duration: seconds to stay open before admitting probes.
        open_jitter: stretch each open period by a random factor in ``[1, 1 + open_jitter]``, so
            the clients of one dependency do not all probe it at the same instant.
        half_open_probes: concurrent calls admitted while half-open; all must succeed to close,
            and any failure re-opens the breaker.
        probe_timeout: seconds the half-open probes may take (``None``: ``open_duration``).
            Probes that have not all answered by then count as failed: the breaker re-opens
            and their late results are ignored, so a probe that hangs cannot keep a healthy
            dependency's callers rejected (resilience4j's ``maxWaitDurationInHalfOpenState``).
        failure_on: exception classes, or a predicate ``(exc) -> bool``, that count as failures.
            By default every ``Exception`` does except permanent ones (``Permanent``,
            ``permanent()``-marked): the dependency answered. Whatever it says, permanent
            errors never count and ``Overloaded`` always does (one classification for every
            strategy).
        clock: where time comes from (the system clock by default).
        rng: a seedable :class:`random.Random` for the open-duration jitter.
        name: shows up in :class:`CircuitOpen` and in hook events.
        hooks: callables receiving a :class:`~seawall.lowlevel.BreakerEvent` after each state
            change (``on_state_change`` is its former name).

    Raises:
        TypeError: a parameter has the wrong type (the message names it).
        ValueError: a parameter is out of range (the message names it).
    """

    def __init__(
        self,
        *,
        failure_ratio: float = 0.5,
        minimum_calls: int = 20,
        window_calls: int | None = None,
        window_seconds: float | None = None,
        window_buckets: int = 10,
        slow_call_duration: float | None = None,
        slow_call_ratio: float = 1.0,
        open_duration: float = 30.0,
        open_jitter: float = 0.1,
        half_open_probes: int = 1,
        probe_timeout: float | None = None,
        failure_on: FailureOn | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        name: str | None = None,
        hooks: Sequence[StateHook] = (),
        on_state_change: Sequence[StateHook] | None = None,
    ) -> None:
        # What pickling carries to another process: the configuration, not the state.
        self._config: dict[str, Any] = {
            "failure_ratio": failure_ratio,
            "minimum_calls": minimum_calls,
            "window_calls": window_calls,
            "window_seconds": window_seconds,
            "window_buckets": window_buckets,
            "slow_call_duration": slow_call_duration,
            "slow_call_ratio": slow_call_ratio,
            "open_duration": open_duration,
            "open_jitter": open_jitter,
            "half_open_probes": half_open_probes,
            "probe_timeout": probe_timeout,
            "failure_on": failure_on,
            "clock": clock,
            "rng": rng,
            "name": name,
            "hooks": hooks if on_state_change is None else on_state_change,
        }
        self.failure_ratio = _validate.ratio("failure_ratio", failure_ratio, zero=False)
        self.minimum_calls = _validate.count("minimum_calls", minimum_calls, minimum=1)
        self._window: _CountWindow | _TimeWindow
        if window_calls is not None and window_seconds is not None:
            raise TypeError("give window_calls or window_seconds, not both")
        if window_seconds is not None:
            # At least MIN_WINDOW: the clock reading is divided by the width of a slice.
            seconds = _validate.seconds(
                "window_seconds", window_seconds, finite=True, minimum=_validate.MIN_WINDOW
            )
            # Each slice costs memory up front: a bound well past any useful resolution.
            buckets = _validate.count("window_buckets", window_buckets, minimum=1, maximum=10_000)
            self._window = _TimeWindow(seconds, buckets)
        else:
            calls = _validate.count(
                "window_calls", 100 if window_calls is None else window_calls, minimum=1
            )
            if calls < self.minimum_calls:
                raise ValueError(
                    f"window_calls must be >= minimum_calls ({self.minimum_calls}), got {calls!r}"
                )
            self._window = _CountWindow(calls)
        self.slow_call_duration = (
            None
            if slow_call_duration is None
            else _validate.seconds(
                "slow_call_duration", slow_call_duration, zero=False, finite=True
            )
        )
        self.slow_call_ratio = _validate.ratio("slow_call_ratio", slow_call_ratio, zero=False)
        self.open_duration = _validate.seconds(
            "open_duration", open_duration, zero=False, finite=True
        )
        jitter = _validate.seconds("open_jitter", open_jitter, finite=True)
        self.open_jitter = jitter
        self.half_open_probes = _validate.count("half_open_probes", half_open_probes, minimum=1)
        self.probe_timeout = (
            self.open_duration
            if probe_timeout is None
            else _validate.seconds("probe_timeout", probe_timeout, zero=False, finite=True)
        )
        self._half_open_at = 0.0  # when the current half-open period began
        self._matcher = None if failure_on is None else compile_errors(failure_on, "failure_on")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {rng!r}")
        self._rng = rng if rng is not None else random.Random()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}")
        self.name = name
        if on_state_change is not None:
            warnings.warn(
                "CircuitBreaker(on_state_change=...) is now hooks=...",
                DeprecationWarning,
                stacklevel=2,
            )
            self._hooks = check_hooks(on_state_change, "on_state_change")
        else:
            self._hooks = check_hooks(hooks)

        # Calls need a start time only to spot slow calls.
        self._timed = self.slow_call_duration is not None
        self._lock_free_success = isinstance(self._window, _CountWindow) and not self._timed
        # Bound once: the deque is cleared in place, never replaced.
        self._append: Callable[[int], None] = (
            self._window.outcomes.append
            if isinstance(self._window, _CountWindow)
            else _never  # only used when _lock_free_success
        )
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        # Bumped on every state change: results of calls admitted under an older state are
        # ignored, so a slow call admitted while closed cannot close a re-opened breaker.
        self._generation = 0
        self._open_until = 0.0
        self._probes_in_flight = 0
        self._probe_successes = 0

    # -- state ------------------------------------------------------------------------------

    @property
    def state(self) -> BreakerState:
        """The current state (an open breaker whose time is up reads ``"half_open"``)."""
        with self._lock:
            if self._state == "open" and self._clock.now() >= self._open_until:
                return "half_open"
            return self._state

    def retry_after(self) -> float | None:
        """Seconds until a call may be admitted: 0 when closed, ``None`` while isolated."""
        with self._lock:
            if self._state == "isolated":
                return None
            if self._state == "open":
                return max(0.0, self._open_until - self._clock.now())
            return 0.0

    def metrics(self) -> tuple[int, int, int]:
        """The window's ``(calls, failures, slow_calls)`` now."""
        with self._lock:
            return self._window.totals(self._clock.now())

    def _change(
        self, new: BreakerState, now: float, ratios: tuple[float, float] = (math.nan, math.nan)
    ) -> BreakerEvent | None:
        # Called with the lock held; the hook runs after it is released.
        old = self._state
        self._state = new
        self._generation += 1
        self._probes_in_flight = 0
        self._probe_successes = 0
        if new == "open":
            stretch = 1.0 + self.open_jitter * self._rng.random() if self.open_jitter else 1.0
            self._open_until = now + self.open_duration * stretch
        if new == "closed":
            self._window.clear()
        if old == new or not self._hooks:
            return None
        return BreakerEvent("state_change", self.name, old, new, now, ratios[0], ratios[1])

    def _emit(self, event: BreakerEvent | None) -> None:
        if event is not None:
            emit(self._hooks, event)

    def isolate(self) -> None:
        """Hold the breaker open (every call fails fast) until :meth:`reset`."""
        with self._lock:
            event = self._change("isolated", self._clock.now())
        self._emit(event)

    def reset(self) -> None:
        """Close the breaker and forget the window (also ends :meth:`isolate`)."""
        with self._lock:
            event = self._change("closed", self._clock.now())
        self._emit(event)

    # -- sans-I/O core ----------------------------------------------------------------------

    def acquire(self) -> Permit:
        """Ask to make one call.

        Returns:
            A :class:`Permit`; report the call's end with :meth:`record` or :meth:`release`.

        Raises:
            CircuitOpen: the breaker is open, isolated, or half-open with every probe slot taken.
        """
        # Lock-free while closed: the generation is read before the state, so a permit issued
        # across a state change carries the older generation and its result is ignored.
        generation = self._generation
        state: BreakerState = self._state
        if state == "closed":
            return (generation, False, self._clock.now() if self._timed else 0.0)
        event = None
        permit: Permit | None = None
        with self._lock:
            now = self._clock.now()
            state = self._state
            if state == "closed":
                return (self._generation, False, now)
            if state == "open":
                if now < self._open_until:
                    raise CircuitOpen(self.name, self._open_until - now, "open")
                event = self._change("half_open", now)
                self._half_open_at = now
            elif state == "isolated":
                raise CircuitOpen(self.name, None, "isolated")
            if self._probes_in_flight + self._probe_successes < self.half_open_probes:
                self._probes_in_flight += 1
                permit = (self._generation, True, now)
            elif now - self._half_open_at < self.probe_timeout:
                # Every probe slot is taken: the probes' results will decide soon.
                raise CircuitOpen(self.name, 0.0, "half_open")
            else:
                # The probes hung past probe_timeout: failed probes. Re-open (their results,
                # when they come, belong to an older generation and are ignored).
                event = self._change("open", now)
                retry_after = self._open_until - now
        self._emit(event)  # outside the lock: a hook may read the breaker
        if permit is None:
            raise CircuitOpen(self.name, retry_after, "open")
        return permit

    def record(self, permit: Permit, error: BaseException | None = None) -> None:
        """Report the end of a call: *error* is its exception, or ``None`` if it returned."""
        generation, probe, started = permit
        if error is None and not probe and self._lock_free_success:
            # The success path of a count window: one atomic append, no lock.
            if generation == self._generation:
                self._append(0)
            return
        failed = error is not None and classify(error, self._matcher).hears == "failure"
        event = None
        with self._lock:
            now = self._clock.now()
            if generation != self._generation:
                return  # admitted under an earlier state: no longer relevant
            slow = self.slow_call_duration is not None and now - started >= self.slow_call_duration
            if probe:
                self._probes_in_flight -= 1
                if failed or slow:
                    event = self._change("open", now)
                else:
                    self._probe_successes += 1
                    if self._probe_successes >= self.half_open_probes:
                        event = self._change("closed", now)
            else:
                window = self._window
                window.add(failed, slow, now)
                if failed or slow:
                    calls, failures, slows = window.totals(now)
                    if calls >= self.minimum_calls:
                        fr = failures / calls
                        sr = slows / calls
                        if fr >= self.failure_ratio or (
                            self.slow_call_duration is not None and sr >= self.slow_call_ratio
                        ):
                            event = self._change("open", now, (fr, sr))
        self._emit(event)

    def release(self, permit: Permit) -> None:
        """Give a permit back without an outcome (the caller cancelled; nothing was learnt)."""
        generation, probe, _ = permit
        if probe:
            with self._lock:
                if generation == self._generation:
                    self._probes_in_flight -= 1

    # -- drivers ----------------------------------------------------------------------------

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` through the breaker.

        Raises:
            CircuitOpen: the call was not made.
            BaseException: whatever *fn* raised, unchanged.
        """
        result: T = self._run(fn, args, kwargs)
        return result

    def _run(self, fn: Callable[..., T], args: Any, kwargs: Any) -> T:
        # acquire() and record() inlined for a closed count window: the success path is two
        # attribute reads, the call, and one atomic append.
        generation = self._generation
        if self._state == "closed" and self._lock_free_success:
            permit: Permit = (generation, False, 0.0)
        else:
            permit = self.acquire()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self.record(permit, exc)
            raise
        except BaseException:
            self.release(permit)
            raise
        if self._lock_free_success and not permit[1]:
            if permit[0] == self._generation:
                self._append(0)
        else:
            self.record(permit, None)
        return result

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """The async twin of :meth:`call`. The caller's cancellation is not a failure."""
        result: T = await self._arun(fn, args, kwargs)
        return result

    async def _arun(self, fn: Callable[..., Awaitable[T]], args: Any, kwargs: Any) -> T:
        generation = self._generation
        if self._state == "closed" and self._lock_free_success:
            permit: Permit = (generation, False, 0.0)
        else:
            permit = self.acquire()
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:
            self.record(permit, exc)
            raise
        except BaseException:  # asyncio.CancelledError: the caller gave up, not the dependency
            self.release(permit)
            raise
        if self._lock_free_success and not permit[1]:
            if permit[0] == self._generation:
                self._append(0)
        else:
            self.record(permit, None)
        return result

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, T]]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate a ``def`` or ``async def`` function; its signature is preserved."""
        return decorate(fn, "guard", self._run, self._arun)

    def __reduce__(self) -> tuple[Any, ...]:
        # The configuration travels (for process pools and task queues); the state does not.
        return (_rebuild_breaker, (self._config,))

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"<CircuitBreaker{name} {self.state}>"


def _rebuild_breaker(config: dict[str, Any]) -> CircuitBreaker:
    return CircuitBreaker(**config)
