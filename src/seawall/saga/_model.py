"""What a saga is made of (steps, contexts) and what the log says about a run (records)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import inspect
import json
import math
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from seawall._core import validate as _validate
from seawall._strategies.backoff import Backoff
from seawall._strategies.retry import RetryPolicy

__all__ = [
    "DEFAULT_POLICY",
    "HistoryEntry",
    "OnExhausted",
    "Run",
    "Saga",
    "MAX_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_SIGNAL_NAME",
    "SagaEvent",
    "SchemaVersionError",
    "Sleep",
    "Status",
    "Step",
    "StepContext",
    "StepRecord",
    "WaitFor",
    "WorkerLost",
    "check_json",
    "check_payload",
    "fingerprint",
    "kind",
    "utc",
]


#: The longest status text read from a store (a longer one is refused as unreadable).
_MAX_STATUS: Final = 64


class Status(str, enum.Enum):
    """The status of a run or of a step; the values are the upper-case names.

    Steps are PENDING, RUNNING, RETRYING, WAITING, SUCCEEDED, FAILED, COMPENSATING or
    COMPENSATED. Runs are RUNNING, RETRYING, WAITING, SUCCEEDED, COMPENSATING, COMPENSATED,
    FAILED or NEEDS_ATTENTION. WAITING: at a :class:`WaitFor` (for its signal) or a
    :class:`Sleep` (for its timer), holding no worker.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    NEEDS_ATTENTION = "NEEDS_ATTENTION"
    WAITING = "WAITING"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Status | None:
        # A status a newer seawall wrote: shown as it is (list, runs(), counts()), never
        # rewritten; a run holding one is parked, not run (``known`` is False).
        if not isinstance(value, str) or not value or len(value) > _MAX_STATUS:
            return None
        member = str.__new__(cls, value)
        member._name_ = value
        member._value_ = value
        return member

    @property
    def final(self) -> bool:
        """Whether a run in this status is over (nothing will run for it again by itself)."""
        return self in _FINAL

    @property
    def known(self) -> bool:
        """Whether this seawall knows the status (``False`` for one a newer version wrote)."""
        return self.value in _KNOWN


_FINAL: Final = frozenset({Status.SUCCEEDED, Status.COMPENSATED, Status.FAILED})
_KNOWN: Final = frozenset(s.value for s in Status)

#: What a step does when its policy gives up: compensate the finished steps (the default),
#: stop the run as FAILED without compensating, or park it (NEEDS_ATTENTION) for a person.
OnExhausted = Literal["compensate", "fail", "park"]
_ON_EXHAUSTED: Final = ("compensate", "fail", "park")

#: The policy of a step that names none: five attempts, 1 s doubling to at most 60 s, full
#: jitter; transient errors (ConnectionError, TimeoutError) only. Its hooks are silent: the
#: orchestrator logs every attempt itself.
DEFAULT_POLICY: Final = RetryPolicy(
    max_attempts=5, backoff=Backoff(base=1.0, multiplier=2.0, cap=60.0), hooks=()
)


class SchemaVersionError(ValueError):
    """The store was created by a newer seawall (its schema version is newer than this one's)."""


class WorkerLost(TimeoutError):
    """The worker that ran an attempt stopped before recording its outcome (its lease expired).

    The outcome is unknown, so the attempt counts as failed with this error: a
    :class:`TimeoutError`, retried by policies that retry timeouts (the default), with the same
    idempotency key.
    """


def utc(timestamp: float | None) -> datetime.datetime | None:
    """Seconds since the epoch as an aware UTC datetime (``None`` stays ``None``)."""
    if timestamp is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)


#: The deepest nesting of lists and objects accepted in an input, a result or a signal's data
#: (a value at the top is at depth 1).
MAX_DEPTH: Final = 100
#: The longest signal name (a :class:`WaitFor`'s, and what ``signal()`` accepts).
MAX_SIGNAL_NAME: Final = 200
#: The default limit of an input, a step's result or a signal's data: 1 MiB of compact JSON.
MAX_PAYLOAD_BYTES: Final = 1 << 20


