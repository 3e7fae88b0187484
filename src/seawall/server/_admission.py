"""Admission: the sans-I/O decisions of every load shedder (ASGI, aiohttp, WSGI, the simulator).

A driver owns the waiting (an asyncio future and timer, a thread's event, a simulated event) and
the responses; :class:`Admission` owns the decisions and the counts: whether a request's deadline
has already passed, whether it runs now, waits in the queue or is shed, which waiter a finished
request's slot passes to, and which waiter makes room for a more urgent newcomer. It never
blocks and never reads a clock except through its own ``clock``; a driver calls it under its own
lock when requests arrive on several threads.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypedDict

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.public import public
from seawall._strategies.deadline import Deadline, HeadersLike, timeout_from_headers
from seawall.instrumentation._core import Recorder

__all__ = [
    "EXPIRED",
    "OVERLOADED_HEADER",
    "Admission",
    "AdmissionViews",
    "ShedOptions",
    "ShedStats",
    "Ticket",
    "parse_priority",
]

#: The response header that says "overloaded; don't retry" (seawall's HTTP integrations honour
#: it, as they honour Envoy's ``x-envoy-overloaded``).
OVERLOADED_HEADER: Final = "x-seawall-overloaded"
#: What :meth:`Admission.intake` returns for a request whose caller has given up already.
EXPIRED: Final = "expired"
# Priorities follow the urgency levels of RFC 9218 (0 = most urgent ... 7, default 3).
_LEVELS: Final = 8
_DEFAULT_PRIORITY: Final = 3
# No deadline header and no server limit: timeout_from_headers needs a finite cap.
_NO_LIMIT: Final = 1e9
_SHED_REASONS: Final = ("queue_full", "priority", "queue_timeout", "deadline")


@public("seawall.server")
class ShedStats:
    """Live counts of a load shedder (they only grow, except the two gauges).

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
        self.shed: dict[str, int] = dict.fromkeys(_SHED_REASONS, 0)

    def __repr__(self) -> str:
        return (
            f"ShedStats(admitted={self.admitted}, in_flight={self.in_flight}, "
            f"queued={self.queued}, shed={self.shed})"
        )


def parse_priority(value: bytes | str | None, default: int = _DEFAULT_PRIORITY) -> int:
    """Read an untrusted priority header: ``"2"`` or RFC 9218 style ``"u=2, i"``; 0..7.

    Anything malformed (or ``None``, no header) gives *default*; out-of-range numbers are clamped.
    """
    if value is None:
        return default
    if isinstance(value, (bytes, bytearray)):
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            return default
    else:
        text = value
    if len(text) > 64:
        return default
    for item in text.split(","):
        item = item.strip()
        if item.startswith("u="):
            item = item[2:]
        if item.isascii() and item.isdigit() and len(item) <= 3:
            return min(int(item), _LEVELS - 1)
    return default


class Ticket:
    """A request waiting for a slot: how long it may wait, and how the driver is woken.

    Attributes:
        priority: its urgency, 0 (most urgent) to 7.
        wait: the seconds it may wait; once they pass the driver calls :meth:`Admission.expire`.
        result: once decided, ``None`` if granted a slot (the slot is then the request's), else
            the reason it was shed.
        waiting: true until a decision is made.
        handle: the driver's own object for it (a future, an event), for *wake* to find.
    """

    __slots__ = ("_timeout_reason", "_wake", "handle", "priority", "result", "wait", "waiting")

    def __init__(
        self, priority: int, wait: float, timeout_reason: str, wake: Callable[[Ticket], None]
    ) -> None:
        self.priority = priority
        self.wait = wait
        self.result: str | None = None
        self.waiting = True
        self.handle: Any = None
        self._timeout_reason = timeout_reason
        self._wake = wake

    def _decide(self, result: str | None) -> None:
        self.result = result
        self.waiting = False
        self._wake(self)


