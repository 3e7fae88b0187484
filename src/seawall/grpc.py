"""gRPC integration (grpcio, sync and ``grpc.aio``): client interceptors that retry by status
code per a :class:`~seawall.RetryPolicy`, and server interceptors for deadline intake and load
shedding.

Example:
    ``grpc.intercept_channel(grpc.insecure_channel(target), seawall.grpc.RetryInterceptor())``

Install the ``grpc`` extra (``pip install -e '.[grpc]'`` in a checkout). See ``docs/grpc.md``
for what is retried and how it compares with grpcio's own retry policy.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator
from typing import Any, Final, NamedTuple

import grpc
import grpc.aio

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.errors import (
    _EXHAUSTED_MARK,
    DeadlineExceeded,
    Overloaded,
    add_note,
    mark_exhausted,
    permanent,
)
from seawall._strategies.budget import Budget, TokenBucket
from seawall._strategies.deadline import deadline, timeout_from_headers
from seawall._strategies.hedge import Hedge
from seawall._strategies.retry import RetryPolicy, RetryState

__all__ = [
    "DEFAULT_REQUEST_BUFFER",
    "DEFAULT_RETRY_CODES",
    "PER_CHANNEL",
    "PUSHBACK_HEADER",
    "PUSHBACK_CODES",
    "REFUSE",
    "AsyncLoadShedder",
    "AsyncRetryInterceptor",
    "DeadlineInterceptor",
    "AsyncDeadlineInterceptor",
    "LoadShedder",
    "RetryInterceptor",
    "RetryableStatus",
    "StatusDeadlineExceeded",
    "parse_pushback",
]

#: The trailing metadata key in which a server asks for a wait before the next attempt, in
#: milliseconds; a negative (or malformed) value means "do not retry" (gRPC proposal A6).
PUSHBACK_HEADER: Final = "grpc-retry-pushback-ms"

#: Statuses retried whatever the server says: the service could not be reached or refused the
#: call before doing its work.
DEFAULT_RETRY_CODES: Final = frozenset({grpc.StatusCode.UNAVAILABLE})

#: Statuses retried only when the server sent a pushback: "too busy now, come back in N ms".
#: Without a pushback a RESOURCE_EXHAUSTED is a quota the caller ran out of, which retrying
#: repeats.
PUSHBACK_CODES: Final = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})

_OK = grpc.StatusCode.OK
_DEADLINE_CODE = grpc.StatusCode.DEADLINE_EXCEEDED
# A pushback is a decimal number of milliseconds; longer strings are refused, not parsed.
_PUSHBACK_MAX_LEN = 12


class _RefusePushback:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REFUSE"


#: What :func:`parse_pushback` returns for a pushback that forbids a retry.
REFUSE: Final = _RefusePushback()


def parse_pushback(metadata: object) -> float | _RefusePushback | None:
    """The server's pushback in *metadata* (trailing metadata pairs): seconds to wait, ``REFUSE``
    (negative or malformed: do not retry, as gRPC proposal A6 says), or ``None`` (none sent).

    The value is untrusted: a malformed one refuses the retry rather than crashing; clamping a
    long wait is the policy's ``max_retry_after``. Never raises.
    """
    if not metadata:
        return None
    try:
        items = list(metadata)  # type: ignore[call-overload]
    except TypeError:
        return None
    for item in items:
        try:
            key, value = item
        except (TypeError, ValueError):
            continue
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if not isinstance(key, str) or key.lower() != PUSHBACK_HEADER:
            continue
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return REFUSE
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        if not text or len(text) > _PUSHBACK_MAX_LEN or not (digits.isascii() and digits.isdigit()):
            return REFUSE
        ms = int(text)
        return REFUSE if ms < 0 else ms / 1000.0
    return None


class RetryableStatus(Exception):
    """Stands for a failed attempt with a retryable (or a fatal) status while the policy decides.

    Never raised to the caller, who gets grpcio's own ``RpcError`` when the policy gives up.

    Attributes:
        code: the ``grpc.StatusCode``.
        retry_after: the server's pushback in seconds, or ``None``.
    """

    def __init__(self, code: grpc.StatusCode, retry_after: float | None = None) -> None:
        super().__init__(f"gRPC {code.name}")
        self.code = code
        # Read by the policy (retry_after_of): server pushback replaces the backoff.
        self.retry_after = retry_after


class StatusDeadlineExceeded(DeadlineExceeded):
    """Stands for a DEADLINE_EXCEEDED status: a slow attempt, retried while the call's own
    deadline has room, and nobody's fault once it has passed (the engine's deadline rule)."""

    def __init__(self) -> None:
        super().__init__("gRPC DEADLINE_EXCEEDED")
        self.code = _DEADLINE_CODE


class _PerChannel:
    """The default ``budget``: a :class:`~seawall.TokenBucket` per interceptor (per channel)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PER_CHANNEL"


PER_CHANNEL: Final = _PerChannel()


def _codes(name: str, value: object) -> frozenset[grpc.StatusCode]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise TypeError(f"{name} must be a collection of grpc.StatusCode, got {value!r}")
    codes = frozenset(value)
    for code in codes:
        if not isinstance(code, grpc.StatusCode):
            raise TypeError(f"{name} must hold grpc.StatusCode values, got {code!r}")
        if code is _OK:
            raise ValueError(f"{name} must not hold StatusCode.OK")
    return codes


class _Rules(NamedTuple):
    policy: RetryPolicy
    retry_codes: frozenset[grpc.StatusCode]
    pushback_codes: frozenset[grpc.StatusCode]


