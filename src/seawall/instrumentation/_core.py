"""The metrics vocabulary shared by every adapter, and the hook that feeds it from policies.

A :class:`Recorder` receives a handful of well-defined signals (attempts, retries, budget
refusals, give-ups, breaker transitions, hedges and their wins, sheds). Adapters map them onto a
metrics library; :class:`Counters` keeps them in memory (tests, the simulator, a debug endpoint).
Labels are bounded: a policy name and an outcome or reason from a fixed set, never attempt
numbers, URLs or error messages; a name that contains a URL loses its query string and user info.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Mapping
from typing import Final, Protocol, runtime_checkable

from seawall._core.public import public
from seawall._core.redact import redact_text
from seawall._strategies.breaker import BreakerEvent
from seawall._strategies.hedge import HedgeEvent
from seawall._strategies.retry import RetryEvent

__all__ = [
    "ATTEMPT_OUTCOMES",
    "FLEET_STATES",
    "LATENCY_BUCKETS",
    "MAX_NAMES",
    "METRICS",
    "SHED_REASONS",
    "Counters",
    "Metric",
    "MetricsHook",
    "Recorder",
    "SagaRecorder",
]

#: Outcomes of one attempt: it returned an accepted value, or it failed (error or bad result).
ATTEMPT_OUTCOMES: Final = ("success", "failure")
#: Why a server shed a request (see :class:`seawall.server.LoadShedder`).
SHED_REASONS: Final = ("queue_full", "priority", "queue_timeout", "deadline")
#: Distinct policy (or breaker, or server) names a recorder keeps apart; further names are
#: reported as ``"other"`` so that a bug that names policies after URLs cannot explode a
#: metrics backend.
MAX_NAMES: Final = 200


@public("seawall.instrumentation")
@dataclasses.dataclass(frozen=True, slots=True)
class Metric:
    """One metric every adapter exports, under the same name and labels.

    Attributes:
        key: the short name (``"attempts"``); Prometheus shows ``seawall_<key>_total`` for
            counters and ``seawall_<key>`` for histograms; OpenTelemetry ``seawall.<key>``.
        kind: ``"counter"`` or ``"histogram"``.
        labels: the label names, each with a bounded set of values.
        unit: the unit (UCUM, as OpenTelemetry wants it).
        help: a one-line description.
    """

    key: str
    kind: str
    labels: tuple[str, ...]
    unit: str
    help: str

    @property
    def prometheus_name(self) -> str:
        return f"seawall_{self.key}_total" if self.kind == "counter" else f"seawall_{self.key}"


#: Every metric, in the order the docs list them.
METRICS: Final = (
    Metric("attempts", "counter", ("policy", "outcome"), "{attempt}", "Attempts made by policies."),
    Metric("retries", "counter", ("policy",), "{retry}", "Retries scheduled by policies."),
    Metric(
        "budget_refusals",
        "counter",
        ("policy",),
        "{retry}",
        "Retries refused by a retry budget.",
    ),
    Metric(
        "give_ups",
        "counter",
        ("policy", "reason"),
        "{call}",
        "Calls a policy stopped retrying, by reason.",
    ),
    Metric(
        "breaker_transitions",
        "counter",
        ("breaker", "state"),
        "{transition}",
        "Circuit breaker state changes, by the state entered.",
    ),
    Metric("hedges", "counter", ("policy",), "{request}", "Hedged (backup) requests sent."),
    Metric(
        "hedge_wins",
        "counter",
        ("policy",),
        "{call}",
        "Calls answered first by a hedged (backup) request.",
    ),
    Metric(
        "sheds",
        "counter",
        ("server", "reason"),
        "{request}",
        "Requests a server rejected without doing their work.",
    ),
    Metric(
        "saga_runs",
        "counter",
        ("saga", "status"),
        "{run}",
        "Saga runs that reached a status: SUCCEEDED, COMPENSATED, FAILED or NEEDS_ATTENTION.",
    ),
    Metric(
        "fleet_transitions",
        "counter",
        ("fleet", "state"),
        "{transition}",
        "Fleets (budgets and breakers shared on Redis) turning degraded or recovering.",
    ),
    Metric(
        "attempt_duration_seconds",
        "histogram",
        ("policy", "outcome"),
        "s",
        "Duration of single attempts.",
    ),
)
#: What a fleet (``seawall.redis.Fleet``) turns into: deciding locally, or sharing again.
FLEET_STATES: Final = ("degraded", "recovered")
#: Histogram buckets for attempt latency, in seconds: 1 ms to 30 s, about 2.5x apart.
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@public("seawall.instrumentation")
@runtime_checkable
class Recorder(Protocol):
    """What seawall reports; implemented by the Prometheus, OpenTelemetry and in-memory adapters.

    Every method is called synchronously on the caller's thread and must be cheap and never
    raise.
    """

    def attempt(self, policy: str, outcome: str, duration: float) -> None:
        """An attempt ended with *outcome* (``"success"`` or ``"failure"``) after *duration* s."""

    def retry(self, policy: str) -> None:
        """A retry was scheduled."""

    def budget_refusal(self, policy: str) -> None:
        """A retry budget refused a retry (or a hedge)."""

    def give_up(self, policy: str, reason: str) -> None:
        """A policy stopped retrying a failed call; *reason* is a ``GiveUpReason``."""

    def breaker_transition(self, breaker: str, state: str) -> None:
        """A circuit breaker entered *state* (``"closed"``, ``"open"``, ``"half_open"``)."""

    def hedge(self, policy: str) -> None:
        """A hedged (backup) request was sent."""

    def hedge_win(self, policy: str) -> None:
        """A hedged (backup) request answered its call before the others."""

    def shed(self, server: str, reason: str) -> None:
        """A server rejected a request without doing its work; *reason* from ``SHED_REASONS``."""

    # An optional capability, looked up on the object (recorders without it work as before):
    # fleet_transition(fleet, state): a seawall.redis fleet turned "degraded" or "recovered".


class _FleetEvent(Protocol):
    """What :meth:`MetricsHook.fleet_hook` reads of a ``seawall.redis.FleetEvent``."""

    @property
    def kind(self) -> str: ...

    @property
    def policy(self) -> str: ...


@public("seawall.instrumentation")
class SagaRecorder(Recorder, Protocol):
    """A :class:`Recorder` that also counts saga runs (the in-memory, Prometheus and
    OpenTelemetry recorders are). :class:`seawall.saga.MetricsHook` calls :meth:`saga_run` when
    the recorder has it; the step attempts go through the :class:`Recorder` methods."""

    def saga_run(self, saga: str, status: str) -> None:
        """A run of *saga* reached *status* (a final one, or ``"NEEDS_ATTENTION"``)."""


class _Names:
    """Maps raw names to label values; at most ``MAX_NAMES`` distinct ones, then ``"other"``."""

    __slots__ = ("_known", "_lock", "limit")

    def __init__(self, limit: int = MAX_NAMES) -> None:
        self.limit = limit
        self._known: dict[str | None, str] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str | None) -> str:
        label = self._known.get(name)
        if label is not None:
            return label
        with self._lock:
            if name in self._known:
                return self._known[name]
            if len(self._known) >= self.limit:
                return "other"
            # A name made of a URL (a route named after it) must not put its query string or
            # user info into every metric backend.
            label = redact_text(name) if isinstance(name, str) else ""
            self._known[name] = label
            return label


@public("seawall.instrumentation")
class MetricsHook:
    """A :class:`~seawall.RetryPolicy` hook that reports every attempt to a :class:`Recorder`.

    Example:
        ``RetryPolicy(name="users", hooks=[seawall.logging_hook, MetricsHook(recorder)])``

    It sets ``observes_attempts``, so the policy also reports successful attempts (and their
    latency); such a policy forgoes the bare try/except fast path, which costs a few hundred
    nanoseconds per call. Policies without a metrics hook are not slowed down at all.

    Args:
        recorder: where the signals go.
    """

    __slots__ = ("_names", "recorder")

    observes_attempts: Final = True

    def __init__(self, recorder: Recorder) -> None:
        if not isinstance(recorder, Recorder):
            raise TypeError(
                f"recorder must implement seawall.instrumentation.Recorder, got {recorder!r}"
            )
        self.recorder = recorder
        self._names = _Names()

    def __call__(self, event: RetryEvent) -> None:
        name = self._names(event.policy)
        r = self.recorder
        kind = event.kind
        if kind == "success":
            r.attempt(name, "success", event.duration)
        elif kind == "retry":
            r.attempt(name, "failure", event.duration)
            r.retry(name)
        elif kind == "give_up":
            r.attempt(name, "failure", event.duration)
            r.give_up(name, event.reason or "not_retryable")
        elif kind == "budget_exhausted":
            r.budget_refusal(name)

    def breaker_hook(self, event: BreakerEvent) -> None:
        """A state-change hook for :class:`~seawall.CircuitBreaker` (``hooks=[...]``)."""
        self.recorder.breaker_transition(self._names(event.breaker), event.new)

    def hedge_hook(self, event: HedgeEvent) -> None:
        """A hook for :class:`~seawall.Hedge` (``hooks=[...]``): hedges sent, won, refused."""
        name = self._names(event.policy)
        kind = event.kind
        if kind == "hedge":
            self.recorder.hedge(name)
        elif kind == "win":
            self.recorder.hedge_win(name)
        elif kind == "budget_exhausted":
            self.recorder.budget_refusal(name)

    def fleet_hook(self, event: _FleetEvent) -> None:
        """A hook for ``seawall.redis.Fleet`` (``hooks=[...]``): degraded and recovered fleets,
        reported to the recorder's ``fleet_transition`` if it has one."""
        report = getattr(self.recorder, "fleet_transition", None)
        if callable(report) and event.kind in FLEET_STATES:
            report(self._names(event.policy), event.kind)

    def __repr__(self) -> str:
        return f"MetricsHook({self.recorder!r})"


