"""aiohttp integration: a client middleware that retries requests per a
:class:`~seawall.RetryPolicy`, with the same HTTP rules as the httpx transports.

Example:
    ``aiohttp.ClientSession(middlewares=[seawall.aiohttp.RetryMiddleware(policy)])``

Install the ``aiohttp`` extra (``pip install -e '.[aiohttp]'`` in a checkout; aiohttp 3.12 or
later: client middlewares). See
``docs/aiohttp.md``. The server side (deadline intake, load shedding) is
:mod:`seawall.server.aiohttp`.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types
from collections.abc import Coroutine, MutableMapping
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp
import aiohttp.payload
import yarl

from seawall._core.clock import TESTING
from seawall._policy.config import PolicyHandle, PolicyRegistry
from seawall._policy.http import (
    HOST_KEY_SAMPLES,
    PER_HOST,
    FirstAttemptPath,
    HttpCall,
    HttpOptions,
    Policies,
    Wire,
    adrive,
    afirst_attempt,
    read_within_attempt,
    within,
)
from seawall._strategies.retry import RetryPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import Unpack

__all__ = ["DEFAULT_RETRY_EXCEPTIONS", "PER_HOST", "RetryMiddleware"]

#: Client errors worth retrying: connection failures and resets, timeouts, and a body cut short.
#: TLS and proxy errors are configuration, not transient states, and are never retried.
DEFAULT_RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
)
# The request never left this process: retrying cannot duplicate it, whatever the method.
_NEVER_SENT: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
_NEVER_RETRIED: tuple[type[Exception], ...] = (
    aiohttp.ClientSSLError,
    aiohttp.ClientProxyConnectionError,
)

Handler = Any  # aiohttp.ClientHandlerType: ClientRequest -> Awaitable[ClientResponse]


def _url_slots_work() -> bool:
    """Whether the per-host key can be read off yarl's URL fields ``_scheme`` and ``_netloc``,
    which hold what the properties ``URL.scheme`` and ``URL.raw_authority`` give, without
    their two calls (each fills the URL's cache on the first read: a new URL every request).
    Checked once, on URLs of every shape; when yarl changes those fields, the properties are
    read instead."""
    try:
        for text in HOST_KEY_SAMPLES:
            url = yarl.URL(text)
            if (url._scheme, url._netloc) != (url.scheme, url.raw_authority):
                return False
    except Exception:  # any change of yarl's internals: the public way
        return False
    return True


#: Whether the per-host key is read off ``URL._scheme`` and ``URL._netloc`` (see
#: _url_slots_work).
_URL_SLOTS = _url_slots_work()


def _task_getter() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]:
    """``asyncio.current_task``, or, where it is written in Python (up to 3.11), what it reads
    when given the loop: the loop's entry in ``asyncio.tasks._current_tasks`` (one frame less
    on every request). From 3.12 ``current_task`` is C, and called as it is."""
    current = asyncio.current_task
    tasks = getattr(asyncio.tasks, "_current_tasks", None)
    code = getattr(current, "__code__", None)
    reads_tasks = isinstance(code, types.CodeType) and "_current_tasks" in code.co_names
    if reads_tasks and isinstance(tasks, dict):
        return tasks.get
    return current


_current_task = _task_getter()


# aiohttp names the status ``status``.
_WIRE: Wire[aiohttp.ClientResponse] = Wire(
    never_sent=_NEVER_SENT, never_retried=_NEVER_RETRIED, status_attribute="status"
)


class _Sending(NamedTuple):
    """A request and the handler that sends it (the next middleware, or aiohttp itself), and
    the request's method and headers (a CIMultiDict: an Idempotency-Key goes in), which the
    first-attempt path reads. Built with ``_make``: a tuple's constructor, in C."""

    request: aiohttp.ClientRequest
    handler: Handler
    method: str
    headers: MutableMapping[str, str]