def _rules(
    policy: RetryPolicy | None,
    budget: object,
    retry_codes: Collection[grpc.StatusCode],
    pushback_codes: Collection[grpc.StatusCode],
) -> _Rules:
    if policy is None:
        policy = RetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
    if budget is PER_CHANNEL:
        budget = policy.budget if policy.budget is not None else TokenBucket()
    elif budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a seawall.Budget, None or PER_CHANNEL, got {budget!r}")
    # Every status is classified here; the policy's retry_on is replaced by one that matches only
    # DEADLINE_EXCEEDED, so that the engine's deadline rule decides it, and a fatal status (not
    # matched) is an answer of the dependency for the budget.
    derived = policy.replace(
        retry_on=(StatusDeadlineExceeded,), retry_if_result=None, budget=budget
    )
    return _Rules(
        derived,
        _codes("retry_codes", retry_codes),
        _codes("pushback_codes", pushback_codes),
    )


class _Call:
    """The retry decisions for one logical RPC, over the policy's :class:`RetryState`."""

    __slots__ = ("attempt_deadline", "clock", "rules", "state")

    def __init__(self, rules: _Rules) -> None:
        self.rules = rules
        self.clock = rules.policy._clock
        self.state: RetryState = rules.policy.new_state(self.clock.now())
        self.attempt_deadline = math.inf

    def begin_attempt(self) -> None:
        """Count an attempt (raises ``DeadlineExceeded`` when too little time is left)."""
        self.attempt_deadline = self.state.begin_attempt(self.clock.now())

    def timeout(self, configured: float | None) -> float | None:
        """The attempt's timeout: min(the caller's, the time left); ``None`` for none."""
        left = self.attempt_deadline - self.clock.now()
        if configured is None:
            return None if left == math.inf else max(left, 0.0)
        return min(configured, max(left, 0.0))

    def on_status(
        self, code: grpc.StatusCode, trailing: object, committed: str | None = None
    ) -> tuple[float | None, BaseException | None]:
        """Classify an attempt's status: (the wait before the next attempt or ``None`` to stop,
        the exception that stood for it).

        *committed* says why the call cannot be replayed (gRPC A6: responses received, or a
        request stream no longer buffered); a status that would be retried is then a failure of
        the dependency that is not retried, with a note saying why.
        """
        now = self.clock.now()
        state = self.state
        if code is _OK:
            state.on_success(now)
            return None, None
        rules = self.rules
        pushback = parse_pushback(trailing)
        signal: Exception
        if pushback is REFUSE and (
            code in rules.retry_codes or code in rules.pushback_codes or code is _DEADLINE_CODE
        ):
            # The server said "do not retry" a status that would be: a failure of the dependency,
            # never retried (a pushback on a fatal status changes nothing: gRPC proposal A6).
            signal = Overloaded(f"gRPC {code.name} with a pushback that forbids retries")
            return state.on_error(signal, now), signal
        if committed is not None and (
            code in rules.retry_codes
            or code is _DEADLINE_CODE
            or (code in rules.pushback_codes and isinstance(pushback, float))
        ):
            signal = StatusDeadlineExceeded() if code is _DEADLINE_CODE else RetryableStatus(code)
            add_note(signal, f"seawall: gRPC {code.name} not retried: {committed}")
            return state.on_error(signal, now, retry=False), signal
        if code is _DEADLINE_CODE:
            signal = StatusDeadlineExceeded()
            return state.on_error(signal, now), signal
        wait = pushback if isinstance(pushback, float) else None
        if code in rules.retry_codes or (code in rules.pushback_codes and wait is not None):
            signal = RetryableStatus(code, wait)
            return state.on_error(signal, now, retry=True), signal
        # A fatal status: the dependency answered (the budget's on_answer), never retried;
        # marked so, it is not reported as an error that retry_on failed to match.
        signal = permanent(RetryableStatus(code))
        return state.on_error(signal, now), signal


def _hand_over(signal: BaseException | None, error: object) -> None:
    """Carry the policy's marks and notes from the stand-in *signal* to grpcio's *error*, so the
    layers above see that this call was retried already (retry at one layer) or must not be."""
    if signal is None or not isinstance(error, BaseException):
        return
    for note in getattr(signal, "__notes__", ()):
        add_note(error, note)
    try:
        if isinstance(signal, Overloaded):
            permanent(error)
        elif signal.__dict__.get(_EXHAUSTED_MARK) is True:
            mark_exhausted(error)
    except TypeError:
        pass  # an error class that refuses attributes: nothing more to say


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _SyncDetails(_CallDetails, grpc.ClientCallDetails):
    """A ``grpc.ClientCallDetails`` with a new timeout."""


def _with_timeout(details: grpc.ClientCallDetails, timeout: float | None) -> Any:
    return _SyncDetails(
        details.method,
        timeout,
        details.metadata,
        details.credentials,
        getattr(details, "wait_for_ready", None),
        getattr(details, "compression", None),
    )


# -- request streams: replayed while buffered ---------------------------------------------------

#: The default number of request messages kept for replay (``request_buffer``): a request
#: stream longer than this commits the call, as gRPC's retry buffer limit does (proposal A6).
DEFAULT_REQUEST_BUFFER: Final = 64

_RESPONSE_RECEIVED: Final = "a response message had been received (the call is committed)"
_HEADERS_RECEIVED: Final = "the server had sent its response headers (the call is committed)"


def _outgrown(limit: int) -> str:
    return (
        f"the request stream outgrew the retry buffer (request_buffer={limit} messages), so it "
        "cannot be replayed"
    )


