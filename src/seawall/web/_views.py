"""The numbers of the backoff and storm views, from seawall's own policies.

Both views run the real :class:`seawall.RetryPolicy` (its sans-I/O
:class:`seawall.lowlevel.RetryState`) on virtual time; the page only draws what these functions
return. Every parameter arrives from a query string: each is validated by the policy objects
themselves (a ``ValueError``/``TypeError`` naming it), and sizes are bounded here so that a
request cannot make the server work for minutes.
"""

from __future__ import annotations

import math
import random
from typing import Any

from seawall import Backoff, Permanent, RetryPolicy, VirtualClock
from seawall.sim._storm import storm_retry_times

__all__ = ["MAX_ATTEMPTS", "MAX_BINS", "MAX_CLIENTS", "backoff_trace", "storm_histogram"]

MAX_ATTEMPTS = 50
"""The most attempts a view runs per call."""
MAX_CLIENTS = 20_000
"""The most clients the storm view runs."""
MAX_BINS = 400
"""The most histogram bins the storm view returns."""

STORM_JITTERS = ("full", "equal", "decorrelated")


class DependencyDown(ConnectionError):
    """The dependency of the demo refused the attempt."""


class Rejected(Permanent):
    """The dependency of the demo refused the request for good (a permanent error)."""


def _bounded(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value!r}")
    return value


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def backoff_trace(
    *,
    base: float = 0.1,
    multiplier: float = 2.0,
    cap: float = 1.6,
    jitter: str = "full",
    max_attempts: int = 6,
    failures: int = 4,
    permanent_at: int = 0,
    timeout: float = 0.0,
    attempt_time: float = 0.05,
    seed: int = 0,
) -> dict[str, Any]:
    """One client's call, attempt by attempt, through :meth:`seawall.RetryPolicy.run`.

    The dependency fails the first *failures* attempts with a transient error, then answers;
    attempt number *permanent_at* (from 1; 0 for never) fails with a permanent error instead.

    Args:
        base: backoff base, seconds.
        multiplier: backoff growth factor.
        cap: the largest un-jittered delay, seconds.
        jitter: ``"none"``, ``"full"``, ``"equal"`` or ``"decorrelated"``.
        max_attempts: attempts in all, the first included.
        failures: how many attempts fail before one succeeds.
        permanent_at: the attempt that fails with a permanent error (0: none).
        timeout: seconds for the whole call, waits included (0: no deadline).
        attempt_time: seconds each attempt takes.
        seed: the seed of the policy's random number generator.

    Returns:
        The parameters and one entry per attempt: ``attempt``, ``started``, ``outcome``,
        ``error``, ``raw`` (the capped, un-jittered delay), ``cap``, ``wait`` (the jittered
        wait the policy chose, ``None`` when no retry followed); then ``succeeded`` and
        ``reason`` (why the policy stopped: ``None`` when the call succeeded).
    """
    max_attempts = _bounded("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
    failures = _bounded("failures", failures, 0, MAX_ATTEMPTS)
    permanent_at = _bounded("permanent_at", permanent_at, 0, MAX_ATTEMPTS)
    seed = _bounded("seed", seed, 0, 2**63)
    backoff = Backoff(base=base, multiplier=multiplier, cap=cap, jitter=jitter)  # type: ignore[arg-type]
    clock = VirtualClock()
    policy = RetryPolicy(
        max_attempts=max_attempts,
        backoff=backoff,
        timeout=timeout or None,
        attempt_timeout=None,
        clock=clock,
        rng=random.Random(seed),
        name="web-backoff",
        hooks=(),
    )
    if not 0.0 <= attempt_time <= 60.0:
        raise ValueError(f"attempt_time must be between 0 and 60, got {attempt_time!r}")
    attempt = 0

    def call() -> str:
        nonlocal attempt
        attempt += 1
        clock.sleep(attempt_time)
        if attempt == permanent_at:
            raise Rejected("the dependency refused the request for good")
        if attempt <= failures:
            raise DependencyDown("connection refused")
        return "ok"

    outcome = policy.run(call)
    steps = []
    for record in outcome.history:
        error = record.error
        steps.append(
            {
                "attempt": record.number,
                "started": record.started,
                "outcome": "succeeded" if error is None else "failed",
                "error": None if error is None else f"{type(error).__name__}: {error}",
                "permanent": isinstance(error, Permanent),
                "raw": backoff.raw(record.number - 1),
                "cap": backoff.cap,
                "wait": record.delay,
            }
        )
    return {
        "params": {
            "base": backoff.base,
            "multiplier": backoff.multiplier,
            "cap": backoff.cap,
            "jitter": backoff.jitter,
            "max_attempts": max_attempts,
            "failures": failures,
            "permanent_at": permanent_at,
            "timeout": _finite(timeout) if timeout else None,
            "attempt_time": attempt_time,
            "seed": seed,
        },
        "steps": steps,
        "succeeded": outcome.ok,
        "reason": outcome.reason,
        "total_delay": outcome.total_delay,
    }


def _retry_times(policy: RetryPolicy, clients: int) -> list[float]:
    """When each retry of *clients* clients starts, all having failed at t=0 against a
    dependency that stays down: the simulator's storm loop, on the real state machine."""
    return storm_retry_times(policy, clients)


def storm_histogram(
    *,
    clients: int = 1000,
    base: float = 0.1,
    multiplier: float = 2.0,
    cap: float = 2.0,
    jitter: str = "full",
    max_attempts: int = 5,
    bins: int = 60,
    seed: int = 0,
) -> dict[str, Any]:
    """When *clients* clients retry after failing at the same instant: no jitter against jitter.

    Args:
        clients: how many clients fail together.
        base: backoff base, seconds.
        multiplier: backoff growth factor.
        cap: the largest un-jittered delay, seconds.
        jitter: the jitter compared with none: ``"full"``, ``"equal"``, ``"decorrelated"``, or
            ``"all"`` for the three.
        max_attempts: attempts per client, the first included.
        bins: histogram bins over the time of the last retry.
        seed: the seed.

    Every kind is counted in the same bins, so that their heights compare like with like: the
    bins cover the time until the last retry without jitter (full and equal jitter never retry
    later than that), and the retries after it (decorrelated jitter's long tail) are counted
    apart, as ``overflow``, instead of widening every bin to the tail's end.

    Returns:
        The parameters, ``bin_width``, ``end`` (where the bins end) and, per jitter kind
        (``"none"`` first), the retry count per bin (``counts``), the most retries in one bin
        (``peak``), the retries after ``end`` (``overflow``), the last retry's time (``last``)
        and the number of retries (``retries``).
    """
    clients = _bounded("clients", clients, 1, MAX_CLIENTS)
    max_attempts = _bounded("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
    bins = _bounded("bins", bins, 1, MAX_BINS)
    seed = _bounded("seed", seed, 0, 2**63)
    if jitter == "all":
        kinds: tuple[str, ...] = ("none", *STORM_JITTERS)
    elif jitter in STORM_JITTERS:
        kinds = ("none", jitter)
    else:
        raise ValueError(
            f"jitter must be one of {', '.join((*STORM_JITTERS, 'all'))}; got {jitter!r}"
        )
    if clients * (max_attempts - 1) * len(kinds) > 400_000:
        raise ValueError(
            f"clients x retries is too large for one page ({clients} clients, {max_attempts} "
            "attempts); lower one of them"
        )
    times: dict[str, list[float]] = {}
    for kind in kinds:
        policy = RetryPolicy(
            max_attempts=max_attempts,
            backoff=Backoff(base=base, multiplier=multiplier, cap=cap, jitter=kind),  # type: ignore[arg-type]
            rng=random.Random(f"{seed}:{kind}"),
            name=f"web-storm-{kind}",
            hooks=(),
        )
        times[kind] = _retry_times(policy, clients)
    # Without jitter every client retries at the same instants: the last of them ends the bins.
    end = max(times["none"], default=0.0)
    width = end / bins if end > 0.0 else 1.0
    limit = end * (1 + 1e-9)  # the same instant, summed in another order
    series = []
    for kind in kinds:
        counts = [0] * bins
        overflow = 0
        for t in times[kind]:
            if t > limit:
                overflow += 1
            else:
                counts[min(bins - 1, int(t / width))] += 1
        series.append(
            {
                "jitter": kind,
                "counts": counts,
                "peak": max(counts),
                "overflow": overflow,
                "last": max(times[kind], default=0.0),
                "retries": len(times[kind]),
            }
        )
    return {
        "params": {
            "clients": clients,
            "base": base,
            "multiplier": multiplier,
            "cap": cap,
            "jitter": jitter,
            "max_attempts": max_attempts,
            "bins": bins,
            "seed": seed,
        },
        "bin_width": width,
        "end": end,
        "series": series,
    }