def check_json(value: object, what: str) -> None:
    """Raise ``TypeError`` naming *what* (and where inside it) unless *value* is plain JSON.

    Plain JSON: ``None``, ``bool``, ``int``, finite ``float``, ``str``, lists (tuples) of plain
    JSON, and dicts with ``str`` keys. Nothing is converted silently (a set, bytes, a datetime,
    NaN, an ``int`` key: each is refused), so what a step reads back is what was written.
    Lists and dicts nested deeper than :data:`MAX_DEPTH` raise ``ValueError`` (JSON that deep
    cannot be read back without exhausting the interpreter's stack).
    """
    stack: list[tuple[object, str, int]] = [(value, what, 1)]
    while stack:
        item, where, depth = stack.pop()
        if item is None or isinstance(item, (bool, int, str)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise TypeError(f"{where} is {item!r}, which JSON cannot hold")
            continue
        if isinstance(item, (list, tuple, dict)) and depth > MAX_DEPTH:
            raise ValueError(
                f"{what} is nested deeper than the limit of {MAX_DEPTH} lists and objects"
            )
        if isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise TypeError(f"{where} has the key {k!r}: JSON object keys are strings")
                stack.append((v, f"{where}[{k!r}]", depth + 1))
            continue
        raise TypeError(f"{where} is a {type(item).__name__}, not JSON ({item!r:.80})")


def check_payload(value: object, what: str, limit: int) -> str:
    """*value* as compact JSON text, once checked: plain JSON (:func:`check_json`), at most
    :data:`MAX_DEPTH` deep and at most *limit* bytes encoded.

    Raises:
        TypeError: *value* is not plain JSON.
        ValueError: it is nested too deep, or its JSON is longer than *limit* bytes (the
            message names both sizes).
    """
    check_json(value, what)
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise ValueError(
            f"{what} is {size} bytes of JSON, over the limit of {limit} bytes "
            "(Orchestrator(max_payload_bytes=...))"
        )
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class StepContext:
    """What an action or a compensation receives.

    Attributes:
        run_id: the run.
        step: the step's name.
        attempt: this attempt's number, from 1 (of the action, or of the compensation).
        input: the run's input (JSON data).
        results: the results of the steps that finished before this one, by name (for a
            compensation: its own step's result too).
        idempotency_key: the same for every attempt of this step of this run, across restarts
            and workers (``"<run_id>:<step>"``; a compensation's ends in ``":compensate"``).
            Send it downstream so that a repeated attempt is recognised there.
        compensating: ``True`` in a compensation.
    """

    run_id: str
    step: str
    attempt: int
    input: Any
    results: Mapping[str, Any]
    idempotency_key: str
    compensating: bool = False


Action = Callable[[StepContext], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step of a saga: an action, an optional compensation, and the policy that retries them.

    Args:
        name: unique within its saga; part of the idempotency key.
        action: ``fn(ctx) -> result`` (``def`` or ``async def``); the result must be JSON data.
        compensate: ``fn(ctx)`` that undoes a finished action, retried by the same policy.
        policy: the :class:`~seawall.RetryPolicy` the orchestrator applies (classification,
            backoff, ``attempt_timeout``, ``timeout`` as the step's total time, budget,
            Retry-After); :data:`DEFAULT_POLICY` when ``None``. Its ``clock`` is not used: the
            orchestrator's is.
        on_exhausted: when the policy gives up on the action: ``"compensate"`` the finished
            steps (default), ``"fail"`` the run without compensating, or ``"park"`` it as
            NEEDS_ATTENTION for a person (``retry_now`` or ``compensate`` then).
    """

    name: str
    action: Action
    compensate: Action | None = None
    policy: RetryPolicy | None = None
    on_exhausted: OnExhausted = "compensate"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.isprintable():
            raise ValueError(f"name must be a non-empty printable str, got {self.name!r}")
        if not callable(self.action):
            raise TypeError(f"action must be callable, got {self.action!r}")
        if self.compensate is not None and not callable(self.compensate):
            raise TypeError(f"compensate must be callable or None, got {self.compensate!r}")
        for fn in (self.action, self.compensate):
            if fn is not None and (
                inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
            ):
                raise TypeError(f"step {self.name!r}: {fn!r} is a generator function")
        if self.policy is not None and not isinstance(self.policy, RetryPolicy):
            raise TypeError(f"policy must be a seawall.RetryPolicy or None, got {self.policy!r}")
        if self.on_exhausted not in _ON_EXHAUSTED:
            raise ValueError(
                f"on_exhausted must be one of {', '.join(_ON_EXHAUSTED)}, got {self.on_exhausted!r}"
            )

    @property
    def retry_policy(self) -> RetryPolicy:
        return self.policy if self.policy is not None else DEFAULT_POLICY


def _never(ctx: StepContext) -> None:  # pragma: no cover - the orchestrator runs no function
    raise RuntimeError(f"step {ctx.step!r} is a wait: the orchestrator runs no function for it")


@dataclasses.dataclass(frozen=True, slots=True, init=False, repr=False)
class WaitFor(Step):
    """A step that waits for the signal *signal* (:meth:`Orchestrator.signal`), holding no worker.

    The step is named after the signal. Its result is the signal's data: the steps after it read
    it as ``ctx.results[signal]``. A signal sent before the wait began is kept in the store and
    ends the wait as soon as it begins.

    Args:
        signal: the signal's name (the step's name): a non-empty printable str of at most 200
            characters.
        timeout: seconds to wait (on the store's clock), or ``None`` for no limit but the run's
            deadline (``Saga(..., timeout=...)``, which also caps this one). Past it the step
            fails (``TimeoutError``, reason ``"timeout"``) and *on_exhausted* applies.
        on_exhausted: as for :class:`Step`: ``"compensate"`` the finished steps (default),
            ``"fail"`` the run, or ``"park"`` it (NEEDS_ATTENTION); an operator's ``retry_now``
            then waits again, with a fresh timeout.
    """

    timeout: float | None = None

    def __init__(
        self,
        signal: str,
        *,
        timeout: float | None = None,
        on_exhausted: OnExhausted = "compensate",
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "name", signal)
        setattr_(self, "action", _never)
        setattr_(self, "compensate", None)
        setattr_(self, "policy", None)
        setattr_(self, "on_exhausted", on_exhausted)
        setattr_(self, "timeout", _validate.optional_seconds("timeout", timeout, finite=True))
        self.__post_init__()
        if len(signal) > MAX_SIGNAL_NAME:
            raise ValueError(
                f"signal must be at most {MAX_SIGNAL_NAME} characters, got {len(signal)}"
            )

    @property
    def signal(self) -> str:
        """The signal's name (the step's name)."""
        return self.name

    def __repr__(self) -> str:
        return f"saga.WaitFor({self.name!r}, timeout={self.timeout!r})"


@dataclasses.dataclass(frozen=True, slots=True, init=False, repr=False)
class Sleep(Step):
    """A step that waits *seconds* on the store's clock: a due time in the log, not a worker's
    sleep (no worker is held, and a restart keeps the wake-up time).

    Args:
        seconds: how long, from the moment the step is reached (finite, >= 0).
        name: the step's name (``"sleep"``); give each of several sleeps its own.

    Its result is ``None``. A sleep that would end past the run's deadline fails at once (the
    run compensates).
    """

    seconds: float = 0.0

    def __init__(self, seconds: float, *, name: str = "sleep") -> None:
        setattr_ = object.__setattr__
        setattr_(self, "name", name)
        setattr_(self, "action", _never)
        setattr_(self, "compensate", None)
        setattr_(self, "policy", None)
        setattr_(self, "on_exhausted", "compensate")
        setattr_(self, "seconds", _validate.seconds("seconds", seconds, finite=True))
        self.__post_init__()

    def __repr__(self) -> str:
        return f"saga.Sleep({self.seconds!r}, name={self.name!r})"


def kind(step: Step) -> str:
    """``"wait"``, ``"sleep"`` or ``"step"`` (a step whose action runs)."""
    if isinstance(step, WaitFor):
        return "wait"
    if isinstance(step, Sleep):
        return "sleep"
    return "step"


@dataclasses.dataclass(frozen=True, slots=True)
class Saga:
    """A named sequence of steps, run in order; finished ones are compensated in reverse.

    Args:
        name: how runs name their saga in the log (``orch.start(name, input)``).
        steps: at least one :class:`Step`, with distinct names.
        version: the definition's version (an int from 1). Give a changed step list a new
            version and register both with the orchestrator: a run continues on the definition
            it started under (see :attr:`fingerprint`).
        timeout: a deadline for each run, in seconds from its start on the store's clock, or
            ``None`` (no deadline). Recorded in the run's row. Past it no new attempt begins and
            the run compensates; a retry that would be due past it is not scheduled (the step
            fails then), and a :class:`WaitFor`'s timeout is capped by it. Compensations are not
            bounded by it. Each attempt's time limit is capped by it.

    Attributes:
        fingerprint: a digest of the name, the version and the step names in order: what a
            run records as the definition it started under. The store refuses a second,
            different step list under the same name and version.
    """

    name: str
    steps: Sequence[Step]
    version: int = 1
    timeout: float | None = None
    fingerprint: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.isprintable():
            raise ValueError(f"name must be a non-empty printable str, got {self.name!r}")
        if isinstance(self.steps, (str, bytes)) or not isinstance(self.steps, Iterable):
            raise TypeError(f"steps must be a sequence of saga.Step, got {self.steps!r}")
        steps = tuple(self.steps)
        if not steps:
            raise ValueError(f"saga {self.name!r}: steps must not be empty")
        seen: set[str] = set()
        for step in steps:
            if not isinstance(step, Step):
                raise TypeError(f"steps must be saga.Step objects, got {step!r}")
            if step.name in seen:
                raise ValueError(f"saga {self.name!r}: duplicate step name {step.name!r}")
            seen.add(step.name)
        object.__setattr__(self, "steps", steps)
        if (
            isinstance(self.version, bool)
            or not isinstance(self.version, int)
            or not 1 <= self.version <= _MAX_VERSION
        ):
            raise ValueError(
                f"version must be an int from 1 to {_MAX_VERSION}, got {self.version!r}"
            )
        object.__setattr__(
            self, "timeout", _validate.optional_seconds("timeout", self.timeout, finite=True)
        )
        kinds = [kind(step) for step in steps]
        object.__setattr__(
            self,
            "fingerprint",
            fingerprint(
                self.name, self.version, self.names, kinds if set(kinds) != {"step"} else ()
            ),
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The step names, in order."""
        return tuple(step.name for step in self.steps)


