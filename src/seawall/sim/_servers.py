"""Server models for the overload scenarios: how latency responds to load.

Each model takes requests with :meth:`submit` and calls ``done(token)`` through the engine when
one finishes; the work of a request the client stopped waiting for is still done (a server does
not know that its caller has gone). ``len(server)`` is the number of requests in it.

- ``fixed``: latency fixed at arrival, ``base + per_request * n`` for the n requests in the
  server once it is in (itself included); no limit (an infinite-server queue whose service
  time grows with load). Throughput is not capped: a slow server still finishes work.
- ``processor_sharing``: the server shares itself between the requests in it; each needs one
  unit of work done at the rate ``1 / (base + per_request * n)`` while n are in, so throughput
  can never exceed ``1 / per_request`` and work piles up once the offered load is above it.
- ``limit``: ``concurrency`` slots, each serving one request for ``base`` seconds, and a FIFO
  queue of at most ``queue_limit`` (beyond it, requests are refused at once); capacity is
  ``concurrency / base`` per second.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from typing import Any

from seawall.sim._engine import Engine

__all__ = ["SERVER_MODELS", "Server", "make_server"]

SERVER_MODELS: tuple[str, ...] = ("fixed", "processor_sharing", "limit")

Done = Callable[[Any], None]


class Server:
    """The interface of a server model."""

    __slots__ = ()

    def submit(self, token: Any) -> bool:
        """Take a request (now); ``False`` if it is refused at once (a full queue)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class _Fixed(Server):
    __slots__ = ("_base", "_done", "_engine", "_live", "_per")

    def __init__(self, engine: Engine, done: Done, base: float, per: float) -> None:
        self._engine, self._done, self._base, self._per = engine, done, base, per
        self._live: set[Any] = set()

    def submit(self, token: Any) -> bool:
        self._live.add(token)
        # The arriving request counts itself, as in the server of the published spike model
        # (M. Brooker, github.com/mbrooker/simulator_example, simple_collapse_sim/sim.py).
        latency = self._base + self._per * len(self._live)
        self._engine.after(latency, self._finish, token)
        return True

    def _finish(self, token: Any) -> None:
        self._live.remove(token)
        self._done(token)

    def __len__(self) -> int:
        return len(self._live)


class _ProcessorSharing(Server):
    # Everyone progresses at the same rate, so requests finish in arrival order: a deque of the
    # work clock's finish marks.
    __slots__ = ("_base", "_done", "_engine", "_marks", "_per", "_updated", "_version", "_work")

    def __init__(self, engine: Engine, done: Done, base: float, per: float) -> None:
        self._engine, self._done, self._base, self._per = engine, done, base, per
        self._work = 0.0  # units of work done per request since t=0
        self._updated = 0.0
        self._marks: collections.deque[tuple[float, Any]] = collections.deque()
        self._version = 0

    def _progress(self, now: float) -> None:
        if self._marks:
            self._work += (now - self._updated) / (self._base + self._per * len(self._marks))
        self._updated = now

    def _reschedule(self, now: float) -> None:
        self._version += 1
        marks = self._marks
        if marks:
            step = (marks[0][0] - self._work) * (self._base + self._per * len(marks))
            self._engine.at(now + step, self._finish, self._version)

    def submit(self, token: Any) -> bool:
        now = self._engine.now
        self._progress(now)
        self._marks.append((self._work + 1.0, token))
        self._reschedule(now)
        return True

    def _finish(self, version: int) -> None:
        if version != self._version:
            return  # the rate changed since this completion was scheduled
        now = self._engine.now
        self._progress(now)
        _, token = self._marks.popleft()
        self._reschedule(now)
        self._done(token)

    def __len__(self) -> int:
        return len(self._marks)


class _Limit(Server):
    __slots__ = ("_base", "_busy", "_done", "_engine", "_limit", "_queue", "_slots")

    def __init__(
        self, engine: Engine, done: Done, base: float, concurrency: int, queue_limit: float
    ) -> None:
        self._engine, self._done, self._base = engine, done, base
        self._slots, self._limit = concurrency, queue_limit
        self._busy = 0
        self._queue: collections.deque[Any] = collections.deque()

    def submit(self, token: Any) -> bool:
        if self._busy < self._slots:
            self._busy += 1
            self._engine.after(self._base, self._finish, token)
            return True
        if len(self._queue) >= self._limit:
            return False
        self._queue.append(token)
        return True

    def _finish(self, token: Any) -> None:
        if self._queue:
            self._engine.after(self._base, self._finish, self._queue.popleft())
        else:
            self._busy -= 1
        self._done(token)

    def __len__(self) -> int:
        return self._busy + len(self._queue)


def make_server(
    model: str,
    engine: Engine,
    done: Done,
    *,
    base: float,
    per_request: float,
    concurrency: int,
    queue_limit: float = math.inf,
) -> Server:
    """Build one of :data:`SERVER_MODELS` on *engine*; ``done(token)`` is called per finish."""
    if model == "fixed":
        return _Fixed(engine, done, base, per_request)
    if model == "processor_sharing":
        return _ProcessorSharing(engine, done, base, per_request)
    if model == "limit":
        return _Limit(engine, done, base, concurrency, queue_limit)
    raise ValueError(f"server must be one of {', '.join(SERVER_MODELS)}; got {model!r}")
