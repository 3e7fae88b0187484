"""The retry decisions for one logical HTTP request (:class:`HttpCall`), sans-I/O."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Generic

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, SystemClock
from seawall._core.errors import (
    _EXHAUSTED_MARK,
    DeadlineExceeded,
    Overloaded,
    add_note,
    is_exhausted,
    is_permanent,
    permanent,
)
from seawall._policy.http.rules import (
    FIRST_TRY,
    HISTORY_ATTRIBUTE,
    MIN_ATTEMPT_TIME,
    History,
    HttpAttempt,
    HttpRules,
    RetryableResponse,
    capped,
    first_try,
    fits,
    is_overloaded,
    parse_retry_after,
)
from seawall._policy.http.wire import Resp, RetryOnErrors, Wire
from seawall._strategies.budget import first_attempt_callables
from seawall._strategies.deadline import current_deadline as _ambient_deadline
from seawall._strategies.deadline import deadline_headers as encode_deadline_headers
from seawall._strategies.retry import RetryPolicy, RetryState

_NOT_IDEMPOTENT_NOTE = (
    "seawall: not retried: {method} is not idempotent and the request has no Idempotency-Key "
    "header; send one (or configure idempotency_key=True) to make it retryable"
)
_NOT_TRANSIENT_NOTE = (
    "seawall: not retried: {error} is not a transport error the HTTP rules retry (connect "
    "failures, resets and timeouts are; a route's retry_on may narrow them)"
)
_NOT_REPLAYABLE_NOTE = (
    "seawall: not retried: the request body is a stream that the first attempt consumed and "
    "that cannot be replayed; send bytes (or read the body first) to make it retryable"
)


class HostPolicy:
    """A derived policy (see :class:`~seawall._policy.http.policies.PolicyCache`) and what an
    HTTP call reads of it, read once, from its public fields: built once per policy and host.

    Attributes:
        policy: the derived :class:`~seawall.RetryPolicy`.
        clock: its clock (the system clock when it has none).
        now: what reads that clock: :func:`time.monotonic` itself for the system clock (one
            call less, as the retry core reads it).
        before, after: the budget's first-attempt callables (its ``first_attempt()``
            capability, see :func:`~seawall.lowlevel.first_attempt_callables`), ``None`` for
            nothing to do.
        fast: a first attempt needs no :class:`RetryState` (the retry core's first-attempt
            path): no ``timeout``, ``attempt_timeout`` nor ``retry_if_result``, and no hook
            that observes attempts.
    """

    __slots__ = ("after", "before", "clock", "fast", "now", "policy")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        clock = self.clock = policy.clock if policy.clock is not None else SYSTEM_CLOCK
        self.now: Callable[[], float] = time.monotonic if type(clock) is SystemClock else clock.now
        budget = policy.budget
        self.before, self.after = (
            (None, None) if budget is None else first_attempt_callables(budget)
        )
        observed = any(getattr(h, "observes_attempts", False) is True for h in policy.hooks or ())
        self.fast = not (
            policy.timeout is not None
            or policy.attempt_timeout is not None
            or policy.retry_if_result is not None
            or observed
        )

    def __repr__(self) -> str:
        return f"HostPolicy({self.policy!r})"


def stateless_first(host: HostPolicy, rules: HttpRules) -> bool:
    """Whether a first attempt under *host*'s policy and *rules* needs no :class:`RetryState`
    (when no ambient deadline is set): the policy's first-attempt capability, and a total time
    that leaves room for an attempt."""
    total = rules.total_timeout
    return host.fast and (total is None or total >= host.policy.min_attempt_time)


class HttpCall(Generic[Resp]):
    """The retry decisions for one logical HTTP request, over the policy's :class:`RetryState`.

    Sans-I/O: it decides, the driver (:func:`drive`, :func:`adrive`) sends, waits and closes.
    For each attempt the driver calls :meth:`next_attempt`, closes what :meth:`take` hands back,
    sends the request (with :meth:`timeout` and :meth:`deadline_headers`), then reports the
    outcome to :meth:`on_response` or :meth:`on_error`: each returns the wait before the next
    attempt, or ``None``: return that response (through :meth:`answer`) or raise that error.

    Args:
        host: the derived policy of the request's host (:class:`HostPolicy`).
        rules: the HTTP rules.
        method: the request method, in upper case.
        has_key: the request carries an ``Idempotency-Key``.
        replayable: the request body can be sent again.
        wire: how the client library's responses and errors are read.
        retry_on: the transport error classes worth retrying, or a route's conditions.
        predicate: the policy's ``retry_if_result``: a response it accepts (``True``) is retried
            as a retryable status is.
        first: the time the first attempt started, when the integration made it on the
            first-attempt path (:meth:`Policies.first`, which made the budget's deposit).
    """

    __slots__ = (
        "_after",
        "_history",
        "_implicit",
        "_kept",
        "_now",
        "_started",
        "_status",
        "attempt_deadline",
        "clock",
        "exhausted",
        "method",
        "policy",
        "predicate",
        "replayable",
        "retry_on",
        "rules",
        "safe",
        "state",
        "wire",
    )

    def __init__(
        self,
        host: HostPolicy,
        rules: HttpRules,
        method: str,
        has_key: bool,
        replayable: bool,
        wire: Wire[Resp],
        retry_on: RetryOnErrors = (),
        predicate: Callable[[Any], bool] | None = None,
        *,
        first: float | None = None,
    ) -> None:
        self.rules = rules
        self.method = method
        self.safe = has_key or method in rules.idempotent_methods
        self.replayable = replayable
        self.wire = wire
        self.retry_on = retry_on
        self.predicate = predicate
        self.policy = policy = host.policy
        self.clock = host.clock
        self._now = now_of = host.now
        self._status = 0
        now = self._started = now_of() if first is None else first
        #: The last response was given up on after retries (or said "overloaded"): see
        #: :meth:`answer`.
        self.exhausted = False
        # The latest retried response, kept through the wait: if the policy then gives up before
        # the next attempt, the caller gets it, as without retries (see take()).
        self._kept: Resp | None = None
        # The attempts retried so far (the last one is added when the call ends).
        self._history: list[HttpAttempt] | None = None
        total = rules.total_timeout
        if first is not None or (_ambient_deadline() is None and stateless_first(host, rules)):
            # The policy's first-attempt capability: a first attempt without bookkeeping (no
            # timeouts, no ambient deadline, no hook observing attempts) needs no RetryState
            # until it fails (see _state()); the budget hears what its first_attempt() offers.
            # With *first*, that attempt was made at that time by the integration's own
            # first-attempt path (see Policies.first), which made the budget's deposit.
            self.state: RetryState | None = None
            self._implicit = self.attempt_deadline = math.inf if total is None else now + total
            self._after = host.after
            if first is None and host.before is not None:
                host.before()
            return
        self._after = None
        state = self.state = policy.new_state(now)
        self.attempt_deadline = math.inf
        # The default total time, when nobody set a deadline (not sent downstream).
        self._implicit = math.inf
        if state.deadline == math.inf and total is not None:
            state.deadline = self._implicit = now + total

    def _state(self) -> RetryState:
        """The call's :class:`RetryState`; after a first attempt made without one (see
        ``__init__``), built now, as the retry core's loop does after its first attempt."""
        state = self.state
        if state is None:
            state = self.state = RetryState(self.policy, self._started, self._implicit)
            state.attempts = 1
        return state

    @property
    def attempts(self) -> int:
        """The attempts started so far."""
        state = self.state
        return 1 if state is None else state.attempts

    def next_attempt(self) -> float | None:
        """Count an attempt; return the seconds it may take (``inf`` for no limit), or ``None``:
        too little time is left for it, and the call ends with the kept response (:meth:`take`).

        Raises:
            DeadlineExceeded: too little time is left to start it, and no response is kept.
        """
        state = self.state
        if state is None:
            return self.attempt_deadline - self._started  # the first attempt, without a state
        # The first attempt starts as the call does: one clock reading less on every request.
        now = state.started if state.attempts == 0 else self._now()
        try:
            self.attempt_deadline = state.begin_attempt(now)
        except DeadlineExceeded as error:
            if self._kept is None:
                self._end(error)
                raise
            # The wait left too little time (a sleep that overshot on a real clock).
            self.exhausted = True  # retried, and no time for another attempt
            return None
        return self.attempt_deadline - now

    def take(self) -> Resp | None:
        """The kept response, handed over once: to close (a new attempt starts) or to return."""
        kept, self._kept = self._kept, None
        return kept

    def time_left(self) -> float:
        """Seconds left for this attempt (``inf`` for no limit)."""
        return self.attempt_deadline - self._now()

    def sends_as_is(self, timeouts: Collection[float | None], left: float) -> bool:
        """Whether the request can go as the caller built it: no deadline header is due, and
        its *timeouts* (all of them set) fit the time *left* (as :meth:`next_attempt` said)."""
        if self.attempt_deadline < self._implicit and self.rules.deadline_headers:
            return False  # the deadline headers are due
        return fits(timeouts, left)

    def timeout(self, configured: float | None) -> float | None:
        """min(configured, time left for this attempt); ``None`` for no limit.

        Never below :data:`MIN_ATTEMPT_TIME` (nor above ``MAX_SECONDS``): the attempt started
        with at least that much left, and a thread switch since must not turn the time left
        into a zero or negative timeout, which HTTP libraries refuse or misread.
        """
        return capped(configured, self.attempt_deadline - self._now())

    def timeouts(
        self, configured: Mapping[str, float | None], keys: Iterator[str] | tuple[str, ...]
    ) -> dict[str, float | None]:
        """:meth:`timeout` for each of *keys* (``configured.get(key)``), read at one instant."""
        left = self.attempt_deadline - self._now()
        if left == math.inf:
            return {k: configured.get(k) for k in keys}
        left = min(max(left, MIN_ATTEMPT_TIME), _validate.MAX_SECONDS)
        out: dict[str, float | None] = {}
        for k in keys:
            value = configured.get(k)
            out[k] = left if value is None or value > left else value
        return out

    @property
    def bounded_by_caller(self) -> bool:
        """Whether this attempt's deadline is the caller's or the policy's, not only the
        transport's default total time (which bounds getting a response, not reading a body
        the caller streams, and is not sent downstream)."""
        return self.attempt_deadline < self._implicit

    def deadline_headers(self) -> dict[str, str] | None:
        """The headers that tell the next hop how long it has (``None`` without a deadline)."""
        if self.attempt_deadline >= self._implicit or not self.rules.deadline_headers:
            return None
        # grpc-timeout and x-request-deadline, less the transit margin (see propagation).
        return encode_deadline_headers(self.attempt_deadline - self._now())

    def on_response(self, response: Resp) -> float | None:
        """Classify a response: the wait before retrying (the response is kept, see
        :meth:`take`), or ``None``: the driver returns ``answer(response)``."""
        self._status = status = self.wire.status(response)
        retried = status in self.rules.retry_statuses
        if status < 400 and not retried:
            # An answer: nothing more to read of it (headers are costly), but the predicate's.
            if self.predicate is None or not self.predicate(self.wire.view(response)):
                if self.state is not None:
                    self.state.on_success(self._now())
                elif self._after is not None:
                    self._after()  # the budget's first_attempt() "after"
                return None
            return self._retry(response, status, self.wire.headers(response))
        get_header = self.wire.headers(response)
        if is_overloaded(get_header):
            # The policy counts it as a failure for the budget and never retries it.
            now = self._now()
            self._state().on_error(Overloaded("the server answered overloaded; don't retry"), now)
            self.exhausted = True
            return None
        if retried or (self.predicate is not None and self.predicate(self.wire.view(response))):
            return self._retry(response, status, get_header)
        # The dependency answered, even with a 404.
        if self.state is not None:
            self.state.on_success(self._now())
        elif self._after is not None:
            self._after()
        return None

    def _retry(
        self, response: Resp, status: int, get_header: Callable[[str], str | None]
    ) -> float | None:
        state = self._state()
        # The server's wait as asked (finite: at most 32 digits, or a date in the calendar):
        # the policy clamps it to max_retry_after, or gives up if retry_after_beyond_max says so.
        signal = RetryableResponse(status, parse_retry_after(get_header("retry-after")))
        # A transient status is a failure of the dependency whether or not this request may be
        # sent again: retry=False still counts it against the budget, it only forbids the retry.
        delay = state.on_error(signal, self._now(), retry=self.safe and self.replayable)
        if delay is None:
            self.exhausted = is_exhausted(signal)  # retried and given up (attempts, deadline...)
        else:
            self._kept = response
            self._add(HttpAttempt(status, None, delay))
        return delay

    def _add(self, attempt: HttpAttempt) -> None:
        if self._history is None:
            self._history = [attempt]
        else:
            self._history.append(attempt)

    def _mark(self, response: Resp, history: History) -> Resp:
        if self.exhausted:
            # raise_for_status() above raises an error whose response carries the mark, and no
            # enclosing policy retries it: an outer @retry on HTTPStatusError around this
            # transport makes no more requests than the transport did (retry at one layer).
            with contextlib.suppress(AttributeError):  # a response class with __slots__
                setattr(response, _EXHAUSTED_MARK, True)
        self.wire.attach(response, history)
        return response

    def answer(self, response: Resp) -> Resp:
        """The response to return, with its history, marked if it was given up on."""
        if self._history is None and not self.exhausted:
            history = FIRST_TRY.get(self._status) or first_try(self._status)
            self.wire.attach(response, history)
            return response
        return self._mark(response, self._ended(HttpAttempt(self._status, None, None)))

    def answer_kept(self) -> Resp:
        """The kept response, when :meth:`next_attempt` ended the call (see :meth:`answer`)."""
        response = self.take()
        assert response is not None
        return self._mark(response, tuple(self._history or ()))

    def _ended(self, last: HttpAttempt) -> History:
        self._add(last)
        return tuple(self._history or ())

    def _end(self, error: BaseException) -> None:
        """Give the error that ends the call the history."""
        history = tuple(self._history or ())
        with contextlib.suppress(AttributeError, TypeError):  # a class refusing attributes
            setattr(error, HISTORY_ATTRIBUTE, history)

    def on_error(self, error: Exception) -> float | None:
        """Classify a transport error: the wait before retrying, or ``None`` to raise it."""
        retryable, never_sent = self.wire.classify(error, self.retry_on)
        now = self._now()
        state = self._state()
        if not retryable:
            # Not a transient kind (TLS, proxy, local protocol errors), or one the route's
            # retry_on leaves out: the policy, whose retry_on matches nothing, gives up and
            # counts no failure of the dependency.
            delay = state.on_error(error, now)
            if delay is None and not is_permanent(error):
                add_note(error, _NOT_TRANSIENT_NOTE.format(error=type(error).__name__))
        else:
            note = None
            if not never_sent:
                if not self.safe:
                    note = _NOT_IDEMPOTENT_NOTE.format(method=self.method)
                elif not self.replayable:
                    note = _NOT_REPLAYABLE_NOTE
            # A reset or a timeout is a failure of the dependency even when this request must
            # not be sent again: retry=False counts it for the budget without retrying.
            delay = state.on_error(error, now, retry=note is None)
            if delay is None and note is not None:
                add_note(error, note)
                # The request may have been processed: no layer above may send it again either.
                with contextlib.suppress(TypeError):  # an exception that refuses attributes
                    permanent(error)
        if delay is None:
            self._ended(HttpAttempt(None, error, None))
            self._end(error)
        else:
            self._add(HttpAttempt(None, error, delay))
        return delay


def settle(after: Callable[[], None], close: Callable[[], object]) -> None:
    """Tell the budget of a first attempt answered with a status returned as it is (*after*,
    the callable of its ``first_attempt()`` capability); if that raises, the response is
    released (*close*) before the error goes on."""
    try:
        after()
    except BaseException:
        close()
        raise