class _Requests:
    """A request stream that each attempt reads from the start: the messages read so far are
    kept (a list or tuple is kept whole), up to *limit*; beyond it the stream is read once, and
    :meth:`committed` says why the call can no longer be retried.

    grpcio reads a request stream in a thread of its own; an attempt that ended may still be
    reading when the next one starts, so a lock keeps every message read, for the next attempt.
    """

    __slots__ = (
        "_end",
        "_first",
        "_generation",
        "_items",
        "_limit",
        "_lock",
        "_overflow",
        "_source",
    )

    def __init__(self, source: Any, limit: int) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._first = 0  # the index in the stream of _items[0]
        self._generation = 0
        self._overflow = False
        if isinstance(source, (list, tuple)):
            self._items: list[Any] = list(source)
            self._end = True
            self._limit = len(self._items)
            self._source: Iterator[Any] = iter(())
        else:
            self._items = []
            self._end = False
            self._source = iter(source)

    def committed(self) -> str | None:
        """Why the stream cannot be replayed, or ``None`` while it can."""
        return _outgrown(self._limit) if self._overflow else None

    def replay(self) -> Iterator[Any]:
        """The stream from its first message, for a new attempt (the previous one stops)."""
        with self._lock:
            self._generation += 1
            return self._read(self._generation)

    def _read(self, generation: int) -> Iterator[Any]:
        index = 0
        while True:
            with self._lock:
                if generation != self._generation:
                    return  # a newer attempt reads the stream now
                if index - self._first < len(self._items):
                    item = self._items[index - self._first]
                elif self._end:
                    return
                else:
                    try:
                        item = next(self._source)
                    except StopIteration:
                        self._end = True
                        return
                    self._items.append(item)
                    if len(self._items) > self._limit:
                        self._overflow = True
                index += 1
                if self._overflow:
                    # No replay any more: keep only what this attempt has not read yet.
                    del self._items[: index - self._first]
                    self._first = index
            yield item


# -- response streams (sync) --------------------------------------------------------------------

_NOTHING: Final = object()


class _Stream(grpc.Call):
    """A response stream that retries until the call is committed (gRPC proposal A6): until
    the first response message, or response headers, arrive. Afterwards, messages and the final
    status are those of the last attempt.

    What grpcio's own streaming call offers (``grpc.Call``, iteration, ``cancel``) is served
    from the attempt in progress; reading its status first waits for the retries to settle.
    """

    def __init__(
        self,
        call: _Call,
        start: Callable[[], Any],
        requests: _Requests | None,
    ) -> None:
        self._call = call
        self._start = start
        self._requests = requests
        self._attempt = start()
        self._settled = False
        self._pending: Any = _NOTHING
        self._error: BaseException | None = None
        self._reported = False
        self._cancelled = False

    def _committed(self, attempt: Any) -> str | None:
        try:
            if attempt.initial_metadata():
                return _HEADERS_RECEIVED
        except Exception:  # a call without headers: not committed by them
            pass
        return self._requests.committed() if self._requests is not None else None

    def _settle(self) -> None:
        """Attempt until a first message arrives or the call ends; retries happen here only."""
        call = self._call
        while not self._settled:
            attempt = self._attempt
            try:
                self._pending = next(attempt)
            except StopIteration:
                self._settled = True
                self._report(None)
                return
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.Call) else None
                if code is None or self._cancelled:
                    self._settled = True
                    self._error = error
                    return
                delay, signal = call.on_status(
                    code, error.trailing_metadata(), self._committed(attempt)
                )
                self._reported = True
                if delay is not None:
                    call.clock.sleep(delay)
                    try:
                        call.begin_attempt()
                    except DeadlineExceeded:
                        delay = None  # too little time left: the last attempt's outcome stands
                    else:
                        if not self._cancelled:
                            self._attempt = self._start()
                            self._reported = False
                            continue
                _hand_over(signal, error)
                self._settled = True
                self._error = error
                return
            self._settled = True

    def _report(self, error: Any) -> None:
        """Tell the policy how the committed call ended (once; a cancelled call is nobody's
        outcome)."""
        if self._reported or self._cancelled:
            return
        self._reported = True
        if error is None:
            self._call.on_status(_OK, None)
            return
        code = error.code() if isinstance(error, grpc.Call) else None
        if code is not None:
            _, signal = self._call.on_status(code, error.trailing_metadata(), _RESPONSE_RECEIVED)
            _hand_over(signal, error)

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        if not self._settled:
            self._settle()
        pending = self._pending
        if pending is not _NOTHING:
            self._pending = _NOTHING
            return pending
        if self._error is not None:
            raise self._error
        try:
            return next(self._attempt)
        except StopIteration:
            self._report(None)
            raise
        except grpc.RpcError as error:
            self._report(error)
            raise

    def next(self) -> Any:
        return self.__next__()

    # grpc.Call: served by the attempt in progress; a status once the retries have settled.
    def initial_metadata(self) -> Any:
        self._settle()
        return self._attempt.initial_metadata()

    def trailing_metadata(self) -> Any:
        self._settle()
        return self._attempt.trailing_metadata()

    def code(self) -> Any:
        self._settle()
        return self._attempt.code()

    def details(self) -> Any:
        self._settle()
        return self._attempt.details()

    def is_active(self) -> bool:
        return bool(self._attempt.is_active())

    def time_remaining(self) -> Any:
        return self._attempt.time_remaining()

    def cancel(self) -> bool:
        self._cancelled = True  # and no attempt after this one
        return bool(self._attempt.cancel())

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return bool(self._attempt.add_callback(callback))

    def __getattr__(self, name: str) -> Any:
        # The rest of grpcio's call (the future's methods): the attempt's, once settled.
        if name.startswith("_"):
            raise AttributeError(name)
        self._settle()
        return getattr(self._attempt, name)


class _Base:
    def __init__(
        self,
        policy: RetryPolicy | None,
        budget: object,
        retry_codes: Collection[grpc.StatusCode],
        pushback_codes: Collection[grpc.StatusCode],
        request_buffer: int,
    ) -> None:
        self._rules = _rules(policy, budget, retry_codes, pushback_codes)
        self._request_buffer = _validate.count("request_buffer", request_buffer)

    @property
    def policy(self) -> RetryPolicy:
        """The policy the interceptor drives (``retry_on`` replaced by the status rules)."""
        return self._rules.policy

    @property
    def budget(self) -> Budget | None:
        """The budget that throttles this channel's retries."""
        return self._rules.policy.budget


