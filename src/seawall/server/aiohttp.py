"""Load shedding and deadline intake for aiohttp web applications.

``web.Application(middlewares=[seawall.server.aiohttp.LoadShedder(max_concurrency=32)])``.
Install with ``pip install seawall[aiohttp]``. The admission decisions (limit, newest-first
queue, priorities, queue waits) are those of the ASGI :class:`seawall.server.LoadShedder`, which
this middleware drives; see ``docs/server.md``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from aiohttp import web

from seawall._core.clock import Clock
from seawall._core.errors import DeadlineExceeded
from seawall._strategies.deadline import Deadline, deadline, timeout_from_headers
from seawall.instrumentation._core import Recorder
from seawall.server._shed import _NO_LIMIT, OVERLOADED_HEADER, ShedStats, parse_priority
from seawall.server._shed import LoadShedder as _AsgiShedder

__all__ = ["OVERLOADED_HEADER", "LoadShedder"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _no_app(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI shedder's application slot, never called: this middleware calls aiohttp's."""
    raise AssertionError("not called")  # pragma: no cover


class LoadShedder:
    """aiohttp web middleware: a concurrency limit with a short LIFO queue and cheap rejections.

    The same admission as :class:`seawall.server.LoadShedder` (which see for every argument):
    requests whose propagated deadline has passed are answered ``504`` before any work; at most
    *max_concurrency* run at once; up to *max_queue* wait at most *max_queue_wait* seconds,
    newest (and most urgent) first; the rest get *status* with ``Retry-After`` and
    ``x-seawall-overloaded: 1``. Admitted requests run inside their propagated deadline, clamped
    to *max_request_time*, and are cancelled when it passes (``504``).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    # aiohttp's mark of a new-style middleware (what @web.middleware sets).
    __middleware_version__: ClassVar[int] = 1

    def __init__(
        self,
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
        self._engine = engine = _AsgiShedder(
            _no_app,
            max_concurrency=max_concurrency,
            max_queue=max_queue,
            max_queue_wait=max_queue_wait,
            status=status,
            retry_after=retry_after,
            overloaded_header=overloaded_header,
            priority_header=priority_header,
            deadlines=deadlines,
            max_request_time=max_request_time,
            deadline_margin=deadline_margin,
            metrics=metrics,
            name=name,
            clock=clock,
        )
        self._priority_header = priority_header
        self._reject_headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in engine._reject_headers
            if name != b"content-type"
        }
        self._deadlines = bool(deadlines)

    @property
    def stats(self) -> ShedStats:
        """Live counts: admitted, shed by reason, in flight, queued."""
        return self._engine.stats

    @property
    def max_concurrency(self) -> int:
        return self._engine.max_concurrency

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        engine = self._engine
        at: Deadline | None = None
        if self._deadlines:
            allowed = timeout_from_headers(
                request.headers, max_seconds=engine._cap, margin=engine._margin
            )
            if allowed <= 0.0:
                engine._count_shed("deadline")  # the caller has given up already
                return _expired()
            if allowed < _NO_LIMIT:
                at = Deadline(engine._clock.now() + allowed, engine._clock)
        stats = engine.stats
        if stats.in_flight < engine.max_concurrency and not stats.queued:
            stats.in_flight += 1
        else:
            reason = await engine._wait(self._priority(request), at)
            if reason is not None:
                engine._count_shed(reason)
                if reason == "deadline":
                    return _expired()
                return web.Response(
                    status=engine._status, text="overloaded\n", headers=self._reject_headers
                )
        stats.admitted += 1
        try:
            if at is None or at.at == math.inf:
                return await handler(request)
            try:
                async with deadline(at=at):
                    return await handler(request)
            except DeadlineExceeded:
                return _expired()
        finally:
            engine._release()

    def _priority(self, request: web.Request) -> int:
        if self._priority_header is None:
            return parse_priority(b"")
        value = request.headers.get(self._priority_header)
        return parse_priority(b"" if value is None else value.encode("latin-1", "replace"))

    def __repr__(self) -> str:
        return f"seawall.server.aiohttp.{self._engine!r}"


def _expired() -> web.Response:
    return web.Response(status=504, text="deadline exceeded\n")
