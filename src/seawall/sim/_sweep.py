"""Scenario ``sweep``: success rate and load of retry strategies as the failure rate grows."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence

from seawall._core import validate as _validate
from seawall._core.errors import Overloaded
from seawall._strategies.backoff import Backoff
from seawall._strategies.breaker import CircuitBreaker, Permit
from seawall._strategies.budget import AdaptiveThrottle, Budget, RetryBudget, TokenBucket
from seawall._strategies.retry import RetryPolicy, RetryState
from seawall.sim._brooker import RetryBreaker, RetryTokenBucket
from seawall.sim._engine import Engine, SimClock
from seawall.sim._metrics import breaker_hooks, retry_hooks
from seawall.sim._util import MAX_DURATION, check_volume, isolated, parallel_map, trial_rng

__all__ = ["SWEEP_STRATEGIES", "SweepResult", "SweepRow", "sweep"]

SWEEP_STRATEGIES: tuple[str, ...] = (
    "no_retries",
    "retries_3",
    "retry_budget",
    "token_bucket",
    "adaptive_throttle",
    "breaker",
    "brooker_bucket",
    "brooker_breaker",
)
#: The strategies a sweep compares unless told otherwise (seawall's own, and none).
DEFAULT_SWEEP_STRATEGIES: tuple[str, ...] = SWEEP_STRATEGIES[:6]
DEFAULT_FAILURE_RATES: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75)
_BROOKER = frozenset({"brooker_bucket", "brooker_breaker"})
_BUCKET_ATTEMPTS = 1_000


class AttemptFailed(ConnectionError):
    """The simulated dependency failed the attempt."""


@dataclasses.dataclass(frozen=True, slots=True)
class SweepRow:
    """One strategy at one failure rate and one number of clients.

    Attributes:
        strategy: one of :data:`SWEEP_STRATEGIES`.
        failure_rate: the probability that an attempt fails.
        clients: how many clients share the load (each has its own policy and budget).
        requests: logical requests.
        success: the fraction of requests that finally succeeded.
        load: attempts sent per request (1.0 means no extra load).
        throttled: requests the adaptive throttle rejected locally, or attempts an open
            breaker refused to send.
    """

    strategy: str
    failure_rate: float
    clients: int
    requests: int
    success: float
    load: float
    throttled: int


@dataclasses.dataclass(frozen=True, slots=True)
class SweepResult:
    """The result of :func:`sweep`: ``rows`` over failure rates, ``splits`` over client counts."""

    rows: tuple[SweepRow, ...]
    splits: tuple[SweepRow, ...]
    rate: float
    duration: float
    seed: int

    def row(self, strategy: str, failure_rate: float) -> SweepRow:
        for r in self.rows:
            if r.strategy == strategy and r.failure_rate == failure_rate:
                return r
        raise KeyError((strategy, failure_rate))


# A request in flight: its retry decisions and its client's breaker (if any).
_Req = tuple[RetryState, CircuitBreaker | None]


def _policy(strategy: str, clock: SimClock, rng: random.Random) -> RetryPolicy:
    budget: Budget | None = None
    if strategy == "retry_budget":
        budget = RetryBudget(clock=clock)
    elif strategy == "token_bucket":
        budget = TokenBucket()
    elif strategy == "adaptive_throttle":
        budget = AdaptiveThrottle(clock=clock, rng=rng)
    elif strategy == "brooker_bucket":
        budget = RetryTokenBucket()
    elif strategy == "brooker_breaker":
        budget = RetryBreaker()
    elif strategy not in SWEEP_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(SWEEP_STRATEGIES)}; got {strategy!r}")
    if strategy == "brooker_bucket":
        # The source's bucket limits retries by its tokens alone; a cap far above anything
        # the tokens allow keeps the policy's own count out of the way.
        attempts = _BUCKET_ATTEMPTS
    else:
        attempts = 1 if strategy == "no_retries" else 4
    return RetryPolicy(
        max_attempts=attempts,
        # Brooker's limiters run as in his simulator: the retry leaves as the failure comes
        # back (retry_sim.py's run_sims: no backoff); seawall's own back off with full jitter.
        backoff=Backoff.constant(0.0) if strategy in _BROOKER else Backoff(base=0.05, cap=1.0),
        budget=budget,
        rng=rng,
        name=f"sweep-{strategy}",
        hooks=retry_hooks(),
    )


def _run(args: tuple[str, float, int, float, float, float, int]) -> SweepRow:
    strategy, p, clients, total_rate, duration, hop_mean, seed = args
    rng = trial_rng(seed, "sweep", strategy, p, clients)
    engine = Engine()
    clock = SimClock(engine)
    at = engine.at
    expo = rng.expovariate
    rand = rng.random
    per_client = total_rate / clients
    requests = 0
    succeeded = 0
    attempts = 0
    throttled = 0

    def attempt(req: _Req, now: float) -> None:
        nonlocal attempts, throttled
        state, breaker = req
        permit: Permit | None = None
        if breaker is not None:
            try:
                permit = breaker.acquire()
            except Overloaded as err:  # CircuitOpen: fail fast, send nothing
                throttled += 1
                state.on_error(err, now)  # never retried: the policy gives up
                return
        attempts += 1
        state.begin_attempt(now)
        # Two hops, each Exp(mean hop_mean); the attempt fails independently with probability p.
        at(now + expo(1.0 / hop_mean) + expo(1.0 / hop_mean), on_answer, (req, permit))

    def on_answer(arg: tuple[_Req, Permit | None]) -> None:
        nonlocal succeeded
        req, permit = arg
        state, breaker = req
        now = engine.now
        if rand() >= p:
            if breaker is not None and permit is not None:
                breaker.record(permit)
            state.on_success(now)
            succeeded += 1
            return
        error = AttemptFailed("attempt failed")
        if breaker is not None and permit is not None:
            breaker.record(permit, error)
        delay = state.on_error(error, now)
        if delay is None:
            return
        if breaker is None:
            # The next attempt touches only this request's state: start it without an event.
            attempt(req, now + delay)
        else:
            # The breaker is shared and reads the time: ask it at the retry's own instant.
            at(now + delay, retry_now, req)

    def retry_now(req: _Req) -> None:
        attempt(req, engine.now)

    def on_arrival(client: tuple[RetryPolicy, CircuitBreaker | None]) -> None:
        nonlocal requests, throttled
        policy, breaker = client
        now = engine.now
        requests += 1
        try:
            state = policy.new_state(now)
        except Overloaded:  # the adaptive throttle rejected the request locally
            throttled += 1
        else:
            attempt((state, breaker), now)
        # Open loop: Poisson arrivals whatever happens to earlier requests.
        nxt = now + expo(per_client)
        if nxt < duration:
            at(nxt, on_arrival, client)

    for _ in range(clients):
        policy = _policy(strategy, clock, rng)
        breaker = None
        if strategy == "breaker":
            # resilience4j-style defaults, but a 1 s open period: the run lasts only seconds.
            breaker = CircuitBreaker(
                open_duration=1.0,
                clock=clock,
                rng=rng,
                name=f"sweep-{strategy}",
                hooks=breaker_hooks(),
            )
        first = expo(per_client)
        if first < duration:  # the first arrival too falls inside the run, or not at all
            at(first, on_arrival, (policy, breaker))
    engine.run()
    return SweepRow(
        strategy,
        p,
        clients,
        requests,
        succeeded / requests if requests else math.nan,
        attempts / requests if requests else math.nan,
        throttled,
    )


@isolated
def sweep(
    clients: int = 100,
    *,
    rate: float = 10.0,
    duration: float = 10.0,
    failure_rates: Sequence[float] = DEFAULT_FAILURE_RATES,
    strategies: Sequence[str] = DEFAULT_SWEEP_STRATEGIES,
    splits: Sequence[int] = (10, 100, 1000),
    split_failure_rate: float = 0.5,
    hop_mean: float = 0.010,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Compare retry strategies as the probability of failure grows.

    *clients* open-loop clients send Poisson requests at *rate* per second each for *duration*
    seconds. Each attempt fails independently with probability p; each hop takes
    Exp(mean *hop_mean*). Each client has its own policy (and budget): ``no_retries``
    (one attempt), ``retries_3`` (up to 3 retries, full-jitter backoff), and the same with a
    :class:`~seawall.RetryBudget`, a :class:`~seawall.TokenBucket` or an
    :class:`~seawall.AdaptiveThrottle`, each with its defaults, or with a
    :class:`~seawall.CircuitBreaker` per client (defaults, but open for 1 s) in front. Two more
    by name: ``brooker_bucket`` and ``brooker_breaker``, the retry token bucket and the
    retry-only breaker of Brooker's 2022 retry simulation as its simulator runs them
    (``seawall.sim._brooker``: no backoff; the bucket of 5 tokens, 0.1 per call).

    The *splits* runs keep the total load (``clients * rate``) and spread it over other numbers
    of clients at ``split_failure_rate``: budgets are per client, and the RetryBudget's floor of
    retries per second lets a quiet client retry freely.

    Args:
        clients: the number of clients.
        rate: requests per second per client.
        duration: seconds of arrivals (retries may run past it).
        failure_rates: the values of p.
        strategies: a subset of :data:`SWEEP_STRATEGIES`.
        splits: client counts for the split runs (empty: none).
        split_failure_rate: p for the split runs.
        hop_mean: the mean of one network hop, in seconds.
        seed: the seed.
        workers: processes to spread the runs over.
        progress: called with (runs done, runs in all).

    Returns:
        A :class:`SweepResult`.
    """
    clients = _validate.count("clients", clients, minimum=1)
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    duration = _validate.seconds("duration", duration, zero=False, finite=True)
    if duration > MAX_DURATION:
        raise ValueError(f"duration must be <= {MAX_DURATION:g} seconds, got {duration!r}")
    ps = tuple(_validate.ratio("failure_rates", p) for p in failure_rates)
    for s in strategies:
        if s not in SWEEP_STRATEGIES:
            raise ValueError(f"strategies must be among {', '.join(SWEEP_STRATEGIES)}; got {s!r}")
    split_counts = tuple(_validate.count("splits", n, minimum=1) for n in splits)
    split_p = _validate.ratio("split_failure_rate", split_failure_rate)
    hop_mean = _validate.seconds("hop_mean", hop_mean, zero=False, finite=True)
    seed = _validate.count("seed", seed, minimum=0)
    total = clients * rate
    runs = (len(ps) + len(split_counts)) * len(strategies)
    check_volume("clients * rate * duration (over every run)", total * duration * runs)
    jobs = [(s, p, clients, total, duration, hop_mean, seed) for p in ps for s in strategies]
    jobs += [
        (s, split_p, n, total, duration, hop_mean, seed) for n in split_counts for s in strategies
    ]
    rows = parallel_map(_run, jobs, workers=workers, progress=progress)
    n_main = len(ps) * len(strategies)
    return SweepResult(tuple(rows[:n_main]), tuple(rows[n_main:]), rate, duration, seed)