class RetryInterceptor(
    _Base,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """A client interceptor that retries RPCs by status code, per a policy.

    ``grpc.intercept_channel(channel, RetryInterceptor(policy))``. The policy decides every
    retry (attempts, backoff, deadline, budget, hooks, kill switch) and waits on its clock; the
    interceptor classifies statuses the gRPC way:

    - retried: the statuses in *retry_codes* (UNAVAILABLE); those in *pushback_codes*
      (RESOURCE_EXHAUSTED) only when the server sent ``grpc-retry-pushback-ms``;
      DEADLINE_EXCEEDED while the call's own deadline has room (a slow attempt under
      ``attempt_timeout``), never once it has passed;
    - a pushback replaces the backoff (clamped to the policy's ``max_retry_after``); a negative
      or malformed one forbids the retry (gRPC proposal A6);
    - never retried: other statuses (fatal: an answer, which moves no token of a
      :class:`~seawall.TokenBucket`);
    - each attempt's timeout is min(the caller's timeout, the time left of the policy's
      ``timeout``, ``attempt_timeout`` and the ambient :func:`seawall.deadline`), so the server
      sees the time left in ``grpc-timeout``.

    When the policy gives up, the caller gets grpcio's ``RpcError`` of the last attempt, with the
    policy's note and the marks that keep an enclosing seawall policy from retrying it again.

    Streaming RPCs are retried by the same rules until the call is committed (gRPC proposal
    A6): once a response message or the response headers have arrived, a failure is the
    caller's, with a note saying why it was not retried. A request stream is replayed from its
    first message, so it is retried only while it is buffered: a list or tuple always, any
    other iterable up to *request_buffer* messages (past that, the call is committed).

    Args:
        policy: the retry policy (``RetryPolicy()`` by default); its ``retry_on`` and
            ``retry_if_result`` are replaced by the status rules.
        budget: ``PER_CHANNEL`` (default): the policy's budget if it has one, else a fresh
            :class:`~seawall.TokenBucket` (10 tokens, ratio 0.1, as gRPC's ``retryThrottling``)
            for this interceptor, so for the channel it is installed on; a
            :class:`~seawall.Budget` to share; or ``None``.
        retry_codes: statuses always worth retrying.
        pushback_codes: statuses retried only with a server pushback.
        request_buffer: how many messages of a request stream are kept for a replay
            (``DEFAULT_REQUEST_BUFFER``, 64); 0 retries only lists and tuples.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        budget: Any = PER_CHANNEL,
        retry_codes: Collection[grpc.StatusCode] = DEFAULT_RETRY_CODES,
        pushback_codes: Collection[grpc.StatusCode] = PUSHBACK_CODES,
        request_buffer: int = DEFAULT_REQUEST_BUFFER,
    ) -> None:
        super().__init__(policy, budget, retry_codes, pushback_codes, request_buffer)

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        return self._unary_response(continuation, client_call_details, lambda: request, None)

    def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = _Requests(request_iterator, self._request_buffer)
        return self._unary_response(continuation, client_call_details, requests.replay, requests)

    def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        call = _Call(self._rules)
        call.begin_attempt()
        d = client_call_details
        return _Stream(
            call, lambda: continuation(_with_timeout(d, call.timeout(d.timeout)), request), None
        )

    def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = _Requests(request_iterator, self._request_buffer)
        call = _Call(self._rules)
        call.begin_attempt()
        d = client_call_details

        def start() -> Any:
            return continuation(_with_timeout(d, call.timeout(d.timeout)), requests.replay())

        return _Stream(call, start, requests)

    def _unary_response(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        client_call_details: grpc.ClientCallDetails,
        request: Callable[[], Any],
        requests: _Requests | None,
    ) -> Any:
        call = _Call(self._rules)
        sleep = call.clock.sleep
        last: Any = None
        while True:
            try:
                call.begin_attempt()
            except DeadlineExceeded:
                if last is None:
                    raise
                return last  # the wait left too little time: the last attempt's outcome
            details = _with_timeout(client_call_details, call.timeout(client_call_details.timeout))
            outcome = continuation(details, request())
            code = outcome.code()
            if code is None:  # a local failure before any status (grpcio's _FailureOutcome)
                return outcome
            committed = None
            if requests is not None:
                committed = _HEADERS_RECEIVED if outcome.initial_metadata() else None
                committed = committed or requests.committed()
            delay, signal = call.on_status(code, outcome.trailing_metadata(), committed)
            if delay is None:
                if code is not _OK:
                    _hand_over(signal, outcome)
                return outcome
            last = outcome
            sleep(delay)


class _AioDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None


class _CopyFailed(ConnectionError):
    """A hedged copy ended with a retryable status: the hedge may go on with the others."""

    def __init__(self, attempt: Any) -> None:
        super().__init__("a hedged copy failed with a retryable status")
        self.attempt = attempt


def _method_name(method: object) -> str:
    return method.decode("utf-8", "replace") if isinstance(method, bytes) else str(method)


def _hedge_methods(hedge: Hedge | None, methods: Collection[str]) -> frozenset[str]:
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Collection):
        raise TypeError(f"hedge_methods must be a collection of method names, got {methods!r}")
    names = frozenset(methods)
    for name in names:
        if not isinstance(name, str) or not name.startswith("/"):
            raise TypeError(
                f"hedge_methods must hold full method names '/pkg.Service/Method', got {name!r}"
            )
    if hedge is None:
        if names:
            raise ValueError("hedge_methods needs a hedge (seawall.Hedge(...))")
        return names
    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a seawall.Hedge, got {hedge!r}")
    if hedge.replicas is not None:
        raise ValueError("hedge must not have replicas: the channel names the server")
    if not names:
        raise ValueError(
            "hedge_methods must name the idempotent methods to hedge: a hedged RPC runs more "
            "than once on the server"
        )
    return names


class AsyncRetryInterceptor(_Base, grpc.aio.UnaryUnaryClientInterceptor):
    """The ``grpc.aio`` twin of :class:`RetryInterceptor`: ``grpc.aio.insecure_channel(target,
    interceptors=AsyncRetryInterceptor(policy).interceptors())``.

    ``grpc.aio`` gives each interceptor object one kind of RPC only (unary-unary for this
    one): :meth:`interceptors` returns it with its three streaming twins, which share its
    policy, budget and rules. ``interceptors=[AsyncRetryInterceptor(policy)]`` retries
    unary-unary RPCs only.

    Waits use the policy clock's ``asleep``; the caller's cancellation is never retried.
    Arguments are those of :class:`RetryInterceptor`, and:

    Args:
        hedge: a :class:`~seawall.Hedge`: RPCs to the methods in *hedge_methods* are hedged
            within each attempt. When one has not answered after the hedge's delay, a copy is
            sent; the first answer wins (a retryable status lets the others go on, as in gRPC
            hedging), the others are cancelled. The hedge's ``max_attempts``,
            ``max_extra_load``, budget and kill switch apply.
        hedge_methods: the full names (``"/pkg.Service/Method"``) of the idempotent methods to
            hedge; required with *hedge*, since a hedged RPC runs more than once on the server.
            Only unary-unary RPCs are hedged.

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        budget: Any = PER_CHANNEL,
        retry_codes: Collection[grpc.StatusCode] = DEFAULT_RETRY_CODES,
        pushback_codes: Collection[grpc.StatusCode] = PUSHBACK_CODES,
        request_buffer: int = DEFAULT_REQUEST_BUFFER,
        hedge: Hedge | None = None,
        hedge_methods: Collection[str] = (),
    ) -> None:
        super().__init__(policy, budget, retry_codes, pushback_codes, request_buffer)
        self._hedge_methods = _hedge_methods(hedge, hedge_methods)
        if hedge is not None and hedge.budget is not None and hedge.budget is self.budget:
            # As in a Pipeline: the retry loop reports requests and outcomes to the shared
            # budget; hedges only withdraw from it, so nothing is counted twice.
            hedge = hedge.withdrawing_only()
        self._hedge = hedge

    @property
    def hedge(self) -> Hedge | None:
        """The hedging policy, if any (a ``withdrawing_only()`` view when it shares the budget)."""
        return self._hedge

    async def _hedged(
        self, hedge: Hedge, continuation: Any, d: Any, request: Any, call: _Call
    ) -> Any:
        sent: list[Any] = []
        retryable = self._rules.retry_codes | {_DEADLINE_CODE}

        async def copy() -> Any:
            details = grpc.aio.ClientCallDetails(
                d.method, call.timeout(d.timeout), d.metadata, d.credentials, d.wait_for_ready
            )
            attempt = await continuation(details, request)
            sent.append(attempt)
            if await attempt.code() in retryable:
                raise _CopyFailed(attempt)
            return attempt

        winner: Any = None
        try:
            winner = await hedge.acall(copy)
        except _CopyFailed as failed:
            winner = failed.attempt  # every copy failed: the retry loop decides on the last
        finally:
            for attempt in sent:
                if attempt is not winner:
                    attempt.cancel()  # a loser must not keep running on the server
        return winner

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        call = _Call(self._rules)
        asleep = call.clock.asleep
        hedge = self._hedge
        if (
            hedge is not None
            and _method_name(client_call_details.method) not in self._hedge_methods
        ):
            hedge = None
        last: Any = None
        while True:
            try:
                call.begin_attempt()
            except DeadlineExceeded:
                if last is None:
                    raise
                return last  # the wait left too little time: the last attempt's outcome
            d = client_call_details
            if hedge is not None:
                attempt = await self._hedged(hedge, continuation, d, request, call)
            else:
                details = grpc.aio.ClientCallDetails(
                    d.method, call.timeout(d.timeout), d.metadata, d.credentials, d.wait_for_ready
                )
                attempt = await continuation(details, request)
            code = await attempt.code()
            delay, signal = call.on_status(code, await attempt.trailing_metadata())
            if delay is None:
                if code is _OK:
                    return attempt
                try:
                    await attempt
                except grpc.RpcError as error:
                    _hand_over(signal, error)
                    raise
                return attempt  # pragma: no cover - a failed status always raises
            last = attempt
            await asleep(delay)

    def _aio_start(
        self, continuation: Callable[..., Awaitable[Any]], d: Any, call: _Call, request: Any
    ) -> Callable[[], Awaitable[Any]]:
        async def start() -> Any:
            details = grpc.aio.ClientCallDetails(
                d.method, call.timeout(d.timeout), d.metadata, d.credentials, d.wait_for_ready
            )
            return await continuation(details, request() if callable(request) else request)

        return start

    def interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """This interceptor and its twins for unary-stream, stream-unary and stream-stream RPCs,
        for ``grpc.aio.insecure_channel(target, interceptors=...)``."""
        return [
            self,
            _AioUnaryStreamRetry(self),
            _AioStreamUnaryRetry(self),
            _AioStreamStreamRetry(self),
        ]

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        call = _Call(self._rules)
        call.begin_attempt()
        start = self._aio_start(continuation, client_call_details, call, lambda: request)
        return _AioUnaryStream(call, start, None)

    async def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = _AsyncRequests(request_iterator, self._request_buffer)
        call = _Call(self._rules)
        call.begin_attempt()
        start = self._aio_start(continuation, client_call_details, call, requests.replay)
        return _AioStreamUnary(call, start, requests)

    async def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        requests = _AsyncRequests(request_iterator, self._request_buffer)
        call = _Call(self._rules)
        call.begin_attempt()
        start = self._aio_start(continuation, client_call_details, call, requests.replay)
        return _AioStreamStream(call, start, requests)


