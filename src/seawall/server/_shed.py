"""LoadShedder: an ASGI middleware that keeps accepted requests fast by rejecting excess ones early.

A server past its capacity that queues without bound serves every request late: callers time out
and retry, and the server spends its capacity on answers nobody reads (goodput collapse). The
middleware admits at most ``max_concurrency`` requests at once, holds a few more in a short
queue, and answers the rest at once with a cheap 503 (or 429), ``Retry-After`` and the overload
signal header.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.errors import DeadlineExceeded
from seawall._strategies.deadline import Deadline, deadline, timeout_from_headers
from seawall.instrumentation._core import Recorder

__all__ = ["OVERLOADED_HEADER", "Admission", "LoadShedder", "ShedStats"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The response header that says "overloaded; don't retry" (seawall's HTTP integrations honour
#: it, as they honour Envoy's ``x-envoy-overloaded``).
OVERLOADED_HEADER: Final = "x-seawall-overloaded"
# Priorities follow the urgency levels of RFC 9218 (0 = most urgent ... 7, default 3).
_LEVELS: Final = 8
_DEFAULT_PRIORITY: Final = 3
# No deadline header and no server limit: timeout_from_headers needs a finite cap.
_NO_LIMIT: Final = 1e9


class ShedStats:
    """Live counts of a :class:`LoadShedder` (they only grow, except the two gauges).

    Attributes:
        admitted: requests passed to the application.
        shed: requests rejected, by reason (``queue_full``, ``priority``, ``queue_timeout``,
            ``deadline``).
        in_flight: requests the application is handling now.
        queued: requests waiting for a slot now.
    """

    __slots__ = ("admitted", "in_flight", "queued", "shed")

    def __init__(self) -> None:
        self.admitted = 0
        self.in_flight = 0
        self.queued = 0
        self.shed: dict[str, int] = {
            "queue_full": 0,
            "priority": 0,
            "queue_timeout": 0,
            "deadline": 0,
        }

    def __repr__(self) -> str:
        return (
            f"ShedStats(admitted={self.admitted}, in_flight={self.in_flight}, "
            f"queued={self.queued}, shed={self.shed})"
        )


class Admission:
    """The load shedder's decisions without I/O: who runs now, who waits, who is shed.

    :class:`LoadShedder` drives it on asyncio (a waiter is a future with a timer); the
    simulator drives the same object on virtual time. A waiter is any object with a
    ``priority`` attribute (0 most urgent ... 7), opaque otherwise.

    Adaptive LIFO under overload: Maurer, "Fail at Scale", ACM Queue 13(8), 2015. One deque
    per urgency level: append on the right, serve from the right (LIFO), evict from the left
    (the oldest).
    """

    __slots__ = ("_queues", "max_concurrency", "max_queue", "stats")

    def __init__(self, max_concurrency: int, max_queue: int, stats: ShedStats) -> None:
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.stats = stats
        self._queues: tuple[deque[Any], ...] = tuple(deque() for _ in range(_LEVELS))

    def try_admit(self) -> bool:
        """A request arrives: ``True`` if it runs at once (its slot is taken), else it must wait
        (:meth:`enqueue`)."""
        stats = self.stats
        if stats.in_flight < self.max_concurrency and not stats.queued:
            stats.in_flight += 1
            return True
        return False

    def enqueue(self, waiter: Any) -> tuple[str | None, Any, str]:
        """Queue *waiter*, evicting the least urgent, oldest waiter if the queue is full.

        Returns:
            ``(refused, evicted, why)``: *refused* is the shed reason if *waiter* was not
            queued (``"queue_full"``), else ``None``; *evicted* is a waiter pushed out to make
            room (or ``None``), to be shed with reason *why* (``"priority"`` if it was less
            urgent, else ``"queue_full"``).
        """
        evicted: Any = None
        why = "queue_full"
        if self.stats.queued >= self.max_queue:
            evicted = self._evictable(waiter.priority)
            if evicted is None:
                return "queue_full", None, why
            why = "priority" if evicted.priority > waiter.priority else "queue_full"
            self.remove(evicted)
        self._queues[waiter.priority].append(waiter)
        self.stats.queued += 1
        return None, evicted, why

    def _evictable(self, priority: int) -> Any:
        """The least urgent, oldest waiter, if it is no more urgent than *priority*."""
        for level in range(_LEVELS - 1, priority - 1, -1):
            q = self._queues[level]
            if q:
                return q[0]
        return None

    def remove(self, waiter: Any) -> bool:
        """Take *waiter* out of the queue (it timed out, or went away); ``False`` if not in it."""
        try:
            self._queues[waiter.priority].remove(waiter)
        except ValueError:
            return False
        self.stats.queued -= 1
        return True

    def pop_next(self) -> Any:
        """A request finished: the waiter its slot passes to (most urgent, newest), or ``None``
        if none waits; then call :meth:`free` unless the waiter takes the slot."""
        for q in self._queues:
            if q:
                self.stats.queued -= 1
                return q.pop()  # the newest: LIFO
        return None

    def free(self) -> None:
        """A slot is given back with no one to take it."""
        self.stats.in_flight -= 1


class _Waiter:
    __slots__ = ("future", "priority", "timer")

    def __init__(self, future: asyncio.Future[str | None], priority: int) -> None:
        self.future = future
        self.priority = priority
        self.timer: asyncio.TimerHandle | None = None


def parse_priority(value: bytes, default: int = _DEFAULT_PRIORITY) -> int:
    """Read an untrusted priority header: ``"2"`` or RFC 9218 style ``"u=2, i"``; 0..7.

    Anything malformed gives *default*; out-of-range numbers are clamped.
    """
    try:
        text = value.decode("ascii").strip()
    except UnicodeDecodeError:
        return default
    if len(text) > 64:
        return default
    for item in text.split(","):
        item = item.strip()
        if item.startswith("u="):
            item = item[2:]
        if item.isdigit() and len(item) <= 3:
            return min(int(item), _LEVELS - 1)
    return default


class LoadShedder:
    """ASGI middleware: a concurrency limit with a short LIFO queue and cheap rejections.

    Works with any ASGI application (Starlette, FastAPI, Quart, a bare callable); only HTTP
    requests are limited, lifespan and websocket scopes pass through. For each request:

    1. If its propagated deadline (``grpc-timeout`` / ``x-request-deadline``) has already
       passed, it is answered ``504`` before any work.
    2. If fewer than ``max_concurrency`` requests are running and none is waiting, it runs.
    3. Otherwise it waits in a queue of at most ``max_queue`` requests, served **newest first**
       (LIFO: the newest caller is the one most likely still waiting; an old one has probably
       timed out) and most urgent priority first. A full queue drops its least urgent, oldest
       entry to admit a request at least as urgent; else the newcomer is rejected. A request
       waits at most ``max_queue_wait`` seconds (and never past its deadline).
    4. A rejected request gets ``status`` (503 by default, or 429), ``Retry-After`` and
       ``x-seawall-overloaded: 1``: the application never sees it.

    Admitted requests run inside the propagated deadline (clamped to ``max_request_time``), so
    every :class:`~seawall.RetryPolicy` in the handler sees the time left, and the handler is
    cancelled at the deadline (Python 3.11+; answered ``504`` if it had not started a response).

    Args:
        app: the ASGI application to protect.
        max_concurrency: requests handled at once; set it near the throughput-optimal
            concurrency (Little's law: capacity in requests/s times service time).
        max_queue: requests allowed to wait; by default ``max_concurrency``. A short queue keeps
            the latency of accepted requests near one service time.
        max_queue_wait: seconds a request may wait for a slot before it is shed.
        status: the rejection status, 503 (Service Unavailable) or 429 (Too Many Requests).
        retry_after: the ``Retry-After`` value sent with rejections (whole seconds, rounded up);
            ``None`` to send none.
        overloaded_header: send ``x-seawall-overloaded: 1`` with rejections, so seawall clients
            do not retry them ("overloaded; don't retry").
        priority_header: a request header holding an urgency 0 (most urgent) to 7, or RFC 9218
            ``u=N``; ``None`` (default) treats every request alike. Untrusted: malformed values
            mean the default urgency 3.
        deadlines: read deadline headers, drop expired requests and install the deadline.
        max_request_time: the server's own limit for one request in seconds, also the cap on a
            client's propagated deadline; ``None`` for no limit of its own.
        deadline_margin: seconds subtracted from a propagated deadline (time to send the answer).
        metrics: a :class:`~seawall.instrumentation.Recorder` that counts sheds.
        name: the label for metrics.
        clock: the clock deadlines are measured on (the system clock by default; queue waits use
            the event loop's time, which is the same monotonic scale).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_concurrency: int,
        max_queue: int | None = None,
        max_queue_wait: float = 1.0,
        status: int = 503,
        retry_after: float | None = 1.0,
        overloaded_header: bool = True,
        priority_header: str | None = None,
        deadlines: bool = True,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        metrics: Recorder | None = None,
        name: str = "server",
        clock: Clock | None = None,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, got {app!r}")
        self.app = app
        self.max_concurrency = _validate.count("max_concurrency", max_concurrency, minimum=1)
        self.max_queue = (
            self.max_concurrency if max_queue is None else _validate.count("max_queue", max_queue)
        )
        self.max_queue_wait = _validate.seconds("max_queue_wait", max_queue_wait)
        if status not in (429, 503):
            raise ValueError(f"status must be 429 or 503, got {status!r}")
        _validate.optional_seconds("retry_after", retry_after, zero=True, finite=True)
        if priority_header is not None and (
            not isinstance(priority_header, str) or not priority_header
        ):
            raise TypeError(
                f"priority_header must be a header name or None, got {priority_header!r}"
            )
        _validate.optional_seconds("max_request_time", max_request_time)
        _validate.seconds("deadline_margin", deadline_margin)
        if metrics is not None and not isinstance(metrics, Recorder):
            raise TypeError(
                f"metrics must implement seawall.instrumentation.Recorder, got {metrics!r}"
            )
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self._priority_header = (
            priority_header.lower().encode("latin-1") if priority_header is not None else None
        )
        self._deadlines = bool(deadlines)
        self.max_request_time = max_request_time
        self._cap = float(max_request_time) if max_request_time is not None else _NO_LIMIT
        self._margin = float(deadline_margin)
        self._metrics = metrics
        self.name = name
        self._clock = clock if clock is not None else SYSTEM_CLOCK
        self._status = status
        self._reject_headers = self._build_reject_headers(status, retry_after, overloaded_header)
        self._expired_headers = [(b"content-type", b"text/plain; charset=utf-8")]
        self.stats = ShedStats()
        self._admission = Admission(self.max_concurrency, self.max_queue, self.stats)

    @staticmethod
    def _build_reject_headers(
        status: int, retry_after: float | None, overloaded: bool
    ) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"text/plain; charset=utf-8")]
        if retry_after is not None:
            # RFC 9110 delta-seconds: a whole number.
            headers.append((b"retry-after", str(math.ceil(retry_after)).encode()))
        if overloaded:
            headers.append((OVERLOADED_HEADER.encode(), b"1"))
        return headers

    # -- the ASGI entry point --------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        at: Deadline | None = None
        if self._deadlines:
            allowed = timeout_from_headers(
                scope.get("headers") or (), max_seconds=self._cap, margin=self._margin
            )
            if allowed <= 0.0:
                # The caller has given up already: any work would be wasted.
                self._count_shed("deadline")
                await self._respond(send, 504, b"deadline exceeded\n", self._expired_headers)
                return
            if allowed < _NO_LIMIT:
                at = Deadline(self._clock.now() + allowed, self._clock)
        stats = self.stats
        if not self._admission.try_admit():
            reason = await self._wait(self._priority_of(scope), at)
            if reason is not None:
                self._count_shed(reason)
                if reason == "deadline":
                    await self._respond(send, 504, b"deadline exceeded\n", self._expired_headers)
                else:
                    await self._respond(send, self._status, b"overloaded\n", self._reject_headers)
                return
        stats.admitted += 1
        try:
            if at is None:
                await self.app(scope, receive, send)
            else:
                await self._run_with_deadline(scope, receive, send, at)
        finally:
            self._release()

    async def _run_with_deadline(
        self, scope: Scope, receive: Receive, send: Send, at: Deadline
    ) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            async with deadline(at=at):
                await self.app(scope, receive, tracking_send)
        except DeadlineExceeded:
            if started:
                raise
            await self._respond(send, 504, b"deadline exceeded\n", self._expired_headers)

    # -- the queue ---------------------------------------------------------------------------

    def _priority_of(self, scope: Scope) -> int:
        wanted = self._priority_header
        if wanted is None:
            return _DEFAULT_PRIORITY
        for name, value in scope.get("headers") or ():
            if name == wanted:
                return parse_priority(value)
        return _DEFAULT_PRIORITY

    async def _wait(self, priority: int, at: Deadline | None) -> str | None:
        """Wait for a slot; ``None`` once granted (the slot is then ours), else the shed reason."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), priority)
        refused, evicted, why = self._admission.enqueue(waiter)
        if refused is not None:
            return refused
        if evicted is not None:
            self._shed_waiter(evicted, why)
        wait = self.max_queue_wait
        reason = "queue_timeout"
        if at is not None:
            left = at.remaining()
            if left < wait:
                wait, reason = max(0.0, left), "deadline"
        waiter.timer = loop.call_later(wait, self._drop, waiter, reason)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            # The caller went away while waiting (or after being granted a slot).
            fut = waiter.future
            if fut.done() and not fut.cancelled() and fut.result() is None:
                self._release()
            else:
                self._unlink(waiter)
            raise

    def _unlink(self, waiter: _Waiter) -> bool:
        if not self._admission.remove(waiter):
            return False
        if waiter.timer is not None:
            waiter.timer.cancel()
        return True

    def _shed_waiter(self, waiter: _Waiter, reason: str) -> None:
        # Already out of the queue (evicted by Admission.enqueue): stop its timer, tell it.
        if waiter.timer is not None:
            waiter.timer.cancel()
        if not waiter.future.done():
            waiter.future.set_result(reason)

    def _drop(self, waiter: _Waiter, reason: str) -> None:
        if self._unlink(waiter) and not waiter.future.done():
            waiter.future.set_result(reason)

    def _release(self) -> None:
        """A request finished: hand its slot to the best waiter, or free it."""
        while True:
            waiter = self._admission.pop_next()
            if waiter is None:
                self._admission.free()
                return
            if waiter.timer is not None:
                waiter.timer.cancel()
            if not waiter.future.done():
                waiter.future.set_result(None)  # the slot passes to it directly
                return

    # -- responses ---------------------------------------------------------------------------

    def _count_shed(self, reason: str) -> None:
        self.stats.shed[reason] += 1
        if self._metrics is not None:
            self._metrics.shed(self.name, reason)

    @staticmethod
    async def _respond(
        send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def __repr__(self) -> str:
        return (
            f"LoadShedder(max_concurrency={self.max_concurrency}, max_queue={self.max_queue}, "
            f"max_queue_wait={self.max_queue_wait}, {self.stats!r})"
        )
