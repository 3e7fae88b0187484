"""What to inject and when: the faults, their schedules, and the seeded plan that decides.

Free of any HTTP library: the httpx transports, the requests adapter and the ASGI middleware
ask a :class:`FaultPlan` what to do with each request and carry it out.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Final, NamedTuple, Protocol, TypeAlias, runtime_checkable

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.public import public

__all__ = [
    "Decision",
    "Drip",
    "Error",
    "Fault",
    "FaultPlan",
    "Latency",
    "Refuse",
    "Reset",
    "Schedule",
    "Status",
    "nth",
    "window",
]


@public("seawall.faults")
@runtime_checkable
class Schedule(Protocol):
    """When a fault may fire: given the request's number (from 1) and the seconds since the
    plan started (on its clock), whether it is in force. Its ``rate`` then decides."""

    def __call__(self, number: int, elapsed: float) -> bool: ...


class _Window:
    __slots__ = ("end", "start")

    def __init__(self, start: float, end: float) -> None:
        self.start = _validate.seconds("start", start, finite=True)
        self.end = _validate.seconds("end", end)
        if self.end < self.start:
            raise ValueError(f"end must be >= start ({self.start:g}), got {end!r}")

    def __call__(self, number: int, elapsed: float) -> bool:
        return self.start <= elapsed < self.end

    def __repr__(self) -> str:
        return f"window({self.start!r}, {self.end!r})"


class _Numbers:
    __slots__ = ("numbers",)

    def __init__(self, numbers: Collection[int]) -> None:
        for n in numbers:
            _validate.count("numbers", n, minimum=1)
        self.numbers = frozenset(numbers)

    def __call__(self, number: int, elapsed: float) -> bool:
        return number in self.numbers

    def __repr__(self) -> str:
        return f"nth({', '.join(map(str, sorted(self.numbers)))})"


@public("seawall.faults")
def window(start: float, end: float = float("inf")) -> Schedule:
    """In force from *start* to *end* seconds after the plan started (an outage, a slow spell)."""
    return _Window(start, end)


@public("seawall.faults")
def nth(*numbers: int) -> Schedule:
    """In force for the requests with these numbers (from 1).

    ``nth(1, 2)``: the first two requests; ``nth(*range(5, 9))``: the fifth to the eighth.
    """
    return _Numbers(numbers)


def _check_common(fault: object, rate: object, schedule: object) -> None:
    set_ = object.__setattr__
    set_(fault, "rate", _validate.ratio("rate", rate))
    if schedule is not None and not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a callable (number, elapsed) -> bool, got {schedule!r}")


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Latency:
    """Delay the request by *seconds* before it goes on (Envoy's fault filter ``delay``).

    A client layer waits at most the request's read timeout and then raises the library's read
    timeout, as a slow server would make it; the middleware delays the application.
    """

    seconds: float
    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", _validate.seconds("seconds", self.seconds, finite=True))
        _check_common(self, self.rate, self.schedule)


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Status:
    """Answer with *status* (and *headers*, *body*) without reaching the server (Envoy's
    ``abort``): ``Status(503, {"Retry-After": "1"})``, ``Status(429)``."""

    status: int
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise TypeError(f"status must be an HTTP status code, got {self.status!r}")
        if not 100 <= self.status <= 599:
            raise ValueError(f"status must be between 100 and 599, got {self.status!r}")
        if not isinstance(self.headers, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
        ):
            raise TypeError(f"headers must map str to str, got {self.headers!r}")
        object.__setattr__(self, "headers", dict(self.headers))
        if not isinstance(self.body, bytes):
            raise TypeError(f"body must be bytes, got {self.body!r}")
        _check_common(self, self.rate, self.schedule)


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Error:
    """Raise an exception instead of answering: *error* is an exception class (raised with a
    message naming the fault) or a factory returning a new exception each time.

    Not an instance: one instance raised again and again would collect every retry's notes.
    """

    error: type[BaseException] | Callable[[], BaseException]
    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        if isinstance(self.error, BaseException) or not callable(self.error):
            raise TypeError(
                "error must be an exception class or a factory of exceptions (not an instance: "
                f"raised twice it would collect every retry's notes), got {self.error!r}"
            )
        _check_common(self, self.rate, self.schedule)

    def make(self) -> BaseException:
        """A new exception to raise."""
        error = self.error
        made = error("seawall.faults: injected error") if isinstance(error, type) else error()
        if not isinstance(made, BaseException):
            raise TypeError(f"the error factory must return an exception, got {made!r}")
        return made


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Reset:
    """Reset the connection: the caller sees the library's "connection reset" error.

    With *after_send*, the request reaches the server first (and is processed, with its side
    effects) and the answer is lost: the case in which a retry of a non-idempotent request
    would duplicate it. The middleware sends part of the answer, then drops the connection.
    """

    after_send: bool = False
    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.after_send, bool):
            raise TypeError(f"after_send must be a bool, got {self.after_send!r}")
        _check_common(self, self.rate, self.schedule)


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the connection: the request never leaves (a client layer raises the library's
    connection error of that kind). The middleware, which cannot refuse a connection it has
    accepted, drops it without an answer instead."""

    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        _check_common(self, self.rate, self.schedule)


@public("seawall.faults")
@dataclasses.dataclass(frozen=True, slots=True)
class Drip:
    """Deliver the answer's body *chunk* bytes at a time, one chunk every *interval* seconds: a
    slow server that keeps every read within its timeout (a hostile one, or a congested link)."""

    chunk: int = 1
    interval: float = 0.05
    rate: float = 1.0
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        _validate.count("chunk", self.chunk, minimum=1)
        interval = _validate.seconds("interval", self.interval, finite=True)
        object.__setattr__(self, "interval", interval)
        _check_common(self, self.rate, self.schedule)

    def pieces(
        self, data: bytes, read_timeout: float | None
    ) -> Iterator[tuple[float, bytes | None]]:
        """*data* as it drips: ``(wait, piece)`` pairs, and ``(wait, None)`` where a read with
        *read_timeout* times out (an interval longer than the timeout: as on a socket)."""
        for i in range(0, len(data), self.chunk):
            if read_timeout is not None and self.interval > read_timeout:
                yield read_timeout, None
                return
            yield self.interval, data[i : i + self.chunk]


Fault: TypeAlias = Latency | Status | Error | Reset | Refuse | Drip
_KINDS: Final = (Latency, Status, Error, Reset, Refuse, Drip)


@public("seawall.faults")
class Decision(NamedTuple):
    """What to do with one request.

    Attributes:
        number: the request's number in the plan, from 1.
        delay: seconds to wait before going on (the sum of the latencies that fired).
        fault: the one other fault that fired (the first in the plan's order), or ``None``.
    """

    number: int
    delay: float
    fault: Status | Error | Reset | Refuse | Drip | None

    def wait(self, read_timeout: float | None) -> tuple[float, bool]:
        """Seconds to wait before going on, and whether a read with *read_timeout* times out
        first (the client gives up waiting for a slow server)."""
        if read_timeout is not None and self.delay > read_timeout:
            return read_timeout, True
        return self.delay, False


@public("seawall.faults")
class FaultPlan:
    """Faults to inject into requests, each at a rate and on an optional schedule, seeded.

    For each request the plan draws one random number per fault, in the order given (so a seed
    gives the same decisions for the same sequence of requests): every :class:`Latency` that
    fires adds its delay, and the first other fault that fires decides the outcome. A plan may
    be shared by several layers and threads; decisions are made under a lock.

    Example:
        ``FaultPlan([Latency(0.2, rate=0.1), Status(503, rate=0.05), Reset(rate=0.01)], seed=7)``

    Args:
        faults: what to inject.
        seed: the seed of the plan's own :class:`random.Random` (``None``: from the OS).
        clock: measures schedules and waits (the system clock by default).

    Attributes:
        enabled: set to ``False`` to let every request through untouched (a pause).
        injected: how many times each kind of fault fired (``"latency"``, ``"status"``,
            ``"error"``, ``"reset"``, ``"refuse"``, ``"drip"``).
    """

    def __init__(
        self, faults: Sequence[Fault], *, seed: int | None = None, clock: Clock | None = None
    ) -> None:
        if isinstance(faults, (str, bytes)) or not isinstance(faults, Sequence):
            raise TypeError(f"faults must be a sequence of faults, got {faults!r}")
        for fault in faults:
            if not isinstance(fault, _KINDS):
                raise TypeError(f"faults must hold seawall.faults faults, got {fault!r}")
        if seed is not None:
            _validate.count("seed", seed, minimum=0)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock, got {clock!r}")
        self.faults: tuple[Fault, ...] = tuple(faults)
        self.seed = seed
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.enabled = True
        self.injected: collections.Counter[str] = collections.Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._requests = 0
        self._started = self.clock.now()

    @property
    def requests(self) -> int:
        """How many requests the plan has decided on."""
        return self._requests

    def restart(self) -> None:
        """Start the schedules' time and the request numbers again (the counts are kept)."""
        with self._lock:
            self._requests = 0
            self._started = self.clock.now()

    def decide(self) -> Decision:
        """The decision for the next request (numbered from 1)."""
        with self._lock:
            self._requests += 1
            number = self._requests
            if not self.enabled:
                return Decision(number, 0.0, None)
            elapsed = self.clock.now() - self._started
            draw = self._rng.random
            delay = 0.0
            outcome: Status | Error | Reset | Refuse | Drip | None = None
            for fault in self.faults:
                roll = draw()  # drawn for every fault, so one fault's schedule shifts no other
                if roll >= fault.rate:
                    continue
                if fault.schedule is not None and not fault.schedule(number, elapsed):
                    continue
                if isinstance(fault, Latency):
                    delay += fault.seconds
                    self.injected["latency"] += 1
                elif outcome is None:
                    outcome = fault
                    self.injected[type(fault).__name__.lower()] += 1
            return Decision(number, delay, outcome)

    def __repr__(self) -> str:
        return (
            f"FaultPlan({list(self.faults)!r}, seed={self.seed!r}, requests={self._requests}, "
            f"injected={dict(self.injected)!r})"
        )
