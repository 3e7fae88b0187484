"""A circuit breaker whose state, window and half-open probes are the fleet's."""

from __future__ import annotations

import collections
import math
import secrets
from typing import Any, get_args

from seawall._core.classify import classify
from seawall._core.public import public
from seawall._strategies.breaker import (
    BreakerEvent,
    BreakerState,
    CircuitBreaker,
    CircuitOpen,
    Permit,
)
from seawall.redis import _lua
from seawall.redis._fleet import Fleet, Op

__all__ = ["SharedCircuitBreaker"]

_STATES: frozenset[str] = frozenset(get_args(BreakerState))
# Keys of a breaker nobody calls expire after a day (as a budget's bucket or quota).
_IDLE_SECONDS = 86_400.0
# Local generations whose fleet state is remembered, for the results of their probes.
_REMEMBERED = 16


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@public("seawall.redis")
class SharedCircuitBreaker(CircuitBreaker):
    """A :class:`~seawall.CircuitBreaker` whose state is the fleet's.

    The window (of calls or of seconds) counts the outcomes of every process; when it opens in
    Redis, every process fails fast after its next sync (within one ``interval``; a failure
    makes its process sync at once). Half-open probes are admitted by Redis: exactly
    ``half_open_probes`` across the fleet. While the breaker is closed a call costs what it
    costs on a local breaker (one append to a deque); outcomes are sent in batches.

    A probe slot is asked for with one round trip, made once per open period by the process
    that first finds the period over (also from an event loop: it is bounded by the fleet's
    ``timeout``). As on the local breaker, probes that have not all answered within
    ``probe_timeout`` of the half-open period's start count as failed, on Redis's clock: a
    probe whose process was killed or hung holds the fleet's breaker half-open no longer. A
    probe's result is reported against the half-open period it was granted in. While the
    fleet is degraded the breaker goes on by the local rules, from the state last seen and this
    process's own outcomes. Its keys expire after a day unused (an isolated breaker's never).

    Args:
        fleet: the :class:`Fleet` that syncs it.
        name: the breaker's name (the key on Redis, and the name in events).
        **config: every other parameter of :class:`~seawall.CircuitBreaker`.
    """

    def __init__(self, fleet: Fleet, name: str, **config: Any) -> None:
        if not isinstance(fleet, Fleet):
            raise TypeError(f"fleet must be a seawall.redis.Fleet, got {fleet!r}")
        if config.get("clock") is None and fleet._clock is not None:
            config["clock"] = fleet._clock  # one time for the scripts and the local decisions
        super().__init__(name=name, **config)
        self._fleet = fleet
        self._keys = fleet.keys("breaker", name, "state", "window")
        self._script = fleet.script(_lua.BREAKER)
        self._count_window = self._config["window_seconds"] is None
        window: Any = self._window
        if self._count_window:
            self._shape = ("count", window.size, 0.0)
        else:
            self._shape = ("time", window.buckets, window.width)
        # Keys live a day after the last call, and always longer than an open period and its
        # probes (an isolated breaker's state never expires).
        longest = self.open_duration * (1.0 + self.open_jitter) + self.probe_timeout
        self._ttl_ms = math.ceil(1000 * max(_IDLE_SECONDS, 2 * longest))
        # Outcomes of closed-state calls, waiting for the next sync (the lock-free success path
        # of the base class appends here).
        self._pending: collections.deque[int] = collections.deque()
        self._append = self._pending.append
        # The fleet's state that this process's generation mirrors: its lineage (a new one when
        # Redis lost the key) and its generation within that lineage.
        self._lineage: str | None = None
        self._fleet_gen = 0
        self._old_lineages: collections.deque[str] = collections.deque(maxlen=8)
        # The fleet's state each recent local generation mirrored: a probe's result is reported
        # against the state it was granted in, whatever this process has seen since.
        self._mirrored: dict[int, tuple[str, int]] = {}
        self._fleet_totals = (0, 0, 0)
        self._full_until = -math.inf  # every probe slot taken: do not ask again before then
        self._degraded = False
        fleet.add(self)

    # -- the fleet's state ------------------------------------------------------------------

    def _op(
        self, operation: str, *args: str | int | float, known: tuple[str, int] | None = None
    ) -> Op:
        lineage, generation = known if known is not None else (self._lineage or "", self._fleet_gen)
        return Op(
            self._script,
            self._keys,
            (
                self._fleet.now_arg(),
                operation,
                lineage,
                generation,
                secrets.token_hex(8),  # the lineage of a state created by this call
                self._ttl_ms,
                self.half_open_probes,
                repr(self.probe_timeout),
                self._open_seconds(),
                *args,
            ),
        )

    def _open_seconds(self) -> str:
        stretch = 1.0 + self.open_jitter * self._rng.random() if self.open_jitter else 1.0
        return repr(self.open_duration * stretch)

    def _mirror(self, answer: Any) -> tuple[bool, int]:
        """Take the fleet's state from a script's answer.

        Returns:
            Whether a probe was granted in a state this process mirrors now, and the local
            generation of that state.
        """
        state = _text(answer[0])
        generation, granted = int(answer[1]), int(answer[3]) == 1
        left = float(_text(answer[2]))
        lineage = _text(answer[7])
        if state not in _STATES or not math.isfinite(left):
            return False, -1  # a malformed answer: keep what we know
        # Untrusted: never stay open longer than this breaker's own longest open period.
        left = min(max(0.0, left), self.open_duration * (1.0 + self.open_jitter))
        event = None
        with self._lock:
            if lineage != self._lineage:
                if lineage in self._old_lineages:
                    return False, -1  # from before Redis lost the key: older than what we know
                if self._lineage is not None:
                    self._old_lineages.append(self._lineage)
                renewed = True
            elif generation < self._fleet_gen:
                # Ran on Redis before the answer this process already follows (a sync thread's
                # answer overtaken by a caller's probe request): never roll back to it.
                return False, -1
            else:
                renewed = False
            self._fleet_totals = (int(answer[4]), int(answer[5]), int(answer[6]))
            self._lineage = lineage
            if state == self._state and (
                generation == self._fleet_gen if not renewed else state == "closed"
            ):
                # The same state; or the fleet's state started again, closed as this one is
                # (the permits of the closed state stay good).
                self._fleet_gen = generation
                self._remember()
                return granted, self._generation
            now = self._clock.now()
            old = self._state
            self._state = state  # type: ignore[assignment]
            self._generation += 1
            self._fleet_gen = generation
            self._remember()
            self._probes_in_flight = 0
            self._probe_successes = 0
            self._full_until = -math.inf
            self._open_until = now + left
            if state == "half_open":
                self._half_open_at = now  # where the local rules count probe_timeout from
            if state == "closed":
                self._window.clear()
            if old != state and self._hooks:
                event = BreakerEvent("state_change", self.name, old, state, now)  # type: ignore[arg-type]
            local = self._generation
        self._emit(event)
        return granted, local

    def _remember(self) -> None:
        # Under the lock: which fleet state the current local generation mirrors.
        mirrored = self._mirrored
        mirrored[self._generation] = (self._lineage or "", self._fleet_gen)
        if len(mirrored) > _REMEMBERED:
            del mirrored[next(iter(mirrored))]

    def _drain(self) -> list[int]:
        """Take the outcomes waiting for a sync; they also go to the local window, which the
        breaker falls back on while the fleet is degraded."""
        pending = self._pending
        codes = [pending.popleft() for _ in range(len(pending))]
        if codes:
            window: Any = self._window
            if self._count_window:
                window.outcomes.extend(codes)
            else:
                now = self._clock.now()
                with self._lock:
                    for code in codes:
                        window.add(bool(code & 1), bool(code & 2), now)
        return codes

    def _collect(self) -> Op:
        codes = self._drain()
        if self._degraded:
            codes = []  # outcomes of a degraded period stay local
        kind, size, width = self._shape
        sratio = self.slow_call_ratio if self.slow_call_duration is not None else -1
        return self._op(
            "sync",
            "".join(map(str, codes)),
            kind,
            size,
            repr(width),
            self.minimum_calls,
            repr(self.failure_ratio),
            repr(sratio),
        )

    def _apply(self, op: Op, answer: Any) -> None:
        self._mirror(answer)

    def _restore(self, op: Op) -> None:
        """Outcomes of a failed sync are lost to the fleet (they are in the local window)."""

    def _wait(self, op: Op) -> Op:
        """Never called: a breaker's calls are not sent again (``Op.sent`` is ``None``)."""
        raise AssertionError("a breaker's calls are never sent again")

    def _set_degraded(self, degraded: bool) -> None:
        if degraded:
            self._drain()
        self._degraded = degraded

    # -- the breaker's surface --------------------------------------------------------------

    def acquire(self) -> Permit:
        """Ask to make one call (see :meth:`seawall.CircuitBreaker.acquire`).

        Closed: no round trip. Open and its time up, or half-open: one round trip asks the
        fleet for a probe slot.
        """
        if self._degraded:
            return super().acquire()
        generation = self._generation
        state = self._state
        if state == "closed":
            return (generation, False, self._clock.now() if self._timed else 0.0)
        now = self._clock.now()
        if state == "isolated":
            raise CircuitOpen(self.name, None, "isolated")
        if state == "open" and now < self._open_until:
            raise CircuitOpen(self.name, self._open_until - now, "open")
        if now < self._full_until:
            raise CircuitOpen(self.name, 0.0, "half_open")
        answer = self._fleet.call(self._op("acquire"), in_loop=True, member=self)
        if answer is None:
            return super().acquire()  # degraded now: the local rules decide
        granted, local = self._mirror(answer)
        now = self._clock.now()
        if granted:
            return (local, True, now)
        state = self._state
        if state == "closed":
            return (self._generation, False, now)
        if state == "open":
            raise CircuitOpen(self.name, max(0.0, self._open_until - now), "open")
        if state == "isolated":
            raise CircuitOpen(self.name, None, "isolated")
        # Every probe slot in the fleet is taken; their results will decide soon.
        self._full_until = now + (self._fleet.interval or self._fleet.timeout)
        raise CircuitOpen(self.name, 0.0, "half_open")

    def record(self, permit: Permit, error: BaseException | None = None) -> None:
        """Report the end of a call (see :meth:`seawall.CircuitBreaker.record`)."""
        if self._degraded:
            self._drain()
            super().record(permit, error)
            return
        generation, probe, started = permit
        if not probe:
            if generation != self._generation:
                return  # admitted under an earlier state: no longer relevant
            failed = error is not None and classify(error, self._matcher).hears == "failure"
            slow = (
                self.slow_call_duration is not None
                and self._clock.now() - started >= self.slow_call_duration
            )
            self._pending.append(failed | (slow << 1))
            if failed or slow:
                self._fleet.wake()
            return
        failed = error is not None and classify(error, self._matcher).hears == "failure"
        slow = (
            self.slow_call_duration is not None
            and self._clock.now() - started >= self.slow_call_duration
        )
        self._probe_done(permit, "fail" if failed or slow else "ok")

    def release(self, permit: Permit) -> None:
        """Give a permit back without an outcome (a probe slot goes back to the fleet)."""
        if self._degraded or not permit[1]:
            super().release(permit)
            return
        self._probe_done(permit, "release")

    def _probe_done(self, permit: Permit, outcome: str) -> None:
        """A probe's result, reported against the fleet state it was granted in: Redis counts
        it only if that half-open period is still on (this process may know a later one)."""
        generation = permit[0]
        with self._lock:
            known = self._mirrored.get(generation)
        if known is None:
            return  # granted many states ago: long irrelevant
        answer = self._fleet.call(self._op("done", outcome, known=known), in_loop=True, member=self)
        if answer is not None:
            self._mirror(answer)
            return
        if outcome == "release":
            return
        # Degraded while probing: the probe's result decides locally.
        with self._lock:
            event = None
            if generation == self._generation:
                event = self._change("open" if outcome == "fail" else "closed", self._clock.now())
        self._emit(event)

    def isolate(self) -> None:
        """Hold the breaker open in every process of the fleet until :meth:`reset`."""
        self._set_fleet("isolated")

    def reset(self) -> None:
        """Close the breaker in every process of the fleet and forget the window."""
        self._set_fleet("closed")

    def _set_fleet(self, state: str) -> None:
        answer = (
            None
            if self._degraded
            else self._fleet.call(self._op("set", state), in_loop=True, member=self)
        )
        if answer is not None:
            self._mirror(answer)
        elif state == "closed":
            super().reset()
        else:
            super().isolate()

    def metrics(self) -> tuple[int, int, int]:
        """The fleet's window ``(calls, failures, slow_calls)`` as of the latest round trip."""
        if self._degraded:
            return super().metrics()
        return self._fleet_totals

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("SharedCircuitBreaker is bound to a Fleet: build one in each process")

    def __repr__(self) -> str:
        return f"<SharedCircuitBreaker {self.name!r} {self.state}>"
