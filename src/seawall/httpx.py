"""httpx integration: transports that retry per a :class:`~seawall.RetryPolicy`.

Example:
    ``httpx.Client(transport=seawall.httpx.RetryTransport(policy=seawall.RetryPolicy()))``

Install the ``httpx`` extra (``pip install -e '.[httpx]'`` in a checkout). See ``docs/http.md``
for what is retried and why.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import AsyncIterator, Callable, Collection, Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar

import httpx

from seawall._core.compat import current_time
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    EXTENSION_KEY,
    HISTORY_KEY,
    PER_HOST,
    FirstAttemptPath,
    HostKey,
    HttpCall,
    HttpOptions,
    Policies,
    Wire,
    adrive,
    afirst_attempt,
    drive,
    first_attempt,
    fits,
    read_within_attempt,
    within,
)
from seawall._strategies.budget import RetryBudget
from seawall._strategies.hedge import Hedge
from seawall._strategies.retry import RetryPolicy

if TYPE_CHECKING:
    from typing_extensions import Unpack

T = TypeVar("T")

__all__ = [
    "DEFAULT_RETRY_EXCEPTIONS",
    "PER_HOST",
    "AsyncRetryTransport",
    "RetryTransport",
]

#: Transport errors worth retrying: timeouts, network errors (refused, reset, DNS) and a server
#: that closed the connection mid-message. Not retried: local protocol errors, unsupported
#: protocols, proxy errors (configuration, not transient states).
DEFAULT_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)
# The request never left this process: retrying cannot duplicate it, whatever the method.
_NEVER_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
_TIMEOUT_KEYS = ("connect", "read", "write", "pool")
#: A request's host, as the per-host budgets key it: ``(scheme, host, port)``, ``host`` in lower
#: case and IDNA-encoded (bytes), ``port`` ``None`` for the scheme's default (see ``origin()``).
_host: Callable[[httpx.Request], HostKey] = operator.attrgetter(
    "url.scheme", "url.raw_host", "url.port"
)
_N_TIMEOUTS = len(_TIMEOUT_KEYS)
_FIT_ROOM = 0.001  # seconds: timeouts this far within the total time are remembered as fitting
_UNFIT: Final = object()  # no timeouts remembered for a total time (unequal to any request's)


class _Wire(Wire[httpx.Response]):
    """httpx's responses carry their history in ``extensions``."""

    __slots__ = ()

    def view(self, response: httpx.Response) -> httpx.Response:
        """A copy whose body is read when it is in memory (``.text``, ``.json()`` work), so that
        the predicate does not consume the stream the caller reads."""
        stream = response.stream
        if not isinstance(stream, httpx.ByteStream):
            return response  # streamed: status and headers only
        view = httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(stream),
            extensions=response.extensions,
        )
        view.read()
        return view


_WIRE = _Wire(never_sent=_NEVER_SENT, history_in="extensions", history_key=HISTORY_KEY)


class _Base:
    """What the sync and async transports share: configuration and per-attempt requests."""

    def __init__(self, policy: RetryPolicy | PolicyHandle | None, options: HttpOptions) -> None:
        self._policies = Policies(policy, options, _WIRE, DEFAULT_RETRY_EXCEPTIONS)
        # The last httpx timeouts found within a total time with room to spare, by that total:
        # a request with the same four timeouts (httpx builds them anew for each request, from
        # the client's Timeout) needs no check. One entry; replaced whole, never mutated.
        self._fit: dict[float, dict[str, float | None]] = {}

    def _as_built(self, request: httpx.Request, total: float, started: float) -> bool:
        """Whether a first attempt can go as the caller built it, within the total time
        *total* (its time left, as HttpCall gives it): its httpx timeouts are all set and within
        that time. Those that fit *total* by a millisecond or more are remembered (see
        ``_fit``, which the caller looks up first), since the time left of another first
        attempt differs from *total* by a rounding error at most."""
        configured = request.extensions.get("timeout")
        if configured is None or len(configured) != _N_TIMEOUTS:
            return False
        values = configured.values()
        if not fits(values, (started + total) - started):
            return False
        if fits(values, total - _FIT_ROOM):
            self._fit = {total: dict(configured)}
        return True

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    @staticmethod
    def _replayable(request: httpx.Request) -> bool:
        # ByteStream holds bytes (content=, data=, json=, or a body already read): it can be
        # sent again. Generators and other streams are consumed by the first attempt.
        return isinstance(request.stream, httpx.ByteStream)

    @staticmethod
    def _prepare(
        request: httpx.Request, call: HttpCall[httpx.Response], left: float
    ) -> httpx.Request:
        """The request to send now: timeouts capped by the attempt's time left, deadline headers.

        Built when it is sent, so that a hedged copy started later tells the next hop the time
        actually left. The caller's request itself when nothing changes (the common case: no
        deadline of the caller's, and httpx's timeouts within the transport's total time).
        """
        extensions = request.extensions
        configured = extensions.get("timeout") or {}
        complete = len(configured) == len(_TIMEOUT_KEYS)
        if call.sends_as_is(configured.values() if complete else (), left):
            return request
        extra = call.deadline_headers()
        # A shallow copy of the caller's request (its URL, stream and read body are shared, as
        # httpx's own redirects share them) with its own headers and extensions: building a
        # new httpx.Request would parse the URL and normalise every header again.
        prepared = _new_request(httpx.Request)
        prepared.__dict__.update(request.__dict__)
        extensions = prepared.extensions = dict(extensions)
        extensions["timeout"] = call.timeouts(configured, _TIMEOUT_KEYS)
        if extra:
            headers = prepared.headers = request.headers.copy()
            for name, value in extra.items():
                headers[name] = value
        return prepared