class _AioUnaryStreamRetry(grpc.aio.UnaryStreamClientInterceptor):
    """:class:`AsyncRetryInterceptor` for unary-stream RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await self._owner.intercept_unary_stream(continuation, client_call_details, request)


class _AioStreamUnaryRetry(grpc.aio.StreamUnaryClientInterceptor):
    """:class:`AsyncRetryInterceptor` for stream-unary RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._owner.intercept_stream_unary(
            continuation, client_call_details, request_iterator
        )


class _AioStreamStreamRetry(grpc.aio.StreamStreamClientInterceptor):
    """:class:`AsyncRetryInterceptor` for stream-stream RPCs (see ``interceptors()``)."""

    def __init__(self, owner: AsyncRetryInterceptor) -> None:
        self._owner = owner

    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._owner.intercept_stream_stream(
            continuation, client_call_details, request_iterator
        )


# -- streams on grpc.aio ------------------------------------------------------------------------

_END: Final = object()


class _AsyncRequests:
    """:class:`_Requests` for ``grpc.aio``: the source (an async or a plain iterable, or the
    stream of ``call.write()``) is read by one task at a time, shielded, so that cancelling an
    attempt that ended never cancels the source; what it yields is kept for the next attempt.
    """

    __slots__ = (
        "_end",
        "_error",
        "_first",
        "_generation",
        "_items",
        "_limit",
        "_next",
        "_overflow",
        "_pull",
    )

    def __init__(self, source: Any, limit: int) -> None:
        self._limit = limit
        self._first = 0
        self._generation = 0
        self._overflow = False
        self._pull: asyncio.Future[Any] | None = None
        self._error: BaseException | None = None
        self._end = False
        self._items: list[Any] = []
        if isinstance(source, (list, tuple)):
            self._items = list(source)
            self._end = True
            self._limit = len(self._items)
        elif hasattr(source, "__aiter__"):
            self._next = source.__aiter__().__anext__
        else:
            iterator = iter(source)

            async def next_item() -> Any:
                try:
                    return next(iterator)
                except StopIteration:
                    raise StopAsyncIteration from None

            self._next = next_item

    def committed(self) -> str | None:
        return _outgrown(self._limit) if self._overflow else None

    def replay(self) -> AsyncIterator[Any]:
        self._generation += 1
        return self._read(self._generation)

    async def _pull_one(self) -> Any:
        try:
            return await self._next()
        except StopAsyncIteration:
            return _END

    def _pulled(self, future: asyncio.Future[Any]) -> None:
        self._pull = None
        if future.cancelled():
            self._end = True
            return
        error = future.exception()
        if error is not None:
            self._error = error
            self._end = True
            return
        item = future.result()
        if item is _END:
            self._end = True
            return
        self._items.append(item)
        if len(self._items) > self._limit:
            self._overflow = True

    async def _read(self, generation: int) -> AsyncIterator[Any]:
        index = 0
        while generation == self._generation:
            if index - self._first < len(self._items):
                item = self._items[index - self._first]
                index += 1
                if self._overflow:
                    del self._items[: index - self._first]
                    self._first = index
                yield item
                continue
            if self._end:
                if self._error is not None:
                    raise self._error
                return
            if self._pull is None:
                self._pull = asyncio.ensure_future(self._pull_one())
                self._pull.add_done_callback(self._pulled)
            # Shielded: an attempt's reader may be cancelled; the read it began completes and
            # its message is kept for the next attempt.
            await asyncio.wait((self._pull,))


