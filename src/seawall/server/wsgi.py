"""LoadShedder for WSGI applications (Flask, Django, ...) under a threaded server (waitress,
gunicorn with threads): a concurrency limit, a short newest-first queue, cheap rejections, and
deadline intake.

``app.wsgi_app = seawall.server.wsgi.LoadShedder(app.wsgi_app, max_concurrency=8)`` (Flask) or
``application = LoadShedder(get_wsgi_application(), max_concurrency=8)`` (Django). Only the WSGI
specification is needed. See ``docs/server.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from seawall._strategies.deadline import (
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    Deadline,
    deadline,
)
from seawall.server._admission import (
    EXPIRED,
    OVERLOADED_HEADER,
    Admission,
    AdmissionViews,
    ShedOptions,
    Ticket,
    parse_priority,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OVERLOADED_HEADER", "LoadShedder"]

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

_STATUS_LINES = {503: "503 Service Unavailable", 429: "429 Too Many Requests"}
_EXPIRED = b"deadline exceeded\n"
_OVERLOADED = b"overloaded\n"
_TEXT = ("Content-Type", "text/plain; charset=utf-8")
_EXPIRED_HEADERS = [_TEXT, ("Content-Length", str(len(_EXPIRED)))]


def _environ_key(header: str) -> str:
    """A request header's name as WSGI spells it in the environ (CGI style)."""
    return "HTTP_" + header.upper().replace("-", "_")


_DEADLINE_KEYS = tuple(
    (_environ_key(name), name) for name in (GRPC_TIMEOUT_HEADER, REQUEST_DEADLINE_HEADER)
)


class LoadShedder(AdmissionViews):
    """WSGI middleware: at most *max_concurrency* requests run at once; a few more wait, newest
    first; the rest get a cheap 503 (or 429) with ``Retry-After`` and ``x-seawall-overloaded``.

    For each request:

    1. If its propagated deadline (``grpc-timeout`` / ``x-request-deadline``) has already passed,
       it is answered ``504`` before any work.
    2. If fewer than ``max_concurrency`` requests are running and none is waiting, it runs.
    3. Otherwise it waits in a queue of at most ``max_queue`` requests, served newest first
       (LIFO: the newest caller is the one most likely still waiting) and most urgent first; a
       full queue sheds its least urgent, oldest waiter to make room. A request waits at most
       ``max_queue_wait`` seconds, and never past its deadline.
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
        **options: the :class:`~seawall.server.ShedOptions` every shedder takes (``max_queue``,
            ``max_queue_wait``, ``status``, ``retry_after``, ``overloaded_header``,
            ``priority_header``, ``deadlines``, ``max_request_time``, ``deadline_margin``,
            ``metrics``, ``name``, ``clock``).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        max_concurrency: int,
        **options: Unpack[ShedOptions],
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI application, got {app!r}")
        self.app = app
        self.admission = admission = Admission(max_concurrency=max_concurrency, **options)
        self._priority_key = (
            _environ_key(admission.priority_header) if admission.priority_header else None
        )
        self._status_line = _STATUS_LINES[admission.status]
        self._reject_headers = [
            _TEXT,
            *admission.reject_headers,
            ("Content-Length", str(len(_OVERLOADED))),
        ]
        # The admission core is sans-I/O; requests arrive on the server's threads.
        self._lock = threading.Lock()

    # -- the WSGI entry point --------------------------------------------------------------

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        admission = self.admission
        pairs = [(name, environ[key]) for key, name in _DEADLINE_KEYS if key in environ]
        with self._lock:
            at = admission.intake(pairs)
        if at == EXPIRED:
            start_response("504 Gateway Timeout", _EXPIRED_HEADERS)  # the caller has given up
            return [_EXPIRED]
        assert not isinstance(at, str)
        key = self._priority_key
        reason = self._admit(parse_priority(None if key is None else environ.get(key)), at)
        if reason is not None:
            if reason == "deadline":
                start_response("504 Gateway Timeout", _EXPIRED_HEADERS)
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

    # -- admission: the thread driver of the admission core ----------------------------------

    def _admit(self, priority: int, at: Deadline | None) -> str | None:
        """Take a slot (``None``), or the reason the request is shed."""
        admission = self.admission
        with self._lock:
            ticket = admission.enter(priority, at, _wake)
            if not isinstance(ticket, Ticket):
                return ticket
            event = ticket.handle = threading.Event()
        event.wait(ticket.wait)
        with self._lock:
            admission.expire(ticket)  # shed it if no decision came in time
            return ticket.result

    def _release(self) -> None:
        with self._lock:
            self.admission.release()

    def __repr__(self) -> str:
        return f"seawall.server.wsgi.LoadShedder({self.admission!r})"


def _wake(ticket: Ticket) -> None:
    ticket.handle.set()


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