@public("seawall.instrumentation")
class Counters:
    """An in-memory :class:`Recorder`: counts and latency sums, thread-safe, bounded labels.

    Useful in tests, in the simulator (which prints the same counters operators see in
    production) and behind a debug endpoint. Series are keyed by the metric's short name and its
    label values, e.g. ``counters.get("attempts", "users", "success")``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, ...], float] = {}
        self._names = _Names()

    def _add(self, key: tuple[str, ...], value: float = 1.0) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0.0) + value

    def attempt(self, policy: str, outcome: str, duration: float) -> None:
        policy = self._names(policy)
        counts = self._counts
        key = ("attempts", policy, outcome)
        with self._lock:
            counts[key] = counts.get(key, 0.0) + 1.0
            if 0.0 <= duration < math.inf:
                key = ("attempt_duration_seconds_count", policy, outcome)
                counts[key] = counts.get(key, 0.0) + 1.0
                key = ("attempt_duration_seconds_sum", policy, outcome)
                counts[key] = counts.get(key, 0.0) + duration

    def retry(self, policy: str) -> None:
        self._add(("retries", self._names(policy)))

    def budget_refusal(self, policy: str) -> None:
        self._add(("budget_refusals", self._names(policy)))

    def give_up(self, policy: str, reason: str) -> None:
        self._add(("give_ups", self._names(policy), reason))

    def breaker_transition(self, breaker: str, state: str) -> None:
        self._add(("breaker_transitions", self._names(breaker), state))

    def hedge(self, policy: str) -> None:
        self._add(("hedges", self._names(policy)))

    def hedge_win(self, policy: str) -> None:
        self._add(("hedge_wins", self._names(policy)))

    def shed(self, server: str, reason: str) -> None:
        self._add(("sheds", self._names(server), reason))

    def saga_run(self, saga: str, status: str) -> None:
        self._add(("saga_runs", self._names(saga), status))

    def fleet_transition(self, fleet: str, state: str) -> None:
        self._add(("fleet_transitions", self._names(fleet), state))

    def get(self, metric: str, *labels: str) -> float:
        """The value of one series (0 if never recorded), e.g. ``get("retries", "users")``."""
        with self._lock:
            return self._counts.get((metric, *labels), 0.0)

    def total(self, metric: str) -> float:
        """The sum of *metric* over every label value."""
        with self._lock:
            return sum(v for k, v in self._counts.items() if k[0] == metric)

    def snapshot(self) -> Mapping[tuple[str, ...], float]:
        """A copy of every series, keyed ``(metric, *label_values)``."""
        with self._lock:
            return dict(self._counts)

    def format(self) -> str:
        """The series in Prometheus text notation, one per line, sorted (for printing)."""
        labels_of = {m.key: m.labels for m in METRICS}
        lines = []
        for key, value in sorted(self.snapshot().items()):
            metric, values = key[0], key[1:]
            if metric.startswith("attempt_duration_seconds_"):
                name, names = f"seawall_{metric}", labels_of["attempt_duration_seconds"]
                shown = f"{value:.6g}" if metric.endswith("_sum") else str(int(value))
            else:
                name, names = f"seawall_{metric}_total", labels_of[metric]
                shown = str(int(value))
            pairs = ",".join(f'{n}="{v}"' for n, v in zip(names, values, strict=True))
            lines.append(f"{name}{{{pairs}}} {shown}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Counters {len(self._counts)} series>"
