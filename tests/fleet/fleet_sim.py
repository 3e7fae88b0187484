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

import redis
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
    breaker: fleet_redis.SharedCircuitBreaker
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


@dataclasses.dataclass(frozen=True)
class Breaker:
    """The shared breaker's configuration."""

    minimum_calls: int = 5
    window_calls: int = 10
    open_duration: float = 1.0
    open_jitter: float = 0.2
    probe_timeout: float = 0.5
    half_open_probes: int = 1


class World:
    """*processes* processes sharing one budget and one breaker through *server_port*, on
    *clock*."""

    def __init__(
        self,
        server_port: int,
        namespace: str,
        clock: seawall.VirtualClock,
        *,
        processes: int = 4,
        interval: float = 0.1,
        budget: Budget = Budget(),
        breaker: Breaker = Breaker(),
        max_attempts: int = 3,
        seed: int = 0,
    ) -> None:
        self.clock = clock
        self.namespace = namespace
        self.interval = interval
        self.config = budget
        self.breaker_config = breaker
        self.max_attempts = max_attempts
        self.server_port = server_port
        self.rng = random.Random(seed)
        self.processes: list[Process] = []
        # Every call and retry, with its virtual time: (time, calls, retries).
        self.history: list[tuple[float, int, int]] = []
        # The breaker as the processes saw it: when probes were granted, and the refusals
        # because every probe slot was taken ("half_open").
        self.probes: list[float] = []
        self.half_open_refusals: list[float] = []
        self.dead_probes = 0
        self.retired: list[Process] = []
        for _ in range(processes):
            self.processes.append(self._spawn())

    def _spawn(self) -> Process:
        clock, budget, breaker = self.clock, self.config, self.breaker_config
        proxy = FlappingProxy(self.server_port)
        fleet = fleet_redis.Fleet(
            proxy.url, namespace=self.namespace, interval=None, timeout=0.5, clock=clock
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
            max_attempts=self.max_attempts,
            backoff=seawall.Backoff.constant(0.0),
            budget=shared,
            clock=clock,
        )
        shared_breaker = fleet_redis.SharedCircuitBreaker(
            fleet,
            "sim",
            rng=random.Random(self.rng.random()),
            **dataclasses.asdict(breaker),
        )
        fleet.sync()  # a process reaches Redis as it starts (when it can)
        return Process(fleet, proxy, shared, policy, shared_breaker, clock.now() + self.interval)

    def call(self, i: int) -> None:
        """One logical call of process *i* to a dependency that is down, under the budget."""
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

    def guarded_call(self, i: int, healthy: bool, die_with_probe: bool = False) -> str:
        """One call of process *i* through the breaker to a dependency that is *healthy* or
        not. With *die_with_probe*, a process granted a probe is killed before it reports
        (and a new process takes its place). Returns what happened."""
        process = self.processes[i]
        breaker = process.breaker
        try:
            permit = breaker.acquire()
        except seawall.CircuitOpen as refused:
            if refused.state == "half_open":
                self.half_open_refusals.append(self.clock.now())
            return f"refused {refused.state}"
        if permit[1]:
            self.probes.append(self.clock.now())
            if die_with_probe:
                self.kill(i)
                self.dead_probes += 1
                return "prober killed"
        breaker.record(permit, None if healthy else ConnectionError("down"))
        return "probe" if permit[1] else "call"

    def kill(self, i: int) -> None:
        """Process *i* dies at once (nothing more reaches Redis from it); a new one starts."""
        old = self.processes[i]
        old.proxy.close()  # its connections die with it
        old.fleet.client.close()
        self.retired.append(old)
        self.processes[i] = self._spawn()

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

    def lose_answer(self, i: int) -> None:
        """The next answer Redis sends process *i* is lost after Redis applied what it
        answers (the process sees its connection reset, as after a timeout)."""
        self.processes[i].proxy.lose_answers = 1

    @property
    def lost_answers(self) -> int:
        return sum(p.proxy.lost for p in self.processes + self.retired)

    def deposits(self) -> int:
        """The requests the shared budget's window on Redis holds now."""
        key = self.processes[0].fleet.keys("budget", "sim", "window")[0]
        with redis.Redis(port=self.server_port, socket_timeout=5.0) as client:
            fields = client.hgetall(key)
        return sum(int(v) for k, v in fields.items() if k.startswith(b"d"))

    def flushall(self) -> None:
        """Redis loses every key (as a restart without persistence would)."""
        with redis.Redis(port=self.server_port, socket_timeout=5.0) as client:
            client.flushall()

    @property
    def calls(self) -> int:
        return sum(p.calls for p in self.processes + self.retired)

    @property
    def retries(self) -> int:
        return sum(p.retries for p in self.processes + self.retired)

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

    def longest_half_open_refusal(self) -> float:
        """The longest time between a probe's grant and a later refusal because every probe
        slot was taken (before the next grant): how long a probe held the breaker half-open."""
        longest = 0.0
        probes = sorted(self.probes)
        j = -1
        for t in sorted(self.half_open_refusals):
            while j + 1 < len(probes) and probes[j + 1] <= t:
                j += 1
            if j >= 0:
                longest = max(longest, t - probes[j])
        return longest

    def close(self) -> None:
        for p in self.processes:
            with contextlib.suppress(Exception):
                p.fleet.close()
            p.proxy.close()
        for p in self.retired:
            with contextlib.suppress(Exception):
                p.fleet.client.close()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the warnings about Redis going away and budgets running out (on purpose)."""
    loggers = [logging.getLogger(name) for name in ("seawall.redis", "seawall")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
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