@public("seawall.server")
class ShedOptions(TypedDict, total=False):
    """The keyword arguments every seawall load shedder takes besides ``max_concurrency`` (all
    optional; the shedder validates them, naming a bad one).

    Attributes:
        max_queue: requests allowed to wait; by default ``max_concurrency``. A short queue keeps
            the latency of accepted requests near one service time.
        max_queue_wait: seconds a request may wait for a slot before it is shed (1.0).
        status: the rejection status, 503 (Service Unavailable, the default) or 429 (Too Many
            Requests).
        retry_after: the ``Retry-After`` value sent with rejections (whole seconds, rounded up;
            1.0); ``None`` to send none.
        overloaded_header: send ``x-seawall-overloaded: 1`` with rejections (the default), so
            seawall clients do not retry them ("overloaded; don't retry").
        priority_header: a request header holding an urgency 0 (most urgent) to 7, or RFC 9218
            ``u=N``; ``None`` (default) treats every request alike. Untrusted: malformed values
            mean the default urgency 3.
        deadlines: read deadline headers, drop expired requests and install the deadline (on by
            default).
        max_request_time: the server's own limit for one request in seconds, also the cap on a
            client's propagated deadline; ``None`` (default) for no limit of its own.
        deadline_margin: seconds subtracted from a propagated deadline (time to send the
            answer; 0).
        metrics: a :class:`~seawall.instrumentation.Recorder` that counts sheds.
        name: the label for metrics (``"server"``).
        clock: the clock deadlines are measured on (the system clock by default).
    """

    max_queue: int | None
    max_queue_wait: float
    status: int
    retry_after: float | None
    overloaded_header: bool
    priority_header: str | None
    deadlines: bool
    max_request_time: float | None
    deadline_margin: float
    metrics: Recorder | None
    name: str
    clock: Clock | None


