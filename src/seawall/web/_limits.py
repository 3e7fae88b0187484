"""What keeps the page's server responsive: bounded requests and bounded queues of work.

Every request gets a time limit and a size limit, and its work is cancelled when the client
leaves (:class:`Bounded`, the outermost ASGI layer). Work runs behind a :class:`Gate` per kind:
a few at a time, a bounded number waiting, the rest refused at once with ``503`` and a
``Retry-After``, so that a flood of one kind of request cannot hold the threads or the CPU that
another kind needs.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["MAX_QUERY", "Bounded", "Busy", "Gate"]

T = TypeVar("T")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_QUERY = 1024
"""The longest query string accepted, in bytes (the longest the page sends is under 200)."""


class Busy(Exception):
    """Too much of this kind of work is running or waiting: come back in *retry_after* s."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _check_count(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")


class Gate:
    """At most *running* calls at once in worker threads, at most *waiting* more in line.

    A call beyond those is refused with :class:`Busy` before it takes anything; one that waits
    can be cancelled while it waits (its client left, its time ran out) and never starts.
    """

    def __init__(self, name: str, running: int, waiting: int, retry_after: float = 1.0) -> None:
        _check_count("running", running, 1)
        _check_count("waiting", waiting, 0)
        self.name = name
        self._limit = running + waiting
        self._limiter = anyio.CapacityLimiter(running)
        self._retry_after = retry_after
        self._admitted = 0

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """*fn* in a worker thread once a place is free; :class:`Busy` if none is in sight."""
        if self._admitted >= self._limit:
            raise Busy(
                f"the server is busy with {self.name} requests; try again shortly",
                self._retry_after,
            )
        self._admitted += 1
        try:
            return await anyio.to_thread.run_sync(
                functools.partial(fn, *args, **kwargs), limiter=self._limiter
            )
        finally:
            self._admitted -= 1


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> ASGIApp:
    payload = json.dumps(body).encode()

    async def respond(scope: Scope, receive: Receive, send: Send) -> None:
        raw = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"cache-control", b"no-store"),
        ]
        raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": payload})

    return respond


class Bounded:
    """The ASGI layer around the page's application that bounds every HTTP request.

    - size: a query string over :data:`MAX_QUERY` bytes is answered ``414``, a request with a
      body ``413`` (the page only reads), or with *max_body*, a body longer than that many
      bytes or of no declared length (the store view's small forms);
    - time: a request not answered within *time_limit* seconds is cancelled and answered
      ``503`` with a ``Retry-After``;
    - a client that leaves: its request is cancelled at once (work waiting for a place never
      starts, an experiment's process is stopped).
    """

    def __init__(self, app: ASGIApp, *, time_limit: float, max_body: int = 0) -> None:
        _check_positive("time_limit", time_limit)
        _check_count("max_body", max_body, 0)
        self.app = app
        self.time_limit = time_limit
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._bounded(scope, receive, send)

    def _refusal(self, scope: Scope) -> ASGIApp | None:
        if len(scope.get("query_string", b"")) > MAX_QUERY:
            return _json(414, {"error": f"the query is longer than {MAX_QUERY} bytes"})
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length", b"0").strip()
        if b"transfer-encoding" in headers or length not in (b"", b"0"):
            if self.max_body and b"transfer-encoding" not in headers and length.isdigit():
                if int(length) <= self.max_body:
                    return None
                return _json(413, {"error": f"the request body is over {self.max_body} bytes"})
            return _json(413, {"error": "the page's endpoints take no request body"})
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The request's body, at most *max_body* bytes; ``None`` if the client left or sent
        more than it declared."""
        headers = dict(scope.get("headers", ()))
        length = headers.get(b"content-length", b"0").strip()
        if not self.max_body or length in (b"", b"0"):
            return b""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > int(length):
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        gone = anyio.Event()
        given = False
        body: bytes | None = None  # stays None if the body is not in within the time limit
        with anyio.move_on_after(self.time_limit):
            body = await self._read_body(scope, receive)
        if body is None:
            await _json(400, {"error": "the request body was cut short or too long"})(
                scope, receive, send
            )
            return

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        async def app_receive() -> Message:
            # The body (empty, or read above): one chunk, then, if the application asks
            # again, the client's departure.
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async with anyio.create_task_group() as group:

            async def watch() -> None:
                # The server reports the client's departure as the next message.
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        gone.set()
                        group.cancel_scope.cancel()
                        return

            group.start_soon(watch)
            with anyio.move_on_after(self.time_limit) as limit:
                await self.app(scope, app_receive, tracked_send)
            group.cancel_scope.cancel()
        if limit.cancelled_caught and not started and not gone.is_set():
            retry_after = str(max(1, math.ceil(self.time_limit / 4)))
            message = f"the request took longer than {self.time_limit:g} s; the server is busy"
            await _json(503, {"error": message}, {"Retry-After": retry_after})(scope, receive, send)
