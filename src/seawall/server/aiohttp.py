"""Load shedding and deadline intake for aiohttp web applications.

``web.Application(middlewares=[seawall.server.aiohttp.LoadShedder(max_concurrency=32)])``.
Install the ``aiohttp`` extra (``pip install -e '.[aiohttp]'`` in a checkout). The admission
decisions (limit, newest-first queue, priorities, queue waits) are those of the ASGI
:class:`seawall.server.LoadShedder`: both drive one admission core. See ``docs/server.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web

from seawall._core.errors import DeadlineExceeded
from seawall._strategies.deadline import deadline
from seawall.server._admission import (
    EXPIRED,
    OVERLOADED_HEADER,
    Admission,
    AdmissionViews,
    ShedOptions,
)
from seawall.server._admission import parse_priority as _parse_priority
from seawall.server._shed import take_slot

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OVERLOADED_HEADER", "LoadShedder"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LoadShedder(AdmissionViews):
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
        **options: Unpack[ShedOptions],
    ) -> None:
        self.admission = admission = Admission(max_concurrency=max_concurrency, **options)
        self._reject_headers = dict(admission.reject_headers)

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        admission = self.admission
        at = admission.intake(request.headers)
        if at == EXPIRED:
            return _expired()  # the caller has given up already
        assert not isinstance(at, str)
        wanted = admission.priority_header
        priority = _parse_priority(None if wanted is None else request.headers.get(wanted))
        reason = await take_slot(admission, priority, at)
        if reason is not None:
            if reason == "deadline":
                return _expired()
            return web.Response(
                status=admission.status, text="overloaded\n", headers=self._reject_headers
            )
        try:
            if at is None:
                return await handler(request)
            try:
                async with deadline(at=at):
                    return await handler(request)
            except DeadlineExceeded:
                return _expired()
        finally:
            admission.release()

    def __repr__(self) -> str:
        return f"seawall.server.aiohttp.LoadShedder({self.admission!r})"


def _expired() -> web.Response:
    return web.Response(status=504, text="deadline exceeded\n")
