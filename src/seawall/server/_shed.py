"""LoadShedder: an ASGI middleware that keeps accepted requests fast by rejecting excess ones early.

A server past its capacity that queues without bound serves every request late: callers time out
and retry, and the server spends its capacity on answers nobody reads (goodput collapse). The
middleware admits at most ``max_concurrency`` requests at once, holds a few more in a short
queue, and answers the rest at once with a cheap 503 (or 429), ``Retry-After`` and the overload
signal header.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from seawall._core.compat import running_trio
from seawall._core.errors import DeadlineExceeded
from seawall._core.public import public
from seawall._strategies.deadline import Deadline, deadline
from seawall.server._admission import (
    EXPIRED,
    OVERLOADED_HEADER,
    Admission,
    AdmissionViews,
    ShedOptions,
    ShedStats,
    Ticket,
    parse_priority,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OVERLOADED_HEADER", "LoadShedder", "ShedStats", "parse_priority"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TEXT = (b"content-type", b"text/plain; charset=utf-8")


async def take_slot(admission: Admission, priority: int, at: Deadline | None) -> str | None:
    """Take a slot: ``None`` once it is ours, else the shed reason.

    The async driver of :meth:`Admission.enter`, shared by the ASGI and aiohttp shedders: a
    request that must wait waits on a future (asyncio) or an event (trio), shed when its wait
    has passed.
    """
    ticket = admission.enter(priority, at, _wake)
    if ticket is None or isinstance(ticket, str):
        return ticket
    if running_trio():
        return await _take_slot_trio(admission, ticket)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()
    ticket.handle = future
    timer = loop.call_later(ticket.wait, admission.expire, ticket)
    try:
        return await future
    except asyncio.CancelledError:
        admission.abandon(ticket)  # the caller went away while waiting, or once granted
        raise
    finally:
        timer.cancel()


async def _take_slot_trio(admission: Admission, ticket: Ticket) -> str | None:
    import trio

    event = ticket.handle = trio.Event()
    try:
        with trio.move_on_after(ticket.wait):
            await event.wait()
    except BaseException:  # trio.Cancelled (a BaseException): the caller went away
        admission.abandon(ticket)
        raise
    admission.expire(ticket)  # shed it if no decision came in time
    return ticket.result


def _wake(ticket: Ticket) -> None:
    handle = ticket.handle
    if isinstance(handle, asyncio.Future):
        if not handle.done():
            handle.set_result(ticket.result)
    elif handle is not None:
        handle.set()  # a trio.Event


@public("seawall.server")
class LoadShedder(AdmissionViews):
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
        **options: the :class:`~seawall.server.ShedOptions` every shedder takes (``max_queue``,
            ``max_queue_wait``, ``status``, ``retry_after``, ``overloaded_header``,
            ``priority_header``, ``deadlines``, ``max_request_time``, ``deadline_margin``,
            ``metrics``, ``name``, ``clock``).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_concurrency: int,
        **options: Unpack[ShedOptions],
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, got {app!r}")
        self.app = app
        self.admission = admission = Admission(max_concurrency=max_concurrency, **options)
        self._priority_header = (
            admission.priority_header.encode("latin-1")
            if admission.priority_header is not None
            else None
        )
        self._reject_headers = [
            _TEXT,
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in admission.reject_headers),
        ]

    # -- the ASGI entry point --------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        admission = self.admission
        at = admission.intake(scope.get("headers") or ())
        if at == EXPIRED:
            # The caller has given up already: any work would be wasted.
            await _respond(send, 504, b"deadline exceeded\n", [_TEXT])
            return
        assert not isinstance(at, str)
        reason = await take_slot(admission, self._priority_of(scope), at)
        if reason is not None:
            if reason == "deadline":
                await _respond(send, 504, b"deadline exceeded\n", [_TEXT])
            else:
                await _respond(send, admission.status, b"overloaded\n", self._reject_headers)
            return
        try:
            if at is None:
                await self.app(scope, receive, send)
            else:
                await self._run_with_deadline(scope, receive, send, at)
        finally:
            admission.release()

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
            await _respond(send, 504, b"deadline exceeded\n", [_TEXT])

    def _priority_of(self, scope: Scope) -> int:
        wanted = self._priority_header
        if wanted is not None:
            for name, value in scope.get("headers") or ():
                if name == wanted:
                    return parse_priority(value)
        return parse_priority(None)

    def __repr__(self) -> str:
        return f"LoadShedder({self.admission!r})"


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