def _timed_out(message: str) -> Exception:
    return aiohttp.ServerTimeoutError(message)


class RetryMiddleware:
    """An aiohttp client middleware that retries the requests it sees, per a policy.

    ``aiohttp.ClientSession(middlewares=[RetryMiddleware(policy)])``, or per request with
    ``session.get(url, middlewares=[...])``. The rules are those of
    :class:`seawall.httpx.RetryTransport` (the same :class:`~seawall.http.HttpRules`, decided by
    the same :class:`~seawall.lowlevel.RetryState`):

    - retried: connection errors, timeouts, a body cut short, and the statuses in
      *retry_statuses*; the wait is the larger of ``Retry-After`` and the backoff, clamped to
      the policy's ``max_retry_after`` (or the call ends, with
      ``retry_after_beyond_max="give_up"``);
    - never retried: other statuses (the response is returned), responses marked
      ``x-seawall-overloaded`` or ``x-envoy-overloaded``, non-idempotent methods without an
      ``Idempotency-Key`` (unless the request never left), bodies that cannot be replayed
      (streams and file objects: only in-memory bodies are sent again);
    - each attempt is bounded by cancellation at the attempt's deadline (``attempt_timeout``, the
      policy's ``timeout``, the ambient :func:`seawall.deadline`), and the time left is sent in
      ``grpc-timeout`` and ``x-request-deadline``; the session's own ``ClientTimeout`` still
      bounds the whole call;
    - a body declared (``Content-Length``) up to *buffer_limit* bytes is read within the attempt,
      so a reset mid-body is retried (unless it came in full with the head: nothing is left to
      cut short); responses of discarded attempts are released.

    The policy's ``retry_on`` is replaced by the HTTP classification; its ``retry_if_result``
    sees each response the status rules would return (its status and headers) and retries it
    when it returns ``True``. Inside a
    :func:`seawall.http.override` block, requests use the policy it gives; each response
    carries its attempts in ``response.seawall_history`` (:class:`seawall.http.HttpAttempt`).
    Redirects are followed by aiohttp after the middleware, so each hop is retried on its own.

    Args:
        policy: the retry policy (``RetryPolicy()`` by default), or a
            :class:`~seawall.config.PolicyHandle`: each request then uses its current policy.
        **options: the :class:`seawall.http.HttpOptions` every HTTP integration takes
            (``budget``, ``retry_statuses``, ``retry_on``, ``idempotent_methods``,
            ``idempotency_key``, ``deadline_headers``, ``buffer_limit``, ``total_timeout``).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self, policy: RetryPolicy | PolicyHandle | None = None, **options: Unpack[HttpOptions]
    ) -> None:
        self._policies = Policies(policy, options, _WIRE, DEFAULT_RETRY_EXCEPTIONS)
        self._watchdog: _Watchdog | None = None  # the last loop's (see _Watchdog)

    @classmethod
    def from_route(cls, registry: PolicyRegistry, name: str, **kwargs: Any) -> RetryMiddleware:
        """A middleware that follows the route *name* of *registry*, reloads included.

        Each request uses the route's current policy and, unless ``retry_statuses`` is given,
        the statuses its ``retry_on`` names, as :meth:`seawall.httpx.RetryTransport.from_route`
        does. Unless ``retry_on`` is given, the error conditions it names
        (``connect-failure``, ``reset``, ``timeout``, ...) alone decide which transport errors are
        retried (a route naming none retries none). Other keyword arguments are the constructor's.

        Raises:
            KeyError: the registry has no policy named *name*.
        """
        if not isinstance(registry, PolicyRegistry):
            raise TypeError(f"registry must be a seawall.config.PolicyRegistry, got {registry!r}")
        return cls(registry.policy(name), **kwargs)

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now (with a :class:`~seawall.config.PolicyHandle`: its current one)."""
        return self._policies.policy

    def __call__(
        self, request: aiohttp.ClientRequest, handler: Handler
    ) -> Coroutine[Any, Any, aiohttp.ClientResponse]:
        # The coroutine that sends the request, returned for aiohttp to await (a middleware
        # returns an awaitable): not awaited in a coroutine of this method's own, one less on
        # every request.
        url = request.url
        # The budget's key (see origin()): the scheme and the encoded authority.
        host = (url._scheme, url._netloc) if _URL_SLOTS else (url.scheme, url.raw_authority)
        sending = _Sending._make((request, handler, request.method, request.headers))
        return afirst_attempt(self, sending, host)

    async def _send_first(
        self, sending: _Sending, path: FirstAttemptPath, started: float
    ) -> aiohttp.ClientResponse:
        """The first attempt (see afirst_attempt), bounded by the total time: by the loop's
        watchdog, or a timer of its own."""
        request, handler = sending.request, sending.handler
        total, limit = path.total, path.limit
        if total is None:
            return await _receive(request, handler, limit)
        if not _WATCHED or TESTING.instant:
            # (the time left as HttpCall.next_attempt() gives it)
            left = (started + total) - started
            return await within(_receive(request, handler, limit), left, _timed_out)
        # Bounded as within() would bound it, by the loop's watchdog: the attempt joins it
        # here, and a successful one leaves it here too (what end() does for the others), a
        # call each less on every request.
        loop = request.loop
        now = path.now
        watchdog = self._watchdog
        if (
            watchdog is None
            or watchdog.loop is not loop
            or watchdog.total != total
            or watchdog.now is not now
        ):
            watchdog = self._watchdog = _Watchdog(loop, total, now)
        task = _current_task(loop)
        if task is None:
            raise RuntimeError("seawall: an aiohttp request outside a task")
        inflight = watchdog.inflight
        if task in inflight or task.cancelling():  # type: ignore[attr-defined]
            # Within another attempt of the same task (a request made by a later middleware),
            # or in a task with a cancellation pending: its own timer.
            left = (started + total) - started
            return await within(_receive(request, handler, limit), left, _timed_out)
        # (the watchdog's clock is the policy's, read at the start, or its own)
        at = (started if watchdog.same_clock else watchdog.time()) + total
        inflight[task] = at
        if watchdog.armed is None:
            watchdog.armed = loop.call_at(at, watchdog.fire)
        try:
            response: aiohttp.ClientResponse = await handler(request)  # then as _receive()
            if (
                limit
                and not response.content.is_eof()
                and read_within_attempt(response.headers.get("content-length"), limit)
            ):
                try:
                    await response.read()
                except BaseException:
                    response.release()
                    raise
        except BaseException as exc:
            if watchdog.end(task) and isinstance(exc, asyncio.CancelledError):
                raise _timed_out(
                    f"seawall: the attempt ran out of time after {total:.3f} s"
                ) from exc
            raise
        # watchdog.end(task), its outcome not needed: the attempt ended in time.
        try:
            del inflight[task]
        except KeyError:  # cancelled by the watchdog, yet it ended in time
            task.uncancel()  # type: ignore[attr-defined]
        return response

    @staticmethod
    def _replayable(sending: _Sending) -> bool:
        # In-memory bodies (bytes, str, JSON, url-encoded forms) are sent again as they are;
        # streams and file objects are consumed by the first attempt.
        body = sending.request.body
        return body == b"" or isinstance(body, aiohttp.payload.BytesPayload)

    @staticmethod
    async def _close(response: aiohttp.ClientResponse) -> None:
        response.release()

    async def _retrying(
        self,
        sending: _Sending,
        call: HttpCall[aiohttp.ClientResponse],
        outcome: aiohttp.ClientResponse | Exception | None,
    ) -> aiohttp.ClientResponse:
        """Drive *call*: from its first attempt, or with that attempt's *outcome* in hand."""
        request, handler = sending.request, sending.handler

        async def attempt(left: float) -> aiohttp.ClientResponse:
            # aiohttp's timeouts bound the whole call or each read, not the attempt:
            # cancellation bounds it, at the attempt's deadline.
            return await within(_send(request, handler, call), left, _timed_out)

        return await adrive(call, attempt, self._close, outcome)


