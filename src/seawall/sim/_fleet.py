"""Scenario ``fleet``: amplification against the number of client processes, with a budget
per process and with one budget for the fleet."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

from seawall._core import validate as _validate
from seawall._core.clock import VirtualClock
from seawall._strategies.backoff import Backoff
from seawall._strategies.budget import RetryBudget
from seawall._strategies.retry import RetryPolicy
from seawall.sim._util import isolated, simulate, trial_rng

__all__ = ["FLEET_STRATEGIES", "FleetResult", "FleetRow", "fleet"]

FLEET_STRATEGIES: tuple[str, ...] = ("per_process", "shared", "shared_synced")


class DependencyDown(ConnectionError):
    """The dependency failed the call."""


@dataclasses.dataclass(frozen=True, slots=True)
class FleetRow:
    """Load on the dependency for one fleet size and one strategy.

    Attributes:
        processes: client processes in the fleet.
        strategy: one of :data:`FLEET_STRATEGIES`.
        requests: logical calls the fleet made.
        calls: calls the dependency received.
        per_request: ``calls / requests``: the amplification.
        bound: what the arithmetic predicts (see :func:`fleet`).
    """

    processes: int
    strategy: str
    requests: int
    calls: int
    per_request: float
    bound: float


@dataclasses.dataclass(frozen=True, slots=True)
class FleetResult:
    """The result of :func:`fleet`."""

    attempts: int
    rate: float
    duration: float
    ratio: float
    min_per_second: float
    window: float
    sync_interval: float
    rows: tuple[FleetRow, ...]

    def row(self, strategy: str, processes: int) -> FleetRow:
        for r in self.rows:
            if r.strategy == strategy and r.processes == processes:
                return r
        raise KeyError((strategy, processes))


@isolated
def fleet(
    processes: Sequence[int] = (1, 2, 4, 8, 16, 32),
    *,
    attempts: int = 3,
    rate: float = 2.0,
    duration: float = 60.0,
    ratio: float = 0.1,
    min_per_second: float = 10.0,
    window: float = 10.0,
    sync_interval: float = 0.1,
    seed: int = 0,
) -> FleetResult:
    """A fleet of client processes calls a dependency that is down.

    Each process sends ``rate`` calls a second for ``duration`` seconds (virtual time), each
    through a real :class:`~seawall.RetryPolicy` with ``max_attempts=attempts``. Strategies:

    - ``per_process``: a :class:`~seawall.RetryBudget` in each process. Each process may add
      ``ratio`` of its calls plus its own floor of ``min_per_second``: the fleet's
      amplification is about ``1 + ratio + min_per_second / rate`` (capped at ``attempts``)
      whatever the fleet's size.
    - ``shared``: one budget for the whole fleet (what ``seawall.redis.SharedRetryBudget``
      shares): one floor for the fleet, so about ``1 + ratio + min_per_second /
      (processes * rate)``.
    - ``shared_synced``: the same, with each process's deposits reaching the fleet's budget
      only every ``sync_interval`` (the Redis fleet's flush), retries decided at once.

    The floor is counted per window over a run that starts with a full one, so the bounds use
    ``min_per_second * (duration + window) / duration``.

    Returns:
        A :class:`FleetResult`.
    """
    sizes = tuple(_validate.count("processes", p, minimum=1) for p in processes)
    if not sizes:
        raise ValueError("processes must name at least one fleet size")
    attempts = _validate.count("attempts", attempts, minimum=1)
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    duration = _validate.number("duration", duration, minimum=0.0, above=True, finite=True)
    ratio = _validate.ratio("ratio", ratio)
    # The budget's own bound, checked here: refused by the budget, it would stop the run midway.
    min_per_second = _validate.number(
        "min_per_second", min_per_second, minimum=0.0, maximum=1e12, finite=True
    )
    window = _validate.number("window", window, minimum=0.0, above=True, finite=True)
    sync_interval = _validate.number(
        "sync_interval", sync_interval, minimum=0.0, above=True, finite=True
    )
    seed = _validate.count("seed", seed, minimum=0)
    if max(sizes) * rate * duration > 10**6:
        raise ValueError("processes * rate * duration must be <= 10**6 calls")
    rows = []
    floor = min_per_second * (duration + window) / duration
    for size in sizes:
        for strategy in FLEET_STRATEGIES:
            requests, calls = simulate(
                _run, strategy, size, attempts, rate, duration, ratio, min_per_second, window,
                sync_interval, seed,
            )  # fmt: skip
            share = floor / rate if strategy == "per_process" else floor / (size * rate)
            bound = min(float(attempts), 1.0 + ratio + share)
            rows.append(FleetRow(size, strategy, requests, calls, calls / requests, bound))
    return FleetResult(
        attempts, rate, duration, ratio, min_per_second, window, sync_interval, tuple(rows)
    )


class _Deferred:
    """A process's view of the fleet's budget when deposits are sent every sync interval."""

    def __init__(self, shared: RetryBudget, clock: VirtualClock, interval: float) -> None:
        self.shared = shared
        self.clock = clock
        self.interval = interval
        self.pending = 0
        self.next_sync = clock.now() + interval

    def flush(self) -> None:
        for _ in range(self.pending):
            self.shared.on_request()
        self.pending = 0

    def on_request(self) -> None:
        if self.clock.now() >= self.next_sync:
            self.flush()
            self.next_sync = self.clock.now() + self.interval
        self.pending += 1

    def allow_retry(self, error: BaseException | None = None) -> bool:
        return self.shared.allow_retry(error)

    def on_success(self) -> None:
        pass

    def on_failure(self, error: BaseException) -> None:
        pass


def _run(
    strategy: str,
    size: int,
    attempts: int,
    rate: float,
    duration: float,
    ratio: float,
    min_per_second: float,
    window: float,
    sync_interval: float,
    seed: int,
) -> tuple[int, int]:
    clock = VirtualClock()
    rng = trial_rng(seed, "fleet", strategy, size)
    calls = 0

    def dependency() -> None:
        nonlocal calls
        calls += 1
        raise DependencyDown("the dependency is down")

    def budget_for(shared: RetryBudget | None) -> object:
        if strategy == "per_process":
            return RetryBudget(ratio, min_per_second, window, clock=clock)
        assert shared is not None
        if strategy == "shared":
            return shared
        return _Deferred(shared, clock, sync_interval)

    shared = RetryBudget(ratio, min_per_second, window, clock=clock)
    policies = [
        RetryPolicy(
            max_attempts=attempts,
            backoff=Backoff.constant(0.0),
            budget=budget_for(shared),  # type: ignore[arg-type]
            clock=clock,
            rng=rng,
            name="fleet",
            hooks=(),
        )
        for _ in range(size)
    ]
    steps = round(duration * rate)
    requests = 0
    for step in range(steps):
        # The processes' calls of one tick, spread over the tick in a seeded order.
        order = list(range(size))
        rng.shuffle(order)
        for i, p in enumerate(order):
            clock.advance(max(0.0, step / rate + i / (size * rate) - clock.now()))
            requests += 1
            with contextlib.suppress(DependencyDown):
                policies[p].call(dependency)
    return requests, calls