class _AioStream:
    """The ``grpc.aio`` twin of :class:`_Stream` (a base for the call classes below): a task
    started at once makes the attempts until the first response message (or the end of the
    call); reading, the status and ``await`` wait for it."""

    _once: bool = False  # stream-unary: the call is settled by its one response, at the end

    def __init__(
        self,
        call: _Call,
        start: Callable[[], Awaitable[Any]],
        requests: _AsyncRequests | None,
    ) -> None:
        self._call = call
        self._start = start
        self._requests = requests
        self._attempt: Any = None
        self._pending: Any = _NOTHING
        self._error: BaseException | None = None
        self._reported = False
        self._cancelled = False
        self._eof = False
        self._task = asyncio.ensure_future(self._settle())

    def _committed_by(self, headers: object) -> str | None:
        if headers:
            return _HEADERS_RECEIVED
        return self._requests.committed() if self._requests is not None else None

    async def _settle(self) -> None:
        call = self._call
        while True:
            self._attempt = attempt = await self._start()
            self._reported = False
            try:
                if self._once:
                    await attempt
                else:
                    message = await attempt.read()
                    if message is grpc.aio.EOF:
                        self._eof = True
                        self._report(None)
                    else:
                        self._pending = message
                    return
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code is None or self._cancelled:
                    self._error = error
                    return
                # The attempt's own headers: the error's may be taken before they arrived.
                headers = error.initial_metadata() or await attempt.initial_metadata()
                delay, signal = call.on_status(
                    code, error.trailing_metadata(), self._committed_by(headers)
                )
                self._reported = True
                if delay is not None and not self._cancelled:
                    await call.clock.asleep(delay)
                    try:
                        call.begin_attempt()
                    except DeadlineExceeded:
                        pass  # too little time left: the last attempt's outcome stands
                    else:
                        if not self._cancelled:
                            continue
                _hand_over(signal, error)
                self._error = error
                return
            else:
                self._report(None)  # stream-unary: answered
                return

    def _report(self, error: Any) -> None:
        if self._reported or self._cancelled:
            return
        self._reported = True
        if error is None:
            self._call.on_status(_OK, None)
            return
        code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
        if code is not None:
            _, signal = self._call.on_status(code, error.trailing_metadata(), _RESPONSE_RECEIVED)
            _hand_over(signal, error)

    async def _settled(self) -> Any:
        # Shielded: a reader cancelled while the attempts go on does not cancel the call.
        await asyncio.wait((self._task,))
        self._task.result()  # an error of the interceptor's own (e.g. DeadlineExceeded)
        return self._attempt

    async def read(self) -> Any:
        await self._settled()
        pending = self._pending
        if pending is not _NOTHING:
            self._pending = _NOTHING
            return pending
        if self._error is not None:
            raise self._error
        if self._eof:
            return grpc.aio.EOF
        try:
            message = await self._attempt.read()
        except grpc.RpcError as error:
            self._report(error)
            raise
        if message is grpc.aio.EOF:
            self._eof = True
            self._report(None)
        return message

    async def _messages(self) -> AsyncIterator[Any]:
        while True:
            message = await self.read()
            if message is grpc.aio.EOF:
                return
            yield message

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    def cancel(self) -> bool:
        self._cancelled = True  # and no attempt after this one
        self._task.cancel()
        if self._attempt is not None:
            self._attempt.cancel()
        return True

    def cancelled(self) -> bool:
        return self._attempt is not None and bool(self._attempt.cancelled())

    def done(self) -> bool:
        return self._task.done() and self._attempt is not None and bool(self._attempt.done())

    def add_done_callback(self, callback: Any) -> None:
        def later(task: Any) -> None:
            if self._attempt is not None:
                self._attempt.add_done_callback(callback)

        self._task.add_done_callback(later)

    def time_remaining(self) -> float | None:
        left: float | None = None if self._attempt is None else self._attempt.time_remaining()
        return left

    async def initial_metadata(self) -> Any:
        return await (await self._settled()).initial_metadata()

    async def trailing_metadata(self) -> Any:
        return await (await self._settled()).trailing_metadata()

    async def code(self) -> Any:
        return await (await self._settled()).code()

    async def details(self) -> Any:
        return await (await self._settled()).details()

    async def debug_error_string(self) -> Any:
        return await (await self._settled()).debug_error_string()

    async def wait_for_connection(self) -> None:
        await (await self._settled()).wait_for_connection()

    async def write(self, request: Any) -> None:
        # Not reached: grpc.aio turns call.write() into the request stream the interceptor got.
        raise NotImplementedError("write to the call grpc.aio returned")

    async def done_writing(self) -> None:
        raise NotImplementedError("write to the call grpc.aio returned")

    @property
    def _done_writing_flag(self) -> bool:
        # grpc.aio's write() asks it; the writes go to the replayed request stream.
        return False


