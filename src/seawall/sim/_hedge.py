"""Scenario ``hedge``: fan-out requests to servers with a heavy latency tail, hedged or not.

A user request fans out to *fanout* leaf servers and answers when the last leaf has answered,
so one slow leaf in ten makes the whole request slow: the tail at scale (Dean and Barroso, "The
Tail at Scale", CACM 2013). Each leaf call goes through a real :class:`~seawall.Hedge` whose delay
is the live quantile of a real :class:`~seawall.LatencyTracker`, run by the hedge's own
asyncio driver, ``Hedge.acall``, on an event loop whose time is virtual
(:class:`seawall.sim._loop.SimEventLoop`, asyncio without a selector): its timers, its
cancellation of the losing attempts and its calls to the sans-I/O methods are the ones
production runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from seawall._core import validate as _validate
from seawall._core.aio import VirtualEventLoop
from seawall._core.clock import VirtualClock
from seawall._strategies.hedge import Hedge, HedgeHook
from seawall._strategies.latency import LatencyTracker
from seawall.sim._loop import SimEventLoop
from seawall.sim._metrics import hedge_hooks
from seawall.sim._util import check_volume, isolated, simulate, trial_rng

__all__ = ["HEDGE_PERCENTILES", "HedgeResult", "HedgeRow", "hedge"]

#: The percentiles each row reports in ``percentiles`` (for tables and plots).
HEDGE_PERCENTILES: tuple[float, ...] = (0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)


@dataclasses.dataclass(frozen=True, slots=True)
class HedgeRow:
    """One strategy's run: no hedging, or hedging at a live quantile of leaf latency.

    Attributes:
        strategy: ``"none"``, or ``"p95"`` for hedging at the live 95th percentile, etc.
        quantile: the hedge's quantile (``None`` without hedging).
        p50: median latency of user requests (seconds).
        p99: 99th percentile of user requests.
        p999: 99.9th percentile of user requests.
        leaf_p50: median latency of single leaf calls (hedged calls included, as answered).
        leaf_p99: 99th percentile of leaf calls.
        leaf_p999: 99.9th percentile of leaf calls.
        percentiles: user-request latency at each of :data:`HEDGE_PERCENTILES`.
        leaf_calls: leaf calls made (requests x fanout).
        attempts: requests the leaf servers received (hedges included).
        extra_load: ``attempts / leaf_calls - 1``: the load hedging added.
        hedges: extra attempts started.
        wins: leaf calls answered by an extra attempt.
    """

    strategy: str
    quantile: float | None
    p50: float
    p99: float
    p999: float
    leaf_p50: float
    leaf_p99: float
    leaf_p999: float
    percentiles: tuple[float, ...]
    leaf_calls: int
    attempts: int
    extra_load: float
    hedges: int
    wins: int


@dataclasses.dataclass(frozen=True, slots=True)
class HedgeResult:
    """The result of :func:`hedge`."""

    rows: tuple[HedgeRow, ...]
    requests: int
    fanout: int
    rate: float
    median: float
    tail_probability: float
    max_extra_load: float | None
    seed: int
    events: int

    def get(self, strategy: str) -> HedgeRow:
        for r in self.rows:
            if r.strategy == strategy:
                return r
        raise KeyError(strategy)

    @property
    def p99_cut(self) -> float:
        """How many times shorter the user p99 is with the first hedging strategy than without."""
        hedged = [r for r in self.rows if r.quantile is not None]
        base = [r for r in self.rows if r.quantile is None]
        if not hedged or not base or hedged[0].p99 <= 0:
            return math.nan
        return base[0].p99 / hedged[0].p99


def _strategy_name(q: float | None) -> str:
    if q is None:
        return "none"
    return "p" + f"{q * 100:g}".replace(".", "")


def _percentile(ordered: Sequence[float], q: float) -> float:
    # Nearest rank on sorted data: the smallest value with at least q of the samples at or below.
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _run(quantile: float | None, **options: Any) -> tuple[HedgeRow, int]:
    """One strategy's run: :func:`_drive` (whose keyword arguments *options* are) on a fresh
    simulated loop."""
    loop = _LOOP()
    try:
        return loop.run_until_complete(_drive(quantile, loop.clock, **options))
    finally:
        loop.close()


# The loop the driver runs on, and whether attempts are futures (not tasks). benchmarks/
# sim_speed.py sets VirtualEventLoop and tasks to measure the slower configuration beside.
_LOOP: Callable[[], SimEventLoop | VirtualEventLoop] = SimEventLoop
_FUTURE_ATTEMPTS = True


def _answer(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled loser's answer arrives to no one
        future.set_result(None)


async def _drive(
    quantile: float | None,
    clock: VirtualClock,
    *,
    requests: int,
    fanout: int,
    rate: float,
    latency: Callable[[random.Random], float],
    max_attempts: int,
    max_extra_load: float | None,
    min_samples: int,
    seed: int,
    hooks: Sequence[HedgeHook],
) -> tuple[HedgeRow, int]:
    # The real driver, Hedge.acall, on an asyncio loop whose time is virtual: its timers, its
    # cancellation of the losers and its calls to the sans-I/O methods are production's.
    # The same arrivals and first-attempt latencies for every strategy (paired comparison);
    # hedges draw from a stream of their own (the "replicas" acall hands each attempt).
    arrivals = trial_rng(seed, "hedge", "arrivals")
    primary = trial_rng(seed, "hedge", "primary")
    backup = trial_rng(seed, "hedge", "backup", _strategy_name(quantile))
    policy: Hedge | None = None
    if quantile is not None:
        tracker = LatencyTracker(clock=clock)
        policy = Hedge(
            tracker,
            quantile=quantile,
            max_attempts=max_attempts,
            min_samples=min_samples,
            max_extra_load=max_extra_load,
            replicas=(primary, *([backup] * (max_attempts - 1))),
            clock=clock,
            name=f"hedge-{_strategy_name(quantile)}",
            hooks=(*hooks, *hedge_hooks()),
        )
    request_latency: list[float] = []
    leaf_latency: list[float] = []
    sent = 0
    sleep = asyncio.sleep
    loop = asyncio.get_running_loop()
    answer = _answer

    def attempt(rng: random.Random) -> asyncio.Future[None]:
        # The leaf server: a future its answer resolves after the attempt's latency. The
        # driver awaits it as it would a coroutine (ensure_future keeps a future as it is),
        # without a task and a coroutine per attempt; cancelling a loser cancels the future.
        nonlocal sent
        sent += 1  # the server received it, whether it wins, loses or is cancelled
        future = loop.create_future()
        loop.call_at(loop.time() + latency(rng), answer, future)
        return future

    async def attempt_task(rng: random.Random) -> None:
        # The same server as a coroutine, which the driver runs as a task (the slower way,
        # kept to check that both give the same run, and to measure the difference).
        nonlocal sent
        sent += 1
        await sleep(latency(rng))

    call: Callable[[random.Random], Awaitable[None]] = attempt if _FUTURE_ATTEMPTS else attempt_task

    async def leaf(started: float) -> None:
        if policy is None:
            await call(primary)
        else:
            await policy.acall(call)
        leaf_latency.append(clock.now() - started)

    async def request() -> None:
        started = clock.now()
        await asyncio.gather(*(leaf(started) for _ in range(fanout)))
        request_latency.append(clock.now() - started)

    running = []
    for n in range(requests):
        running.append(asyncio.ensure_future(request()))
        if n + 1 < requests:
            await sleep(arrivals.expovariate(rate))
    await asyncio.gather(*running)
    request_latency.sort()
    leaf_latency.sort()
    calls = requests * fanout
    row = HedgeRow(
        strategy=_strategy_name(quantile),
        quantile=quantile,
        p50=_percentile(request_latency, 0.5),
        p99=_percentile(request_latency, 0.99),
        p999=_percentile(request_latency, 0.999),
        leaf_p50=_percentile(leaf_latency, 0.5),
        leaf_p99=_percentile(leaf_latency, 0.99),
        leaf_p999=_percentile(leaf_latency, 0.999),
        percentiles=tuple(_percentile(request_latency, q) for q in HEDGE_PERCENTILES),
        leaf_calls=calls,
        attempts=sent,
        extra_load=sent / calls - 1.0,
        hedges=0 if policy is None else policy.hedges,
        wins=0 if policy is None else policy.wins,
    )
    # Events: arrivals, and each attempt's start and answer (or cancellation).
    return row, requests + 2 * sent


@isolated
def hedge(
    *,
    requests: int = 2000,
    fanout: int = 10,
    quantiles: Sequence[float] = (0.95, 0.99),
    rate: float = 100.0,
    median: float = 0.010,
    sigma: float = 0.4,
    tail_probability: float = 0.03,
    tail_scale: float = 0.1,
    tail_shape: float = 1.2,
    max_attempts: int = 2,
    max_extra_load: float | None = 0.1,
    min_samples: int = 20,
    seed: int = 0,
    hooks: Sequence[HedgeHook] = (),
    progress: Callable[[int, int], None] | None = None,
) -> HedgeResult:
    """Fan-out requests against heavy-tailed leaf servers, without and with hedging.

    Requests arrive as a Poisson process at *rate* per second; each calls *fanout* leaves at
    once and answers when all have. A leaf attempt takes a log-normal time (median *median*,
    shape *sigma*); with probability *tail_probability* a stall of ``tail_scale *
    Pareto(tail_shape)`` seconds is added (garbage collection, a busy disk, a queue). Leaves are
    independent replicas: a hedge sees a fresh draw, and load does not change latency.

    Strategies: ``none`` (one attempt per leaf call), then for each of *quantiles* a
    :class:`~seawall.Hedge` at that live quantile of leaf latency (a
    :class:`~seawall.LatencyTracker` fed with each answered call), with *max_attempts* and
    *max_extra_load*. The runs share their arrivals and first-attempt latencies.

    Args:
        requests: user requests.
        fanout: leaf calls per request.
        quantiles: hedge delays, as live quantiles of leaf latency (0.95 for p95).
        rate: user requests per second.
        median: median latency of a leaf attempt (seconds).
        sigma: log-normal shape of the body.
        tail_probability: probability that an attempt stalls.
        tail_scale: the shortest stall (seconds).
        tail_shape: the Pareto shape of stalls (lower: heavier).
        max_attempts: attempts per leaf call, the first included.
        max_extra_load: the hedge's bound on extra attempts per call (``None``: unbounded).
        min_samples: samples the tracker needs before the hedge hedges on time.
        seed: the seed.
        hooks: given to every hedge (e.g. ``MetricsHook(counters).hedge_hook``).
        progress: called with (runs done, runs in all).

    Returns:
        A :class:`HedgeResult`.
    """
    requests = _validate.count("requests", requests, minimum=1)
    fanout = _validate.count("fanout", fanout, minimum=1)
    qs: list[float] = []
    for q in quantiles:
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q < 1:
            raise ValueError(f"quantiles must be numbers between 0 and 1, got {q!r}")
        qs.append(float(q))
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    median = _validate.seconds("median", median, zero=False, finite=True)
    sigma = _validate.number("sigma", sigma, minimum=0.0, finite=True)
    tail_probability = _validate.ratio("tail_probability", tail_probability)
    tail_scale = _validate.number("tail_scale", tail_scale, minimum=0.0, above=True, finite=True)
    tail_shape = _validate.number("tail_shape", tail_shape, minimum=0.0, above=True, finite=True)
    max_attempts = _validate.count("max_attempts", max_attempts, minimum=1)
    if max_extra_load is not None:
        bound = _validate.number("max_extra_load", max_extra_load, minimum=0.0, finite=True)
        if bound > max_attempts - 1:
            raise ValueError(
                f"max_extra_load must be <= max_attempts - 1 ({max_attempts - 1}), "
                f"got {max_extra_load!r}"
            )
        max_extra_load = bound
    min_samples = _validate.count("min_samples", min_samples, minimum=0)
    seed = _validate.count("seed", seed, minimum=0)
    check_volume("requests * fanout * max_attempts", requests * fanout * max_attempts)
    mu = math.log(median)

    def latency(rng: random.Random) -> float:
        body = rng.lognormvariate(mu, sigma)
        if rng.random() < tail_probability:
            return body + tail_scale * rng.paretovariate(tail_shape)
        return body

    strategies: list[float | None] = [None, *qs]
    rows: list[HedgeRow] = []
    events = 0
    if progress is not None:
        progress(0, len(strategies))
    for i, strategy in enumerate(strategies):
        row, n = simulate(
            _run,
            strategy,
            requests=requests,
            fanout=fanout,
            rate=rate,
            latency=latency,
            max_attempts=max_attempts,
            max_extra_load=max_extra_load,
            min_samples=min_samples,
            seed=seed,
            hooks=hooks,
        )
        rows.append(row)
        events += n
        if progress is not None:
            progress(i + 1, len(strategies))
    return HedgeResult(
        rows=tuple(rows),
        requests=requests,
        fanout=fanout,
        rate=rate,
        median=median,
        tail_probability=tail_probability,
        max_extra_load=max_extra_load,
        seed=seed,
        events=events,
    )
