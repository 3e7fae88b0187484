"""The fleet: one Redis connection, one sync thread, and the degraded mode shared by every
shared object of a process."""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import secrets
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol

import redis
import redis.backoff
import redis.retry

from seawall._core.clock import Clock
from seawall._core.events import check_hooks, emit
from seawall._core.public import public
from seawall._core.redact import redact_repr, redact_text
from seawall._strategies.backoff import Backoff

__all__ = ["DEFAULT_TIMEOUT", "Fleet", "FleetEvent", "FleetStats", "Member"]

#: The default ``timeout`` of a :class:`Fleet`, in seconds: sync round trips on 2 cores kept
#: busy by two spinning processes took up to tens of milliseconds, beyond the former 50 ms
#: now and then (the figures are in docs/fleet.md).
DEFAULT_TIMEOUT = 0.25

_log = logging.getLogger("seawall.redis")


class Op(NamedTuple):
    """One script call of a shared object.

    Attributes:
        script: the registered script.
        keys: its keys (one hash tag); a call that is *sent again* after a lost answer has
            the fleet's record of its calls (:meth:`Fleet.once_key`) last.
        args: its arguments; a call sent again has its id (:meth:`Fleet.once_id`) last.
        sent: what the call carries, as the member needs it to apply the answer, or to take
            it back when the call never reached Redis; ``None`` for a call that is never sent
            again (a breaker's: its outcomes of a failed sync stay in its local window).
    """

    script: Any
    keys: Sequence[str]
    args: Sequence[str | int | float]
    sent: Any = None


class Member(Protocol):
    """What a shared object offers the fleet's sync thread."""

    def _collect(self) -> Op | None:
        """The state accrued since the last sync, reset, as one script call (None: nothing)."""

    def _apply(self, op: Op, result: Any) -> None:
        """The script's answer to *op* (made by :meth:`_collect` or on a caller's thread)."""

    def _restore(self, op: Op) -> None:
        """*op* never changed anything on Redis (not sent, or refused): keep what it carried
        for the next sync."""

    def _wait(self, op: Op) -> Op:
        """*op* failed, but Redis may have applied it: the fleet sends it again and gives its
        answer to :meth:`_apply`; meanwhile what it carries still counts in the member's local
        view.

        Returns:
            The call to send again: what *op* carries, unchanged (its id makes Redis apply it
            once), but asking for nothing new (no lease: the member has decided without Redis
            meanwhile, on a view that a lease granted now would count twice).
        """

    def _set_degraded(self, degraded: bool) -> None:
        """Switch to (``True``) or back from the local fallback object (the whole fleet lost
        Redis, or this object's keys cannot be used)."""


@public("seawall.redis")
class FleetEvent(NamedTuple):
    """What a fleet's hooks receive when it loses or regains Redis.

    Attributes:
        kind: ``"degraded"`` (the local fallback objects decide now) or ``"recovered"``.
        policy: the fleet's namespace.
        at: ``time.monotonic()`` at the change.
        error: what made it degraded (``"Type: message"``), ``None`` when recovered.
    """

    kind: Literal["degraded", "recovered"]
    policy: str
    at: float
    error: str | None = None


@public("seawall.redis")
@dataclasses.dataclass(frozen=True, slots=True)
class FleetStats:
    """Counters of one fleet in this process (:meth:`Fleet.stats`).

    Attributes:
        degraded: whether the local fallback objects decide now.
        degraded_periods: how many times the fleet lost Redis.
        degraded_seconds: seconds spent degraded so far (the current period included).
        syncs: successful sync round trips.
        sync_failures: failed or timed-out round trips (sync thread and callers).
        round_trips: round trips made on a caller's thread (retry decisions, breaker probes).
    """

    degraded: bool
    degraded_periods: int
    degraded_seconds: float
    syncs: int
    sync_failures: int
    round_trips: int