class _AioUnaryStream(_AioStream, grpc.aio.UnaryStreamCall):  # type: ignore[type-arg]
    pass


class _AioStreamStream(_AioStream, grpc.aio.StreamStreamCall):  # type: ignore[type-arg]
    pass


class _AioStreamUnary(_AioStream, grpc.aio.StreamUnaryCall):  # type: ignore[type-arg]
    _once = True

    def __await__(self) -> Any:
        yield from self._settled().__await__()
        if self._error is not None:
            raise self._error
        return (yield from self._attempt.__await__())


# -- server side ---------------------------------------------------------------------------------

# No limit of the server's own and no deadline from the client: timeout_from_headers needs a cap.
_NO_LIMIT: Final = 1e9


def _metadata_pairs(metadata: object) -> list[tuple[Any, Any]]:
    pairs: list[tuple[Any, Any]] = []
    for item in metadata or ():  # type: ignore[attr-defined]
        key = getattr(item, "key", None)
        if key is not None:
            pairs.append((key, item.value))
        else:
            pairs.append(tuple(item))
    return pairs


class _Intake:
    """How long a server lets one RPC run: the client's deadline (``grpc-timeout``, read by
    grpcio into ``context.time_remaining()``, and ``x-request-deadline`` metadata), clamped to
    the server's own limit, less a margin."""

    __slots__ = ("cap", "clock", "margin")

    def __init__(self, max_request_time: float | None, margin: float, clock: Clock | None) -> None:
        _validate.optional_seconds("max_request_time", max_request_time)
        self.cap = float(max_request_time) if max_request_time is not None else _NO_LIMIT
        self.margin = _validate.seconds("deadline_margin", margin)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.clock = clock if clock is not None else SYSTEM_CLOCK

    def allowed(self, context: Any, metadata: object) -> float:
        allowed = timeout_from_headers(
            _metadata_pairs(metadata), max_seconds=self.cap, margin=self.margin
        )
        left = context.time_remaining()
        if left is not None and math.isfinite(left):
            allowed = min(allowed, left - self.margin)
        return allowed


def _wrap_handler(handler: Any, wrap: Callable[[Callable[..., Any], bool], Any]) -> Any:
    """*handler* with each of its behaviours passed through ``wrap(behaviour, streaming)``."""
    if handler is None:
        return None
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrap(handler.unary_unary, False),
            handler.request_deserializer,
            handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap(handler.unary_stream, True),
            handler.request_deserializer,
            handler.response_serializer,
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            wrap(handler.stream_unary, False),
            handler.request_deserializer,
            handler.response_serializer,
        )
    return grpc.stream_stream_rpc_method_handler(
        wrap(handler.stream_stream, True),
        handler.request_deserializer,
        handler.response_serializer,
    )