# asyncio's Task.cancelling() and uncancel(), which the watchdog needs, came with Python 3.11;
# on 3.10 every attempt has its own timer (within()).
_WATCHED = sys.version_info >= (3, 11)


class _Watchdog:
    """One timer for the first attempts in flight on one event loop, each allowed *total*.

    asyncio.timeout() arms a loop timer per request and cancels it when the request ends. Here
    each request's task is entered, with its deadline, as the request starts, and removed as it
    ends; all being allowed the same time, the deadlines are in the order of entry (a dict
    keeps it), and one timer, armed at the earliest, serves them all: when it fires, each
    request still running at its deadline is removed and its task cancelled, as
    asyncio.timeout() does (the request turns the cancellation into a timeout, see ``end``),
    and the timer is armed again at the next deadline. A task is entered once at a time, and
    only with no cancellation pending (the middleware gives the others a timer of their own),
    so that a task missing at the end is one the watchdog cancelled.
    """

    __slots__ = ("armed", "inflight", "loop", "now", "same_clock", "time", "total")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, total: float, now: Callable[[], float]
    ) -> None:
        # What the watchdog serves: the attempts on *loop*, each allowed *total* from its
        # start by the policy's clock *now* (another total or clock: another watchdog).
        self.loop = loop
        self.total = total
        self.now = now
        # asyncio's own loops read time.monotonic(): called directly, one frame less; and when
        # the policy reads it too (*now*), its reading at the start of an attempt is used.
        self.time = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        self.same_clock = self.time is now
        # The task of each attempt in flight, and its deadline, in the order they started.
        self.inflight: dict[asyncio.Task[Any], float] = {}
        # The timer, armed at the earliest deadline (by the middleware, which enters each
        # attempt as it starts), or None.
        self.armed: asyncio.TimerHandle | None = None

    def end(self, task: asyncio.Task[Any]) -> bool:
        """The attempt of *task* ended (call once): whether the watchdog cancelled it and
        nobody else did, as asyncio.timeout() tells (the attempt then timed out)."""
        try:
            del self.inflight[task]
        except KeyError:  # cancelled by the watchdog, which removed it
            return task.uncancel() <= 0  # type: ignore[attr-defined,no-any-return]
        return False

    def fire(self) -> None:
        """The timer went off: cancel each attempt past its deadline; arm it for the next."""
        armed = self.armed
        self.armed = None
        when = armed.when() if armed is not None else self.loop.time()
        inflight = self.inflight
        expired = []
        for task, at in inflight.items():
            if at > when:
                self.armed = self.loop.call_at(at, self.fire)
                break
            expired.append(task)
        for task in expired:
            del inflight[task]
            task.cancel()


async def _receive(
    request: aiohttp.ClientRequest, handler: Handler, limit: int
) -> aiohttp.ClientResponse:
    """Send *request*; read a body declared up to *limit* bytes within the attempt, unless it
    was received in full with the head (a reset can no longer cut it short)."""
    response: aiohttp.ClientResponse = await handler(request)
    if (
        limit
        and not response.content.is_eof()
        and read_within_attempt(response.headers.get("content-length"), limit)
    ):
        try:
            await response.read()  # kept by the response; the connection is released
        except BaseException:
            response.release()
            raise
    return response


async def _send(
    request: aiohttp.ClientRequest, handler: Handler, call: HttpCall[aiohttp.ClientResponse]
) -> aiohttp.ClientResponse:
    for name, value in (call.deadline_headers() or {}).items():
        request.headers[name] = value
    return await _receive(request, handler, call.rules.buffer_limit)