_new_request = object.__new__


def _timeouts(request: httpx.Request) -> Collection[float | None] | None:
    """The request's httpx timeouts when all four are set (else ``None``: see _prepare)."""
    configured = request.extensions.get("timeout")
    if configured is None or len(configured) != _N_TIMEOUTS:
        return None
    values: Collection[float | None] = configured.values()
    return values


def _small(response: httpx.Response, limit: int) -> bool:
    """Whether to read the body within the attempt: declared within *limit*, and not in memory
    already (a body in memory cannot be cut short by a reset)."""
    return not isinstance(response.stream, httpx.ByteStream) and read_within_attempt(
        response.headers.get("content-length"), limit
    )


class RetryTransport(_Base, httpx.BaseTransport):
    """An httpx transport that retries the requests it sends, per a :class:`~seawall.RetryPolicy`.

    Usable as ``httpx.Client(transport=RetryTransport(...))``. The policy decides every retry
    (attempts, backoff, deadline, budget, hooks, kill switch) and waits on its clock; this
    transport classifies outcomes the HTTP way:

    - retried: connection errors, timeouts, and the statuses in *retry_statuses*; the
      wait is the larger of ``Retry-After`` and the backoff, clamped to the policy's
      ``max_retry_after`` (or the call ends, with ``retry_after_beyond_max="give_up"``), and a
      wait that would cross the deadline gives up at once, returning the response;
    - never retried: other statuses (the response is returned as is), responses marked
      ``x-seawall-overloaded`` or ``x-envoy-overloaded``, non-idempotent methods without an
      ``Idempotency-Key`` (unless the request never left), bodies that cannot be replayed;
    - each attempt's timeouts are min(configured, time left), and the time left is sent
      downstream in ``grpc-timeout`` and ``x-request-deadline``;
    - responses of discarded attempts are closed.

    The policy's ``retry_on`` is replaced by the HTTP classification; its ``retry_if_result``
    sees each response that the status rules would return, and retries it when it returns
    ``True`` (as httpx-retries' ``validate_response``).

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle` from a :class:`~seawall.config.PolicyRegistry`:
            each request then uses the handle's current policy, so a reload changes the live
            transport (see :meth:`from_route`).
        transport: the transport that sends each attempt (``httpx.HTTPTransport()`` by default).
        **options: the :class:`seawall.http.HttpOptions` every HTTP integration takes
            (``budget``, ``retry_statuses``, ``retry_on``, ``idempotent_methods``,
            ``idempotency_key``, ``deadline_headers``, ``buffer_limit``, ``total_timeout``).

    A request's extension ``"seawall"`` overrides the policy for that request: a
    :class:`~seawall.RetryPolicy`, or a dict of its fields (``{"retries": 0}``, see
    :func:`seawall.http.override`). Each response carries its attempts in
    ``response.extensions["seawall.history"]`` (:class:`seawall.http.HttpAttempt`).
    """

    def __init__(
        self,
        policy: RetryPolicy | PolicyHandle | None = None,
        transport: httpx.BaseTransport | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(f"transport must be an httpx.BaseTransport, got {transport!r}")
        super().__init__(policy, options)
        self._transport = transport if transport is not None else httpx.HTTPTransport()

    @classmethod
    def from_route(
        cls,
        registry: PolicyRegistry,
        name: str,
        transport: httpx.BaseTransport | None = None,
        **kwargs: Any,
    ) -> RetryTransport:
        """A transport that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy (attempts, backoff, timeouts, budget, kill
        switch) and, unless ``retry_statuses`` is given, the statuses its ``retry_on`` names
        (``5xx``, ``gateway-error``, ...). Unless ``retry_on`` is
        given, the error conditions it names (``connect-failure``, ``reset``, ``timeout``, ...)
        alone decide which transport errors are retried (a route naming none retries none).
        Other keyword arguments are the constructor's.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        return cls(_handle(registry, name), transport, **kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return first_attempt(self, request, _host(request), request.extensions.get(EXTENSION_KEY))

    def _send_first(
        self, request: httpx.Request, path: FirstAttemptPath, started: float
    ) -> httpx.Response | None:
        """The first attempt, as the caller built it (see first_attempt), or ``None``: its
        timeouts are not all within the total time, and are capped per attempt."""
        if (
            (total := path.total) is not None
            and request.extensions.get("timeout") != self._fit.get(total, _UNFIT)
            and not self._as_built(request, total, started)
        ):
            return None  # (the timeouts last found to fit are looked up here: a call less)
        response = self._transport.handle_request(request)
        limit = path.limit
        if limit and not isinstance(response.stream, httpx.ByteStream) and _small(response, limit):
            _buffer(response)
        return response

    @staticmethod
    def _close(response: httpx.Response) -> None:
        response.close()

    def _retrying(
        self,
        request: httpx.Request,
        call: HttpCall[httpx.Response],
        outcome: httpx.Response | Exception | None,
    ) -> httpx.Response:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        send = self._transport.handle_request
        limit = call.rules.buffer_limit
        configured = request.extensions.get("timeout")  # _timeouts(request), one call less
        timeouts = (
            configured.values()
            if configured is not None and len(configured) == len(_TIMEOUT_KEYS)
            else None
        )
        prepare = self._prepare

        def attempt(left: float) -> httpx.Response:
            # The common case decided here, without a call to _prepare (which decides the rest).
            if timeouts is not None and call.sends_as_is(timeouts, left):
                response = send(request)
            else:
                response = send(prepare(request, call, left))
            if (
                limit
                and not isinstance(response.stream, httpx.ByteStream)
                and _small(response, limit)
            ):
                _buffer(response)
            return response

        return drive(call, attempt, self._close, outcome)

    def close(self) -> None:
        self._transport.close()


class AsyncRetryTransport(_Base, httpx.AsyncBaseTransport):
    """The async twin of :class:`RetryTransport`, for ``httpx.AsyncClient(transport=...)``, on
    asyncio, trio and anyio (the running library is detected).

    Waits use the policy clock's ``asleep``; cancellation of the caller is never retried. Each
    attempt is also bounded by cancellation: it may last the policy's ``attempt_timeout`` and
    never outlives the deadline, even when the server drips bytes slowly enough to defeat
    httpx's per-operation timeouts; a body streamed to the caller is bounded the same way.

    Arguments are those of :class:`RetryTransport`, with an ``httpx.AsyncBaseTransport``
    (``httpx.AsyncHTTPTransport()`` by default), and:

    Args:
        hedge: a :class:`~seawall.Hedge`: requests whose method is in *hedge_methods* are
            hedged within each attempt. When one has not answered after the hedge's delay, a
            copy is sent; the first response wins, the others are cancelled and their
            connections closed. The hedge's ``max_attempts``, ``max_extra_load``, budget and
            kill switch apply; its ``replicas`` are not supported (the URL names the host).
        hedge_methods: the methods to hedge (``GET`` and ``HEAD`` by default). Only idempotent
            methods are accepted: a hedged request runs twice on the server by design, and an
            ``Idempotency-Key`` does not make that safe (a server deduplicating by key answers
            a concurrent duplicate with 409 Conflict).

    Raises:
        ValueError: *hedge_methods* names a method that is not idempotent, or is given without
            a *hedge*; the hedge has ``replicas``.
    """

    def __init__(
        self,
        policy: RetryPolicy | PolicyHandle | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        hedge: Hedge | None = None,
        hedge_methods: Collection[str] | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport must be an httpx.AsyncBaseTransport, got {transport!r}")
        super().__init__(policy, options)
        self._transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        rules = self._policies.rules
        self._hedge_methods = _hedge_methods(hedge, hedge_methods, rules.idempotent_methods)
        if hedge is not None:
            budget = self._policies.budget
            shared = budget if budget is not PER_HOST else self.policy.budget
            if hedge.budget is not None and hedge.budget is shared:
                # As in a Pipeline: the retry loop reports requests and outcomes to the shared
                # budget; hedges only withdraw from it, so nothing is counted twice. A view:
                # the caller's Hedge still reports wherever else it is used.
                hedge = hedge.withdrawing_only()
        self._hedge = hedge

    @property
    def hedge(self) -> Hedge | None:
        """The hedging policy, if any (a ``withdrawing_only()`` view when it shares the budget)."""
        return self._hedge

    @classmethod
    def from_route(
        cls,
        registry: PolicyRegistry,
        name: str,
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> AsyncRetryTransport:
        """A transport that follows the route *name* of *registry*, reloads included.

        As :meth:`RetryTransport.from_route`; in addition, when the route configures ``hedge``
        (delay, max_attempts, percentile, max_extra_percent) and no ``hedge`` is given, ``GET``
        and ``HEAD`` requests are hedged with a :class:`~seawall.Hedge` of those settings (named
        after the route, drawing from the route's budget), built once, when the transport is.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        handle = _handle(registry, name)
        settings = handle.hedge_config
        if settings is not None and kwargs.get("hedge") is None:
            budget = handle.policy.budget
            kwargs["hedge"] = settings.build(
                name=handle.name, budget=budget if isinstance(budget, RetryBudget) else None
            )
        return cls(handle, transport, **kwargs)

    def handle_async_request(self, request: httpx.Request) -> Coroutine[Any, Any, httpx.Response]:
        # The coroutine that sends the request, returned for httpx to await: not awaited in a
        # coroutine of this method's own (one coroutine less on every request).
        host: HostKey = _host(request)
        override = request.extensions.get(EXTENSION_KEY)
        if self._hedge is not None and self._hedged(request):
            call = self._policies.start(
                request.method, request.headers, host, replayable=True, override=override
            )
            return self._retrying(request, call, None)
        return afirst_attempt(self, request, host, override)

    async def _send_first(
        self, request: httpx.Request, path: FirstAttemptPath, started: float
    ) -> httpx.Response | None:
        """As RetryTransport._send_first: without a deadline of the caller's, the attempt is
        bounded by httpx's timeouts (within the total time), without a timer, and its body is
        not bounded (see _bound_body)."""
        if (
            (total := path.total) is not None
            and request.extensions.get("timeout") != self._fit.get(total, _UNFIT)
            and not self._as_built(request, total, started)
        ):
            return None  # (the timeouts last found to fit are looked up here: a call less)
        response = await self._transport.handle_async_request(request)
        limit = path.limit
        if limit and not isinstance(response.stream, httpx.ByteStream) and _small(response, limit):
            await _abuffer(response)
        return response

    @staticmethod
    async def _close(response: httpx.Response) -> None:
        await response.aclose()

    def _hedged(self, request: httpx.Request) -> bool:
        """Whether the hedge applies to *request* (its method, in upper case as HttpCall has
        it, is hedged, and its body can be sent again)."""
        return request.method.upper() in self._hedge_methods and isinstance(
            request.stream, httpx.ByteStream
        )

    async def _retrying(
        self,
        request: httpx.Request,
        call: HttpCall[httpx.Response],
        outcome: httpx.Response | Exception | None,
    ) -> httpx.Response:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        hedge = self._hedge
        if hedge is not None and (call.method not in self._hedge_methods or not call.replayable):
            hedge = None

        async def attempt(left: float) -> httpx.Response:
            if hedge is None:
                sending = self._send_one(request, call, left)
            else:
                sending = self._send(request, call, hedge)
            if not call.bounded_by_caller:
                # Only the default total time: it caps httpx's timeouts (see _prepare), as in
                # the sync transport, without a timer per request.
                return await sending
            # httpx's timeouts bound each read, not the attempt: a server dripping a byte at a
            # time would outlive it. Cancellation bounds the whole attempt.
            timed_out = functools.partial(httpx.TimeoutException, request=request)
            return await within(sending, left, timed_out)

        response = await adrive(call, attempt, self._close, outcome)
        return _bound_body(response, call, request)

    async def _send_one(
        self, request: httpx.Request, call: HttpCall[httpx.Response], left: float | None = None
    ) -> httpx.Response:
        """One request: with *left*, the attempt's time left as it starts; without, a hedged
        copy's, read as it is sent."""
        if left is None:
            left = call.time_left()
        timeouts = _timeouts(request)
        if timeouts is None or not call.sends_as_is(timeouts, left):
            request = self._prepare(request, call, left)
        response = await self._transport.handle_async_request(request)
        limit = call.rules.buffer_limit
        if limit and _small(response, limit):
            await _abuffer(response)
        return response

    async def _send(
        self, request: httpx.Request, call: HttpCall[httpx.Response], hedge: Hedge | None
    ) -> httpx.Response:
        if hedge is None:
            return await self._send_one(request, call)
        answered: list[httpx.Response] = []

        async def copy() -> httpx.Response:
            try:
                response = await self._send_one(request, call)
            except Exception as exc:
                if _WIRE.classify(exc, call.retry_on)[0]:
                    # Let the hedge go on with the other copies (its retry_on sees a
                    # ConnectionError); the retry loop then sees the original error.
                    raise _CopyFailed(exc) from None
                raise
            answered.append(response)
            return response

        winner: httpx.Response | None = None
        failure: Exception | None = None
        try:
            winner = await hedge.acall(copy)
        except _CopyFailed as wrapped:
            failure = wrapped.error
        finally:
            # Copies that answered but lost (at the same instant as the winner, or before a
            # failure ended the call) must not hold their connections.
            for response in answered:
                if response is not winner:
                    await response.aclose()
        if failure is not None:
            raise failure
        assert winner is not None
        return winner

    async def aclose(self) -> None:
        await self._transport.aclose()


class _CopyFailed(ConnectionError):
    """A hedged copy failed with a retryable transport error (carried in ``error``)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _hedge_methods(
    hedge: Hedge | None, methods: Collection[str] | None, idempotent: Collection[str]
) -> frozenset[str]:
    if hedge is None:
        if methods is not None:
            raise ValueError("hedge_methods needs a hedge (seawall.Hedge(...))")
        return frozenset()
    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a seawall.Hedge, got {hedge!r}")
    if hedge.replicas is not None:
        raise ValueError("hedge must not have replicas: the request's URL names the host")
    safe = frozenset(m.upper() for m in idempotent if isinstance(m, str))
    if methods is None:
        return frozenset({"GET", "HEAD"}) & safe
    if isinstance(methods, (str, bytes)) or not isinstance(methods, Collection):
        raise TypeError(f"hedge_methods must be a collection of method names, got {methods!r}")
    chosen = set()
    for m in methods:
        if not isinstance(m, str) or not m:
            raise TypeError(f"hedge_methods must hold method names, got {m!r}")
        if m.upper() not in safe:
            raise ValueError(
                f"hedge_methods may only hold idempotent methods ({', '.join(sorted(safe))}): "
                f"a hedged request runs more than once, got {m!r}"
            )
        chosen.add(m.upper())
    return frozenset(chosen)


def _handle(registry: PolicyRegistry, name: str) -> PolicyHandle:
    if not isinstance(registry, PolicyRegistry):
        raise TypeError(f"registry must be a seawall.config.PolicyRegistry, got {registry!r}")
    return registry.policy(name)


class _BoundedStream(httpx.AsyncByteStream):
    """A response body whose reading ends at the attempt's deadline (on the running async
    library's clock: asyncio's loop or trio's)."""

    def __init__(self, stream: httpx.AsyncByteStream, at: float, request: httpx.Request) -> None:
        self._stream = stream
        self._at = at
        self._timed_out = functools.partial(httpx.ReadTimeout, request=request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            left = max(0.0, self._at - current_time())
            try:
                chunk = await within(chunks.__anext__(), left, self._timed_out)
            except StopAsyncIteration:
                return
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _bound_body(
    response: httpx.Response, call: HttpCall[httpx.Response], request: httpx.Request
) -> httpx.Response:
    """The response whose body, if still to be read, is bounded by the attempt's deadline."""
    stream = response.stream
    if not call.bounded_by_caller or isinstance(stream, httpx.ByteStream):
        return response  # no deadline of the caller's, or the body is in memory already
    left = call.time_left()
    if left <= 0.0:
        return response  # the call ended for want of time: the caller reads what is there
    assert isinstance(stream, httpx.AsyncByteStream)
    # The policy's clock may be virtual; the async library's is what cancels: convert once.
    response.stream = _BoundedStream(stream, current_time() + left, request)
    return response


def _buffer(response: httpx.Response) -> None:
    """Read the raw body into memory within the attempt (the connection is released)."""
    stream = response.stream
    assert isinstance(stream, httpx.SyncByteStream)
    try:
        body = b"".join(stream)
    finally:
        stream.close()
    response.stream = httpx.ByteStream(body)


async def _abuffer(response: httpx.Response) -> None:
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        body = b"".join([chunk async for chunk in stream])
    finally:
        await stream.aclose()
    response.stream = httpx.ByteStream(body)