class DeadlineInterceptor(grpc.ServerInterceptor):
    """A server interceptor that runs each RPC inside the client's deadline.

    The time left (``grpc-timeout``, and ``x-request-deadline`` metadata from plain HTTP hops),
    clamped to *max_request_time* and less *deadline_margin*, becomes the ambient
    :func:`seawall.deadline` of the handler: every policy and every seawall client inside sees
    it. An RPC whose deadline has already passed is answered DEADLINE_EXCEEDED before any work.
    A synchronous handler cannot be interrupted; it sees the deadline through
    :func:`seawall.remaining`.

    Args:
        max_request_time: the server's own limit for one RPC in seconds (also the cap on the
            client's deadline); ``None`` for none.
        deadline_margin: seconds kept back for sending the answer.
        clock: the clock the deadline is measured on.
    """

    def __init__(
        self,
        *,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self._intake = _Intake(max_request_time, deadline_margin, clock)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        intake = self._intake
        metadata = details.invocation_metadata

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            if streaming:

                def stream(request: Any, context: Any) -> Iterator[Any]:
                    allowed = intake.allowed(context, metadata)
                    if allowed <= 0.0:
                        context.abort(_DEADLINE_CODE, "deadline exceeded before the work began")
                    with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                        yield from behaviour(request, context)

                return stream

            def unary(request: Any, context: Any) -> Any:
                allowed = intake.allowed(context, metadata)
                if allowed <= 0.0:
                    context.abort(_DEADLINE_CODE, "deadline exceeded before the work began")
                with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                    return behaviour(request, context)

            return unary

        return _wrap_handler(continuation(details), wrap)


class AsyncDeadlineInterceptor(grpc.aio.ServerInterceptor):
    """The ``grpc.aio`` twin of :class:`DeadlineInterceptor`; the handler is also cancelled at
    the deadline (answered DEADLINE_EXCEEDED). Arguments are those of
    :class:`DeadlineInterceptor`."""

    def __init__(
        self,
        *,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self._intake = _Intake(max_request_time, deadline_margin, clock)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        intake = self._intake
        metadata = details.invocation_metadata

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            if streaming:

                async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                    allowed = intake.allowed(context, metadata)
                    if allowed <= 0.0:
                        await context.abort(_DEADLINE_CODE, "deadline exceeded")
                    # Not cancelled at the deadline: a scope must not span a generator's yields.
                    with deadline(allowed if allowed < _NO_LIMIT else math.inf, clock=intake.clock):
                        async for item in behaviour(request, context):
                            yield item

                return stream

            async def unary(request: Any, context: Any) -> Any:
                allowed = intake.allowed(context, metadata)
                if allowed <= 0.0:
                    await context.abort(_DEADLINE_CODE, "deadline exceeded before the work began")
                if allowed >= _NO_LIMIT:
                    return await behaviour(request, context)
                try:
                    async with deadline(allowed, clock=intake.clock):
                        return await behaviour(request, context)
                except DeadlineExceeded:
                    await context.abort(_DEADLINE_CODE, "deadline exceeded")

            return unary

        return _wrap_handler(await continuation(details), wrap)


def _pushback_value(retry_after: float | None) -> str:
    if retry_after is None:
        return "-1"  # "overloaded; don't retry" (gRPC proposal A6)
    return str(math.ceil(retry_after * 1000))


class _Slots:
    """A concurrency limit without a queue: take a slot now, or be shed."""

    __slots__ = ("in_flight", "limit", "lock", "shed")

    def __init__(self, limit: int) -> None:
        self.limit = _validate.count("max_concurrency", limit, minimum=1)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.shed = 0

    def take(self) -> bool:
        with self.lock:
            if self.in_flight >= self.limit:
                self.shed += 1
                return False
            self.in_flight += 1
            return True

    def give(self) -> None:
        with self.lock:
            self.in_flight -= 1


class _ShedBase:
    def __init__(self, max_concurrency: int, retry_after: float | None) -> None:
        self._slots = _Slots(max_concurrency)
        _validate.optional_seconds("retry_after", retry_after, zero=True, finite=True)
        self._trailing = ((PUSHBACK_HEADER, _pushback_value(retry_after)),)
        self._details = "overloaded; the request was shed"

    @property
    def in_flight(self) -> int:
        """RPCs being handled now."""
        return self._slots.in_flight

    @property
    def shed(self) -> int:
        """RPCs rejected so far."""
        return self._slots.shed


class LoadShedder(_ShedBase, grpc.ServerInterceptor):
    """A server interceptor that handles at most *max_concurrency* RPCs at once and answers the
    rest at once RESOURCE_EXHAUSTED with a ``grpc-retry-pushback-ms`` trailer.

    Without a queue of its own: grpcio's thread pool already queues what its workers cannot
    take. Put it first in the server's interceptors, so a shed RPC costs no other work.

    Args:
        max_concurrency: RPCs handled at once (near the throughput-optimal concurrency).
        retry_after: the pushback sent, in seconds: seawall and grpcio clients wait that long
            before retrying. ``None`` (default) sends a negative pushback: "overloaded; don't
            retry", so the callers' retries do not add to the overload.

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(self, *, max_concurrency: int, retry_after: float | None = None) -> None:
        super().__init__(max_concurrency, retry_after)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        slots, trailing, why = self._slots, self._trailing, self._details

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            def shed(context: Any) -> None:
                context.set_trailing_metadata(trailing)
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

            if streaming:

                def stream(request: Any, context: Any) -> Iterator[Any]:
                    if not slots.take():
                        shed(context)
                    try:
                        yield from behaviour(request, context)
                    finally:
                        slots.give()

                return stream

            def unary(request: Any, context: Any) -> Any:
                if not slots.take():
                    shed(context)
                try:
                    return behaviour(request, context)
                finally:
                    slots.give()

            return unary

        return _wrap_handler(continuation(details), wrap)


class AsyncLoadShedder(_ShedBase, grpc.aio.ServerInterceptor):
    """The ``grpc.aio`` twin of :class:`LoadShedder` (same arguments)."""

    def __init__(self, *, max_concurrency: int, retry_after: float | None = None) -> None:
        super().__init__(max_concurrency, retry_after)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        slots, trailing, why = self._slots, self._trailing, self._details

        def wrap(behaviour: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
            async def shed(context: Any) -> None:
                context.set_trailing_metadata(trailing)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, why)

            if streaming:

                async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
                    if not slots.take():
                        await shed(context)
                    try:
                        async for item in behaviour(request, context):
                            yield item
                    finally:
                        slots.give()

                return stream

            async def unary(request: Any, context: Any) -> Any:
                if not slots.take():
                    await shed(context)
                try:
                    return await behaviour(request, context)
                finally:
                    slots.give()

            return unary

        return _wrap_handler(await continuation(details), wrap)