class Admission:
    """The admission decisions of a load shedder; its arguments are validated here, once. The
    arguments besides *max_concurrency* are the :class:`ShedOptions`.

    Args:
        max_concurrency: requests handled at once; set it near the throughput-optimal
            concurrency (Little's law: capacity in requests/s times service time).

    Raises:
        TypeError, ValueError: an invalid parameter; the message names it.
    """

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
        self._margin = _validate.seconds("deadline_margin", deadline_margin)
        if metrics is not None and not isinstance(metrics, Recorder):
            raise TypeError(
                f"metrics must implement seawall.instrumentation.Recorder, got {metrics!r}"
            )
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.status = status
        #: The header whose value :func:`parse_priority` reads, lower-cased; ``None`` for none.
        self.priority_header = priority_header.lower() if priority_header is not None else None
        self.deadlines = bool(deadlines)
        self.max_request_time = max_request_time
        self._cap = float(max_request_time) if max_request_time is not None else _NO_LIMIT
        self._metrics = metrics
        self.name = name
        self.clock = clock if clock is not None else SYSTEM_CLOCK
        #: The headers of a rejection (besides its content type and length).
        self.reject_headers: list[tuple[str, str]] = []
        if retry_after is not None:
            # RFC 9110 delta-seconds: a whole number.
            self.reject_headers.append(("retry-after", str(math.ceil(retry_after))))
        if overloaded_header:
            self.reject_headers.append((OVERLOADED_HEADER, "1"))
        # Adaptive LIFO under overload: Maurer, "Fail at Scale", ACM Queue 13(8), 2015.
        # One deque per urgency level: append on the right, serve from the right (LIFO), evict
        # from the left (the oldest).
        self._queues: tuple[deque[Ticket], ...] = tuple(deque() for _ in range(_LEVELS))
        self.stats = ShedStats()

    # -- deadline intake -------------------------------------------------------------------

    def intake(self, headers: HeadersLike) -> Deadline | str | None:
        """The request's deadline from its headers, clamped to ``max_request_time``.

        Returns:
            A :class:`~seawall.Deadline` to run the request in; ``None`` for no deadline (or
            deadlines off); :data:`EXPIRED` when the caller has given up already: the driver
            answers ``504`` at once (the shed is counted here).
        """
        if not self.deadlines:
            return None
        allowed = timeout_from_headers(headers, max_seconds=self._cap, margin=self._margin)
        if allowed <= 0.0:
            self.shed("deadline")
            return EXPIRED
        if allowed >= _NO_LIMIT:
            return None
        return Deadline(self.clock.now() + allowed, self.clock)

    # -- the queue ---------------------------------------------------------------------------

    def enter(
        self, priority: int, at: Deadline | None, wake: Callable[[Ticket], None]
    ) -> Ticket | str | None:
        """A request arrives.

        Returns:
            ``None``: it runs now (it holds a slot; call :meth:`release` when it is done). A
            shed reason: reject it now (counted). A :class:`Ticket`: it waits; *wake* is called
            with the ticket once it is granted a slot or dropped, and the driver calls
            :meth:`expire` after ``ticket.wait`` seconds.
        """
        stats = self.stats
        if stats.in_flight < self.max_concurrency and not stats.queued:
            stats.in_flight += 1
            stats.admitted += 1
            return None
        if stats.queued >= self.max_queue:
            victim = self._evictable(priority)
            if victim is None:
                self.shed("queue_full")
                return "queue_full"
            self._drop(victim, "priority" if victim.priority > priority else "queue_full")
        wait, reason = self.max_queue_wait, "queue_timeout"
        if at is not None:
            left = at.remaining()
            if left < wait:
                wait, reason = max(0.0, left), "deadline"
        ticket = Ticket(priority, wait, reason, wake)
        self._queues[priority].append(ticket)
        stats.queued += 1
        return ticket

    def expire(self, ticket: Ticket) -> None:
        """The ticket's wait has passed: shed it if it is still waiting (its *wake* is called)."""
        self._drop(ticket, ticket._timeout_reason)

    def abandon(self, ticket: Ticket) -> None:
        """The caller went away while waiting, or right after being granted: free what it held."""
        if ticket.waiting:
            if self._unlink(ticket):
                ticket.waiting = False
                ticket.result = "abandoned"
        elif ticket.result is None:
            self.release()

    def release(self) -> None:
        """A request finished: hand its slot to the most urgent, newest waiter, or free it."""
        stats = self.stats
        for q in self._queues:
            if q:
                ticket = q.pop()  # the newest: LIFO
                stats.queued -= 1
                stats.admitted += 1
                ticket._decide(None)  # the slot passes to it directly
                return
        stats.in_flight -= 1

    def shed(self, reason: str) -> None:
        """Count a request shed for *reason*."""
        self.stats.shed[reason] += 1
        if self._metrics is not None:
            self._metrics.shed(self.name, reason)

    def _evictable(self, priority: int) -> Ticket | None:
        """The least urgent, oldest waiter, if it is no more urgent than *priority*."""
        for level in range(_LEVELS - 1, priority - 1, -1):
            q = self._queues[level]
            if q:
                return q[0]
        return None

    def _unlink(self, ticket: Ticket) -> bool:
        try:
            self._queues[ticket.priority].remove(ticket)
        except ValueError:
            return False
        self.stats.queued -= 1
        return True

    def _drop(self, ticket: Ticket, reason: str) -> None:
        if self._unlink(ticket):
            self.shed(reason)
            ticket._decide(reason)

    def __repr__(self) -> str:
        return (
            f"max_concurrency={self.max_concurrency}, max_queue={self.max_queue}, "
            f"max_queue_wait={self.max_queue_wait}, {self.stats!r}"
        )


class AdmissionViews:
    """What every load shedder shows of its :class:`Admission` (its ``admission`` attribute)."""

    admission: Admission

    @property
    def stats(self) -> ShedStats:
        """Live counts: admitted, shed by reason, in flight, queued."""
        return self.admission.stats

    @property
    def max_concurrency(self) -> int:
        """Requests handled at once."""
        return self.admission.max_concurrency

    @property
    def max_queue(self) -> int:
        """Requests allowed to wait."""
        return self.admission.max_queue

    @property
    def max_queue_wait(self) -> float:
        """Seconds a request may wait for a slot."""
        return self.admission.max_queue_wait

    @property
    def name(self) -> str:
        """The label for metrics."""
        return self.admission.name
