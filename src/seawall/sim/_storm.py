"""Scenario ``storm``: what retries look like, for one client and for many at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from seawall._core import validate as _validate
from seawall._core.clock import VirtualClock
from seawall._strategies.backoff import JITTERS, Backoff
from seawall._strategies.retry import RetryPolicy
from seawall.sim._metrics import retry_hooks
from seawall.sim._util import check_volume, isolated, trial_rng

__all__ = ["StormResult", "TraceStep", "storm"]


class DependencyDown(ConnectionError):
    """The simulated dependency refused the attempt."""


def storm_retry_times(policy: RetryPolicy, clients: int) -> list[float]:
    """When each retry of *clients* clients starts, all having failed at t=0 against a
    dependency that stays down: the driver loop of the storm, on the real state machine."""
    times: list[float] = []
    for _ in range(clients):
        state = policy.new_state(0.0)
        now = 0.0
        while True:
            state.begin_attempt(now)
            # A fresh error each time: one that a policy gave up on is marked as retried
            # already (the one-layer rule), and no other policy would retry it.
            delay = state.on_error(DependencyDown("connection refused"), now)
            if delay is None:
                break
            now += delay
            times.append(now)
    return times


@dataclasses.dataclass(frozen=True, slots=True)
class TraceStep:
    """One attempt of the single client's trace.

    Attributes:
        attempt: the attempt number, from 1.
        started: when it started (seconds since the call began).
        error: the failure's description, or ``None`` if it succeeded.
        wait: the wait the policy chose after it (``None``: no retry followed).
    """

    attempt: int
    started: float
    error: str | None
    wait: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class StormResult:
    """The result of :func:`storm`.

    Attributes:
        trace: the single client's attempts.
        succeeded: whether that client's call finally succeeded.
        reason: why its policy gave up, if it did.
        clients: how many clients failed at the same instant.
        retry_times: for each jitter kind, every retry's start time (seconds after the failure),
            all clients together, sorted.
        bin_width: the window for the peaks, in seconds.
        peaks: for each jitter kind, the most retries that start within one bin: the load spike
            the dependency sees.
    """

    trace: tuple[TraceStep, ...]
    succeeded: bool
    reason: str | None
    outage: float
    clients: int
    max_attempts: int
    base: float
    cap: float
    retry_times: dict[str, tuple[float, ...]]
    bin_width: float
    peaks: dict[str, int]


@isolated
def storm(
    clients: int = 100,
    *,
    jitters: Sequence[str] = JITTERS,
    max_attempts: int = 5,
    base: float = 0.1,
    cap: float = 2.0,
    outage: float = 1.0,
    attempt_time: float = 0.05,
    bin_width: float = 0.01,
    seed: int = 0,
) -> StormResult:
    """Show retries for one client, then for many clients that failed at the same instant.

    (a) One client calls a dependency that is down for the first *outage* seconds; each attempt
    takes *attempt_time*. The real :meth:`RetryPolicy.run` driver runs on a virtual clock and the
    trace lists each attempt, its failure and the chosen wait, until success or give-up.

    (b) *clients* clients all fail at t=0 against a dependency that stays down; each retries per
    the same policy until it gives up. For each jitter kind the retry start times are collected:
    without jitter they all land on the same instants (a storm), with full jitter they spread.

    Args:
        clients: how many clients fail together in (b).
        jitters: the jitter kinds to compare in (b).
        max_attempts: attempts per call, the first included.
        base: backoff base in seconds.
        cap: backoff cap in seconds.
        outage: seconds the dependency is down in (a).
        attempt_time: seconds each attempt takes in (a).
        bin_width: the window, in seconds, within which (b) counts simultaneous retries.
        seed: the seed.

    Returns:
        A :class:`StormResult`.
    """
    clients = _validate.count("clients", clients, minimum=1)
    max_attempts = _validate.count("max_attempts", max_attempts, minimum=1)
    base = _validate.seconds("base", base, zero=False, finite=True)
    cap = _validate.seconds("cap", cap, zero=False, finite=True)
    if cap < base:
        raise ValueError(f"cap must be >= base ({base!r}), got {cap!r}")
    outage = _validate.seconds("outage", outage, finite=True)
    attempt_time = _validate.seconds("attempt_time", attempt_time, finite=True)
    bin_width = _validate.seconds("bin_width", bin_width, zero=False, finite=True)
    seed = _validate.count("seed", seed, minimum=0)
    check_volume("clients * max_attempts", clients * max_attempts * len(tuple(jitters)))
    for j in jitters:
        if j not in JITTERS:
            raise ValueError(f"jitters must be among {', '.join(JITTERS)}; got {j!r}")

    # (a) one client's trace, through the real synchronous driver on a virtual clock.
    clock = VirtualClock()
    policy = RetryPolicy(
        max_attempts=max_attempts,
        backoff=Backoff(base=base, cap=cap, jitter="full"),
        clock=clock,
        rng=trial_rng(seed, "storm", "trace"),
        name="storm-trace",
        hooks=retry_hooks(),
    )

    def call() -> str:
        started = clock.now()
        clock.sleep(attempt_time)
        if started < outage:
            raise DependencyDown("connection refused")
        return "ok"

    outcome = policy.run(call)
    trace = tuple(
        TraceStep(
            r.number,
            r.started,
            None if r.error is None else f"{type(r.error).__name__}: {r.error}",
            r.delay,
        )
        for r in outcome.history
    )

    # (b) many clients failing at the same instant, through the sans-I/O state machine.
    retry_times: dict[str, tuple[float, ...]] = {}
    peaks: dict[str, int] = {}
    for jitter in jitters:
        p = RetryPolicy(
            max_attempts=max_attempts,
            backoff=Backoff(base=base, cap=cap, jitter=jitter),  # type: ignore[arg-type]
            rng=trial_rng(seed, "storm", jitter),
            name=f"storm-{jitter}",
            hooks=retry_hooks(),
        )
        times = storm_retry_times(p, clients)
        times.sort()
        retry_times[jitter] = tuple(times)
        bins: dict[int, int] = {}
        for t in times:
            k = int(t / bin_width)
            bins[k] = bins.get(k, 0) + 1
        peaks[jitter] = max(bins.values(), default=0)
    return StormResult(
        trace=trace,
        succeeded=outcome.ok,
        reason=outcome.reason,
        outage=outage,
        clients=clients,
        max_attempts=max_attempts,
        base=base,
        cap=cap,
        retry_times=retry_times,
        bin_width=bin_width,
        peaks=peaks,
    )
