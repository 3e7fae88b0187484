"""A fleet of processes on virtual time, each with its own client and its own flapping proxy in
front of one real redis-server: the test (or a seeded schedule) decides every call, every
sync, every flap and every loss of Redis's data, so a run replays exactly from its seed.

Each "process" is a :class:`~seawall.redis.Fleet` without a sync thread (``interval=None``)
whose syncs the world makes every ``interval`` of virtual time, as the thread would; all of
them, and the scripts on Redis, read one :class:`~seawall.VirtualClock`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections.abc import Iterator

from flapping_proxy import FlappingProxy

import seawall
from seawall import redis as fleet_redis


def dead() -> None:
    raise ConnectionError("the dependency is down")


@dataclasses.dataclass
class Process:
    fleet: fleet_redis.Fleet
    proxy: FlappingProxy
    budget: fleet_redis.SharedRetryBudget
    policy: seawall.RetryPolicy
    next_sync: float
    calls: int = 0
    retries: int = 0


@dataclasses.dataclass(frozen=True)
class Budget:
    """The shared budget's configuration, and the bounds it promises."""

    ratio: float = 0.1
    min_per_second: float = 3.0
    window: float = 10.0
    lease: int = 4

    @property
    def floor(self) -> float:
        return self.min_per_second * self.window


class World:
    """*processes* processes sharing one budget through *server_port*, on *clock*."""

    def __init__(
        self,
        server_port: int,
        namespace: str,
        clock: seawall.VirtualClock,
        *,
        processes: int = 4,
        interval: float = 0.1,
        budget: Budget = Budget(),
        max_attempts: int = 3,
    ) -> None:
        self.clock = clock
        self.interval = interval
        self.config = budget
        self.max_attempts = max_attempts
        self.server_port = server_port
        self.processes: list[Process] = []
        # Every call and retry, with its virtual time: (time, calls, retries).
        self.history: list[tuple[float, int, int]] = []
        for _ in range(processes):
            proxy = FlappingProxy(server_port)
            fleet = fleet_redis.Fleet(
                proxy.url, namespace=namespace, interval=None, timeout=0.5, clock=clock
            )
            shared = fleet_redis.SharedRetryBudget(
                fleet,
                "sim",
                ratio=budget.ratio,
                min_per_second=budget.min_per_second,
                window=budget.window,
                lease=budget.lease,
            )
            policy = seawall.RetryPolicy(
                max_attempts=max_attempts,
                backoff=seawall.Backoff.constant(0.0),
                budget=shared,
                clock=clock,
            )
            self.processes.append(Process(fleet, proxy, shared, policy, clock.now() + interval))

    def call(self, i: int) -> None:
        """One logical call of process *i* to a dependency that is down."""
        process = self.processes[i]
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            dead()

        with contextlib.suppress(ConnectionError):
            process.policy.call(attempt)
        process.calls += 1
        process.retries += attempts - 1
        self.history.append((self.clock.now(), 1, attempts - 1))

    def advance(self, seconds: float) -> None:
        """Move virtual time on, syncing each process whenever its interval is up."""
        end = self.clock.now() + seconds
        while True:
            due = min(p.next_sync for p in self.processes)
            if due > end:
                break
            self.clock.sleep(max(0.0, due - self.clock.now()))
            for p in self.processes:
                if p.next_sync <= self.clock.now():
                    p.fleet.sync()
                    p.next_sync += self.interval
        self.clock.sleep(max(0.0, end - self.clock.now()))

    def set_up(self, i: int, up: bool) -> None:
        self.processes[i].proxy.set_up(up)

    @property
    def calls(self) -> int:
        return sum(p.calls for p in self.processes)

    @property
    def retries(self) -> int:
        return sum(p.retries for p in self.processes)

    def worst_excess(self, allowance: float) -> tuple[float, float]:
        """The largest excess, over any span of at most one window, of the retries over
        ``ratio * calls + allowance``, and where it ends (virtual time)."""
        window, ratio = self.config.window, self.config.ratio
        worst, at = -float("inf"), 0.0
        history = self.history
        for j, (end, _, _) in enumerate(history):
            calls = retries = 0
            for start, c, r in reversed(history[: j + 1]):
                if end - start > window:
                    break
                calls += c
                retries += r
                excess = retries - (ratio * calls + allowance)
                if excess > worst:
                    worst, at = excess, end
        return worst, at

    def close(self) -> None:
        for p in self.processes:
            with contextlib.suppress(Exception):
                p.fleet.close()
            p.proxy.close()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the fleet's warnings about Redis going away (the runs flap on purpose)."""
    logger = logging.getLogger("seawall.redis")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def local_retries(calls: int, budget: Budget, max_attempts: int, clock_start: float) -> int:
    """What a plain local RetryBudget allows one process making *calls* calls, 10 ms apart."""
    clock = seawall.VirtualClock(start=clock_start)
    local = seawall.RetryBudget(budget.ratio, budget.min_per_second, budget.window, clock=clock)
    policy = seawall.RetryPolicy(
        max_attempts=max_attempts, backoff=seawall.Backoff.constant(0.0), budget=local, clock=clock
    )
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        dead()

    for _ in range(calls):
        with contextlib.suppress(ConnectionError):
            policy.call(attempt)
        clock.sleep(0.01)
    return attempts - calls


def seeded(seed: int) -> random.Random:
    return random.Random(seed)