def _in_event_loop() -> bool:
    """Whether the calling thread runs an asyncio event loop (which must never block)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and asyncio._get_running_loop() is not None


@public("seawall.redis")
class Fleet:
    """The processes that share budgets and breakers through one Redis.

    A fleet owns a Redis client with short timeouts and a daemon thread that, every
    ``interval`` seconds, sends what each shared object accrued locally (deposits, outcomes,
    refunds) in one pipelined round trip and brings back the fleet's state. Healthy calls never
    wait for Redis: they only bump local counters.

    When Redis does not answer within ``timeout``, the fleet turns *degraded*: every shared
    object decides with its local fallback object (a plain :class:`~seawall.RetryBudget`,
    :class:`~seawall.CircuitBreaker`, ...), the thread retries with ``reconnect`` backoff, and
    the first sync that succeeds sends what was accrued meanwhile and switches back.

    Args:
        url: a ``redis://`` URL, or a ``redis.Redis`` (or ``redis.RedisCluster``) client; give
            a client short ``socket_timeout`` and ``socket_connect_timeout`` and no retries of
            its own, or a slow Redis slows down the rare round trips made on a caller's thread.
        namespace: the prefix of every key; several fleets can share one Redis.
        interval: seconds between syncs; ``None``: no thread, call :meth:`sync` yourself.
        timeout: seconds a round trip may take before the fleet turns degraded (250 ms by
            default, measured on a loaded machine); a round trip on a caller's thread waits
            this long at most, once per outage.
        reconnect: the backoff between reconnection attempts (jittered; by default from
            ``interval`` up to 5 s).
        clock: the time the scripts use for windows; ``None``: Redis's clock (``TIME``). Give a
            :class:`~seawall.VirtualClock` in tests. Every process of one namespace must use
            the same time: windows cut on one clock drop the counts made on another. The
            shared objects also take it for their local decisions (``None``: the monotonic
            clock).
        hooks: callables receiving a :class:`FleetEvent` when the fleet turns degraded or
            recovers.
        rng: a seedable :class:`random.Random` for the reconnection jitter.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: ``interval`` or ``timeout`` not > 0, or an empty ``namespace``.
    """

    def __init__(
        self,
        url: str | redis.Redis | redis.RedisCluster,
        *,
        namespace: str = "seawall",
        interval: float | None = 0.1,
        timeout: float = DEFAULT_TIMEOUT,
        reconnect: Backoff | None = None,
        clock: Clock | None = None,
        hooks: Sequence[Callable[[FleetEvent], None]] = (),
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "{}"):
            raise ValueError(f"namespace must be a non-empty str without braces, got {namespace!r}")
        self.namespace = namespace
        if interval is not None:
            interval = _seconds("interval", interval)
        self.interval = interval
        self.timeout = _seconds("timeout", timeout)
        if reconnect is not None and not isinstance(reconnect, Backoff):
            raise TypeError(f"reconnect must be a seawall.Backoff or None, got {reconnect!r}")
        self.reconnect = reconnect or Backoff(base=interval or 0.1, multiplier=2.0, cap=5.0)
        if clock is not None and not isinstance(clock, Clock):
            raise TypeError(f"clock must implement seawall.Clock or be None, got {clock!r}")
        self._clock = clock
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random or None, got {rng!r}")
        self._rng = rng or random.Random()
        self._hooks = check_hooks(hooks)
        if isinstance(url, str):
            self.client: redis.Redis = redis.Redis.from_url(
                url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
                health_check_interval=0,
            )
        elif isinstance(url, (redis.Redis, redis.RedisCluster)):
            # A cluster client works too: every script touches the keys of one hash tag.
            self.client = url  # type: ignore[assignment]
        else:
            raise TypeError(
                "url must be a redis:// URL, a redis.Redis or a redis.RedisCluster, got "
                f"{redact_repr(url)}"
            )
        self._scripts: dict[str, Any] = {}
        self._id = secrets.token_hex(8)
        self._pending: list[tuple[Member, Op]] = []  # calls to send again, oldest first
        self._members: list[Member] = []
        self._broken: dict[int, Member] = {}  # members whose keys Redis refuses, by id
        self._lock = threading.Lock()  # members and the degraded flag
        self._sync_lock = threading.Lock()  # one sync at a time
        self.degraded = False
        self._degraded_since = 0.0
        self._degraded_total = 0.0
        self._periods = 0
        self._syncs = 0
        self._failures = 0
        self._round_trips = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval is not None:
            self._thread = threading.Thread(
                target=self._loop, name=f"seawall-fleet-{namespace}", daemon=True
            )
            self._thread.start()

    # -- keys and scripts -------------------------------------------------------------------

    def keys(self, kind: str, name: str, *parts: str) -> list[str]:
        """The keys of one shared object: one hash tag (``{namespace:kind:name}``), so that
        every key of the object lives in one Redis Cluster slot."""
        if not isinstance(name, str) or not name or any(c in name for c in "{}"):
            raise ValueError(f"name must be a non-empty str without braces, got {name!r}")
        tag = f"{{{self.namespace}:{kind}:{name}}}"
        return [f"{tag}:{part}" for part in parts]

    def script(self, source: str) -> Any:
        """A registered script (EVALSHA, loaded again after a Redis restart)."""
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.client.register_script(source)
        return script

    def once_key(self, kind: str, name: str) -> str:
        """The key of this fleet's record of its calls on one shared object (in the object's
        hash tag): the scripts apply a call sent again after a lost answer only once."""
        return self.keys(kind, name, f"calls:{self._id}")[0]

    def now_arg(self) -> str:
        """The time the scripts are to use: empty for Redis's own clock."""
        return "" if self._clock is None else repr(self._clock.now())

    # -- members ----------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        """Register a shared object with the sync thread."""
        with self._lock:
            self._members.append(member)
            degraded = self.degraded
        member._set_degraded(degraded)

    def remove(self, member: Member) -> None:
        """Stop syncing *member* (it keeps deciding with its local state)."""
        with self._lock:
            if member in self._members:
                self._members.remove(member)
            self._broken.pop(id(member), None)

    # -- round trips ------------------------------------------------------------------------

    def sync(self) -> bool:
        """One sync: send every member's accrued state in one pipeline, apply the answers.

        A round trip that failed may have been applied on Redis all the same (its answer was
        lost, or came after ``timeout``): its calls are sent again, unchanged, with the next
        sync, and Redis, which recorded their ids, applies each call once. A member with a
        call to send again adds nothing new until that call is answered.

        Returns:
            Whether Redis answered (``False``: the fleet is degraded). A member whose keys
            Redis refuses (a key of another type) decides locally and is logged, but Redis
            answered: the other members share as before.
        """
        with self._sync_lock:
            with self._lock:
                members = list(self._members)
                # Sent again as they were, but at the time they run now (on Redis's clock the
                # time is Redis's own anyway).
                now = self.now_arg()
                ops = [(m, op._replace(args=(now, *op.args[1:]))) for m, op in self._pending]
                self._pending = []
            waiting = {id(member) for member, _ in ops}
            for member in members:
                if id(member) in waiting:
                    continue
                op = member._collect()
                if op is not None:
                    ops.append((member, op))
            try:
                if ops:
                    results = self._pipeline(ops)
                else:
                    self.client.ping()
                    results = []
                refused = next(
                    (r for r in results if isinstance(r, Exception) and not _per_key(r)), None
                )
                if refused is not None:
                    raise refused  # the server refuses every command (out of memory, ...)
            except Exception as exc:
                for member, op in ops:
                    self._keep(member, op)
                self._fail(exc)
                return False
            self._syncs += 1
            for (member, op), result in zip(ops, results, strict=True):
                if isinstance(result, Exception):
                    member._restore(op)  # refused before it changed anything
                    self._break(member, op, result)
                    continue
                try:
                    member._apply(op, result)
                except Exception:  # a malformed answer: never let it stop the thread
                    _log.exception("seawall.redis: could not apply a sync result")
                    continue
                if id(member) in self._broken:
                    self._mend(member)
            if self.degraded:
                self._recover()
            return True

    def _keep(self, member: Member, op: Op) -> None:
        """A call whose round trip failed: Redis may have applied it all the same. Keep it
        to send again unchanged (its id makes Redis apply it once), or, for a call that is
        never sent again, let the member take back what it carried."""
        if op.sent is None:
            member._restore(op)
            return
        again = member._wait(op)
        with self._lock:
            self._pending.append((member, again))

    def _pipeline(self, ops: list[tuple[Member, Op]]) -> list[Any]:
        """Every call in one round trip (EVALSHA; the scripts are loaded again once if Redis
        lost them, after a restart). A command Redis refused is its exception in the list."""
        for attempt in (0, 1):
            pipe = self.client.pipeline(transaction=False)
            for _, op in ops:
                pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
            results: list[Any] = pipe.execute(raise_on_error=False)
            lost = any(isinstance(r, redis.exceptions.NoScriptError) for r in results)
            if not lost or attempt:
                return results
            for source in list(self._scripts):
                self.client.script_load(source)
        raise AssertionError("unreachable")  # pragma: no cover

    def call(self, op: Op, *, in_loop: bool = False, member: Member | None = None) -> Any | None:
        """One round trip on the caller's thread, bounded by ``timeout``.

        Args:
            op: the script call.
            in_loop: make it from an asyncio event loop too (rare calls only: a breaker's
                probe); otherwise an event loop gets ``None`` at once.
            member: the shared object making it (a key of the wrong type is its alone).

        Returns:
            The script's answer, or ``None`` when the fleet is degraded, when the caller runs
            an event loop (and *in_loop* is false), or when Redis failed to answer (the fleet
            turns degraded then) or refused the object's keys (the object decides locally).
            With ``None``, *member* has taken back what the call carried (it was not sent, or
            refused), or the fleet sends the call again with its next sync (Redis may have
            applied it) and gives *member* the answer then.
        """
        if self.degraded or (not in_loop and _in_event_loop()):
            if member is not None:
                member._restore(op)
            return None
        self._round_trips += 1
        try:
            return op.script(keys=op.keys, args=op.args, client=self.client)
        except Exception as exc:
            if member is not None and _per_key(exc):
                member._restore(op)  # refused before it changed anything
                self._break(member, op, exc)
            else:
                if member is not None:
                    self._keep(member, op)
                self._fail(exc)
            return None

    def _now(self) -> float:
        """The time of local decisions: the fleet's ``clock``, else ``time.monotonic()``."""
        return self._clock.now() if self._clock is not None else time.monotonic()

    def wake(self) -> None:
        """Ask the sync thread to sync now (news that should not wait an interval)."""
        if not self.degraded:
            self._wake.set()

    # -- degraded mode ----------------------------------------------------------------------

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            if self.degraded:
                return
            self.degraded = True
            self._periods += 1
            self._degraded_since = time.monotonic()
            members = list(self._members)
        error = _describe(exc)
        if isinstance(exc, redis.exceptions.ResponseError):
            _log.warning(
                "seawall.redis: %s: Redis refuses the fleet's commands (%s); deciding locally",
                self.namespace,
                error,
            )
        else:
            _log.warning(
                "seawall.redis: %s unreachable (%s); deciding locally", self.namespace, error
            )
        for member in members:
            member._set_degraded(True)
        if self._hooks:
            emit(self._hooks, FleetEvent("degraded", self.namespace, time.monotonic(), error))

    def _break(self, member: Member, op: Op, exc: BaseException) -> None:
        """Redis answers, but refuses this member's keys: the member decides locally, and the
        log says which keys, once (until they work again)."""
        with self._lock:
            if id(member) in self._broken:
                return
            self._broken[id(member)] = member
        member._set_degraded(True)
        keys = list(op.keys)
        try:
            types = [_text(self.client.type(key)) for key in keys]
            found = ", ".join(f"{key} ({kind})" for key, kind in zip(keys, types, strict=True))
        except Exception:  # only a description: the keys alone will do
            found = ", ".join(keys)
        _log.error(
            "seawall.redis: %s: Redis refuses the keys %s (%s); %r decides locally until they "
            "are fixed or deleted",
            self.namespace,
            found,
            _describe(exc),
            member,
        )

    def _mend(self, member: Member) -> None:
        with self._lock:
            if self._broken.pop(id(member), None) is None:
                return
            degraded = self.degraded
        _log.info("seawall.redis: %s: %r shares again", self.namespace, member)
        member._set_degraded(degraded)

    def _recover(self) -> None:
        with self._lock:
            if not self.degraded:
                return
            self.degraded = False
            self._degraded_total += time.monotonic() - self._degraded_since
            members = [m for m in self._members if id(m) not in self._broken]
        _log.info("seawall.redis: %s reachable again; sharing resumes", self.namespace)
        for member in members:
            member._set_degraded(False)
        if self._hooks:
            emit(self._hooks, FleetEvent("recovered", self.namespace, time.monotonic()))

    def stats(self) -> FleetStats:
        """The fleet's counters in this process (degraded mode, syncs, round trips)."""
        with self._lock:
            seconds = self._degraded_total
            if self.degraded:
                seconds += time.monotonic() - self._degraded_since
            return FleetStats(
                self.degraded,
                self._periods,
                seconds,
                self._syncs,
                self._failures,
                self._round_trips,
            )

    # -- the thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        interval = self.interval or 0.1
        delays = None
        while not self._stop.is_set():
            self._wake.clear()  # a wake from now on asks for another sync
            try:
                ok = self.sync()
            except Exception:  # pragma: no cover - sync() catches what Redis raises
                _log.exception("seawall.redis: sync failed")
                ok = False
            if ok:
                delays = None
                if self._wake.wait(interval):
                    # Woken (a failure to report): let a burst of wakes share one sync, so an
                    # outage of the dependency cannot turn into a storm of syncs.
                    self._stop.wait(interval / 10)
            else:
                # Reconnect with seawall's own backoff; wakes are ignored meanwhile.
                if delays is None:
                    delays = self.reconnect.delays(self._rng)
                self._stop.wait(max(interval / 10, next(delays)))

    def close(self) -> None:
        """Stop the sync thread after one last sync, and close the client's connections."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 10 * self.timeout))
        self.sync()
        self.client.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a Fleet holds a connection and a thread: build one in each process")

    def __repr__(self) -> str:
        state = "degraded" if self.degraded else "connected"
        return f"<Fleet {self.namespace!r} {state}>"


def _per_key(exc: BaseException) -> bool:
    """Whether Redis refused a command for its keys (a key of another type, a value a script
    cannot read), rather than refusing everything (out of memory, read-only, busy, loading,
    not allowed: those have classes of their own, or other words)."""
    if type(exc) is not redis.exceptions.ResponseError:
        return False
    message = str(exc)
    # A runtime error of the script reads "user_script:..." (Redis 7), "Error running
    # script ..." (Redis 6).
    return message.startswith(("WRONGTYPE", "user_script:", "Error running script"))


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


_CONTROL = dict.fromkeys([*range(32), 127], "?")


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` fit for a log line: no URL secrets, no control characters, short."""
    text = redact_text(f"{type(exc).__name__}: {exc}").translate(_CONTROL)
    return text if len(text) <= 300 else text[:297] + "..."


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v