_MAX_VERSION: Final = 2**31 - 1


def fingerprint(name: str, version: int, names: Sequence[str], kinds: Sequence[str] = ()) -> str:
    """The digest a run records of the definition it started under: the saga's name, version
    and step names in order (16 hex digits of SHA-256), and the steps' kinds when some step is
    a wait or a sleep (a step turned into a wait is another definition)."""
    parts: list[Any] = [name, version, list(names)]
    if kinds:
        parts.append(list(kinds))
    text = json.dumps(parts, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True, slots=True)
class StepRecord:
    """One step of a run, as the log has it.

    Attributes:
        name: the step's name.
        status: PENDING, RUNNING, RETRYING, SUCCEEDED, FAILED, COMPENSATING or COMPENSATED.
        attempt_count: attempts of the action so far.
        next_retry_at: when the next attempt (of the action, or of its compensation) is due, as
            an aware UTC datetime; ``None`` when none is scheduled.
        last_error: the latest error, ``"Type: message"`` (at most 500 characters), or ``None``.
        result: the action's result (JSON data), ``None`` until it succeeded.
        compensation_attempt_count: attempts of the compensation so far.
        idempotency_key: the key every attempt of the action received.
        started_at: when the first attempt started (``None`` before).
        finished_at: when the action succeeded or failed for good, or the compensation ended.
    """

    name: str
    status: Status
    attempt_count: int
    next_retry_at: datetime.datetime | None
    last_error: str | None
    result: Any
    compensation_attempt_count: int = 0
    idempotency_key: str = ""
    started_at: datetime.datetime | None = None
    finished_at: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """One run of a saga, as the log has it (a snapshot; read it again for news).

    Attributes:
        run_id: the run's id.
        saga: the saga's name.
        status: RUNNING, RETRYING, SUCCEEDED, COMPENSATING, COMPENSATED, FAILED or
            NEEDS_ATTENTION.
        input: the run's input.
        steps: one :class:`StepRecord` per step, in order.
        created_at: when the run was started.
        updated_at: when its log last changed.
        reason: why the run stopped or needs attention (e.g. ``"step 'charge' gave up:
            not_retryable"``), else ``None``.
        deadline: when the run's deadline passes (``Saga(..., timeout=...)``), else ``None``.
    """

    run_id: str
    saga: str
    status: Status
    input: Any
    steps: tuple[StepRecord, ...]
    created_at: datetime.datetime
    updated_at: datetime.datetime
    reason: str | None = None
    deadline: datetime.datetime | None = None

    def step(self, name: str) -> StepRecord:
        """The record of the step called *name*."""
        for record in self.steps:
            if record.name == name:
                return record
        raise KeyError(name)


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One line of a run's append-only history (every attempt, wait and compensation).

    Attributes:
        at: when (aware UTC datetime).
        event: ``"started"``, ``"attempt"`` (one began), ``"success"``, ``"failure"`` (with
            ``delay`` when a retry was scheduled: that wait), ``"lost"`` (a worker stopped during
            the attempt), ``"hold"`` (the budget refused a retry, or the dependency is
            overloaded: the wait is pushed out), ``"give_up"``, ``"status"`` (the run entered
            ``detail["status"]``) or ``"operator"`` (``detail["operation"]``).
        step: the step's name (``None`` for the run's own events).
        phase: ``"action"`` or ``"compensation"`` (``None`` for the run's own events).
        attempt: the attempt's number, from 1.
        delay: the wait scheduled after a failure, in seconds.
        error: ``"Type: message"``.
        detail: more, as JSON data (``next_retry_at``, ``reason``, ``duration``, ...).
    """

    at: datetime.datetime
    event: str
    step: str | None = None
    phase: str | None = None
    attempt: int | None = None
    delay: float | None = None
    error: str | None = None
    detail: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )


@dataclasses.dataclass(frozen=True, slots=True)
class SagaEvent:
    """What an orchestrator hook receives, once per attempt outcome and per run status change.

    Attributes:
        kind: ``"attempt"`` (an attempt ended: ``error`` is ``None`` on success; ``delay`` is the
            wait before the next one, ``None`` when none follows; with a ``reason`` and a
            ``delay``, the budget refused the retry and it is held back, not given up),
            ``"hold"`` (a retry was pushed out by the budget or an overloaded dependency; with
            ``delay`` ``None``, refused once too often: the step gives up) or ``"run"`` (the run
            entered ``status``; WAITING with a ``reason`` saying for what and until when).
        saga: the saga's name.
        run_id: the run.
        step: the step's name (``None`` for ``"run"``).
        phase: ``"action"`` or ``"compensation"`` (``None`` for ``"run"``).
        attempt: the attempt's number, from 1.
        error: the exception, or its ``"Type: message"`` summary, or ``None``.
        delay: seconds until the next attempt, or ``None``.
        reason: why the policy gave up (a ``GiveUpReason``), if it did; for a hold (and the
            attempt held back), why it waits: ``"budget"`` or ``"overloaded"``.
        status: the run's status after the event.
        duration: the attempt's seconds (for ``"run"`` events of final statuses: the run's).
        started_at: for ``"attempt"`` and ``"hold"`` events of an action, when the step's first
            attempt started (seconds since the epoch, on the store's clock), in whichever worker
            it ran; ``None`` otherwise.
    """

    kind: Literal["attempt", "hold", "run"]
    saga: str
    run_id: str
    step: str | None
    phase: str | None
    attempt: int
    error: BaseException | str | None
    delay: float | None
    reason: str | None
    status: Status
    duration: float
    started_at: float | None = None
