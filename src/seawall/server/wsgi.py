"""LoadShedder for WSGI applications (Flask, Django, ...) under a threaded server (waitress,
gunicorn with threads): a concurrency limit, a short newest-first queue, cheap rejections, and
deadline intake.

``app.wsgi_app = seawall.server.wsgi.LoadShedder(app.wsgi_app, max_concurrency=8)`` (Flask) or
``application = LoadShedder(get_wsgi_application(), max_concurrency=8)`` (Django). Only the WSGI
specification is needed. See ``docs/server.md``.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._strategies.deadline import (
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    Deadline,
    deadline,
    timeout_from_headers,
)
from seawall.instrumentation._core import Recorder
from seawall.server._shed import _NO_LIMIT, OVERLOADED_HEADER, ShedStats

__all__ = ["OVERLOADED_HEADER", "LoadShedder"]

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_STATUS_LINES = {503: "503 Service Unavailable", 429: "429 Too Many Requests"}
_EXPIRED = b"deadline exceeded\n"
_OVERLOADED = b"overloaded\n"
# The deadline headers as WSGI spells them in the environ (CGI style).
_DEADLINE_KEYS = (
    ("HTTP_" + GRPC_TIMEOUT_HEADER.upper().replace("-", "_"), GRPC_TIMEOUT_HEADER),
    ("HTTP_" + REQUEST_DEADLINE_HEADER.upper().replace("-", "_"), REQUEST_DEADLINE_HEADER),
)


class _Waiter:
    __slots__ = ("event", "granted", "reason")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False
        self.reason: str | None = None


class LoadShedder:
    """WSGI middleware: at most *max_concurrency* requests run at once; a few more wait, newest
    first; the rest get a cheap 503 (or 429) with ``Retry-After`` and ``x-seawall-overloaded``.

    For each request:

    1. If its propagated deadline (``grpc-timeout`` / ``x-request-deadline``) has already passed,
       it is answered ``504`` before any work.
    2. If fewer than ``max_concurrency`` requests are running and none is waiting, it runs.
    3. Otherwise it waits in a queue of at most ``max_queue`` requests, served newest first
       (LIFO: the newest caller is the one most likely still waiting); a full queue sheds its
       oldest waiter to make room. A request waits at most ``max_queue_wait`` seconds, and never
       past its deadline.
    4. A rejected request gets ``status`` with ``Retry-After`` and ``x-seawall-overloaded: 1``:
       the application never sees it.

    Admitted requests run inside the propagated deadline (clamped to ``max_request_time``): every
    :class:`~seawall.RetryPolicy` and seawall client in the handler sees the time left. A thread
    cannot be interrupted, so the handler is not cancelled at the deadline.

    The slot is held until the server closes the response iterable (the body has been sent).
    Give the server more threads than ``max_concurrency + max_queue``: a request the server's own
    queue holds has not reached the shedder yet.

    Args:
        app: the WSGI application to protect.
        max_concurrency: requests handled at once (near the throughput-optimal concurrency).
        max_queue: requests allowed to wait; by default ``max_concurrency``.
        max_queue_wait: seconds a request may wait for a slot before it is shed.
        status: the rejection status, 503 or 429.
        retry_after: the ``Retry-After`` value (whole seconds, rounded up); ``None`` for none.
        overloaded_header: send ``x-seawall-overloaded: 1`` with rejections.
        deadlines: read deadline headers, drop expired requests and install the deadline.
        max_request_time: the server's own limit for one request (seconds), also the cap on a
            client's deadline; ``None`` for none.
        deadline_margin: seconds subtracted from a propagated deadline.
        metrics: a :class:`~seawall.instrumentation.Recorder` that counts sheds.
        name: the label for metrics.
        clock: the clock deadlines are measured on.

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        max_concurrency: int,
        max_queue: int | None = None,
        max_queue_wait: float = 1.0,
        status: int = 503,
        retry_after: float | None = 1.0,
        overloaded_header: bool = True,
        deadlines: bool = True,
        max_request_time: float | None = None,
        deadline_margin: float = 0.0,
        metrics: Recorder | None = None,
        name: str = "server",
        clock: Clock | None = None,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI application, got {app!r}")
        self.app = app
        self.max_concurrency = _validate.count("max_concurrency", max_concurrency, minimum=1)
        self.max_queue = (
            self.max_concurrency if max_queue is None else _validate.count("max_queue", max_queue)
        )
        self.max_queue_wait = _validate.seconds("max_queue_wait", max_queue_wait)
        if status not in _STATUS_LINES:
            raise ValueError(f"status must be 429 or 503, got {status!r}")
        _validate.optional_seconds("retry_after", retry_after, zero=True, finite=True)
        _validate.optional_seconds("max_request_time", max_request_time)
        self._margin = _validate.seconds("deadline_margin", deadline_margin)
        if metrics is not None and not isinstance(metrics, Recorder):
            raise TypeError(
                f"metrics must implement seawall.instrumentation.Recorder, got {metrics!r}"
            )
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.name = name
        self.max_request_time = max_request_time
        self._cap = float(max_request_time) if max_request_time is not None else _NO_LIMIT
        self._deadlines = bool(deadlines)
        self._metrics = metrics
        self._clock = clock if clock is not None else SYSTEM_CLOCK
        self._status_line = _STATUS_LINES[status]
        headers = [("Content-Type", "text/plain; charset=utf-8")]
        if retry_after is not None:
            headers.append(("Retry-After", str(math.ceil(retry_after))))
        if overloaded_header:
            headers.append((OVERLOADED_HEADER, "1"))
        headers.append(("Content-Length", str(len(_OVERLOADED))))
        self._reject_headers = headers
        self._expired_headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(_EXPIRED))),
        ]
        self._lock = threading.Lock()
        # Adaptive LIFO under overload: Maurer, "Fail at Scale", ACM Queue 13(8), 2015.
        self._queue: deque[_Waiter] = deque()
        self.stats = ShedStats()

    # -- the WSGI entry point --------------------------------------------------------------

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        at: Deadline | None = None
        if self._deadlines:
            pairs = [(name, environ[key]) for key, name in _DEADLINE_KEYS if key in environ]
            allowed = (
                timeout_from_headers(pairs, max_seconds=self._cap, margin=self._margin)
                if pairs or self._cap < _NO_LIMIT
                else _NO_LIMIT
            )
            if allowed <= 0.0:
                self._count_shed("deadline")  # the caller has given up already
                start_response("504 Gateway Timeout", self._expired_headers)
                return [_EXPIRED]
            if allowed < _NO_LIMIT:
                at = Deadline(self._clock.now() + allowed, self._clock)
        reason = self._admit(at)
        if reason is not None:
            self._count_shed(reason)
            if reason == "deadline":
                start_response("504 Gateway Timeout", self._expired_headers)
                return [_EXPIRED]
            start_response(self._status_line, self._reject_headers)
            return [_OVERLOADED]
        try:
            if at is None:
                body = self.app(environ, start_response)
            else:
                with deadline(at=at):
                    body = self.app(environ, start_response)
        except BaseException:
            self._release()
            raise
        return _Holding(body, self._release)

    # -- admission -------------------------------------------------------------------------

    def _admit(self, at: Deadline | None) -> str | None:
        """Take a slot (``None``), or the reason the request is shed."""
        stats = self.stats
        with self._lock:
            if stats.in_flight < self.max_concurrency and not self._queue:
                stats.in_flight += 1
                stats.admitted += 1
                return None
            if len(self._queue) >= self.max_queue:
                if not self._queue:
                    return "queue_full"  # max_queue=0: no waiting at all
                victim = self._queue.popleft()  # the oldest waiter makes room for the newest
                victim.reason = "queue_full"
                victim.event.set()
                stats.queued -= 1
            waiter = _Waiter()
            self._queue.append(waiter)
            stats.queued += 1
        wait, reason = self.max_queue_wait, "queue_timeout"
        if at is not None:
            left = at.remaining()
            if left < wait:
                wait, reason = max(0.0, left), "deadline"
        waiter.event.wait(wait)
        with self._lock:
            if waiter.granted:
                return None
            if waiter.reason is not None:
                return waiter.reason
            self._queue.remove(waiter)  # timed out while still queued
            stats.queued -= 1
            return reason

    def _release(self) -> None:
        """A request finished: hand its slot to the newest waiter, or free it."""
        stats = self.stats
        with self._lock:
            if self._queue:
                waiter = self._queue.pop()  # the newest: LIFO
                stats.queued -= 1
                stats.admitted += 1
                waiter.granted = True
                waiter.event.set()  # the slot passes to it directly
                return
            stats.in_flight -= 1

    def _count_shed(self, reason: str) -> None:
        with self._lock:
            self.stats.shed[reason] += 1
        if self._metrics is not None:
            self._metrics.shed(self.name, reason)

    def __repr__(self) -> str:
        return (
            f"seawall.server.wsgi.LoadShedder(max_concurrency={self.max_concurrency}, "
            f"max_queue={self.max_queue}, max_queue_wait={self.max_queue_wait}, {self.stats!r})"
        )


class _Holding:
    """The application's response iterable, releasing the slot once, when the server closes it."""

    __slots__ = ("_body", "_release")

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self._body = body
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()

    def __del__(self) -> None:
        # A server that never calls close() (against PEP 3333) must not leak the slot.
        release, self._release = self._release, None
        if release is not None:
            release()
