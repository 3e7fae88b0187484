"""Scenario ``occ``: optimistic concurrency control under contention.

The experiment of Marc Brooker's "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015):
N clients start at t=0; each reads a versioned row, then writes it conditionally. The write
succeeds only if the version is unchanged (and then increments it); on a conflict the client
backs off and retries until its one write succeeds.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
from collections.abc import Callable, Sequence

from seawall._core import validate as _validate
from seawall._strategies.backoff import Backoff
from seawall._strategies.retry import RetryPolicy, RetryState
from seawall.sim._engine import Engine
from seawall.sim._metrics import retry_hooks
from seawall.sim._util import check_volume, isolated, parallel_map, trial_rng

__all__ = ["OCC_ALGORITHMS", "OccResult", "OccRow", "WriteConflict", "occ"]

OCC_ALGORITHMS: tuple[str, ...] = ("no_backoff", "exponential", "full", "equal", "decorrelated")


class WriteConflict(Exception):
    """The row's version changed between the read and the conditional write."""


@dataclasses.dataclass(frozen=True, slots=True)
class OccRow:
    """Averages over trials for one algorithm and one number of clients.

    Attributes:
        algorithm: one of :data:`OCC_ALGORITHMS`.
        clients: N.
        calls: mean total write calls until every client has written once.
        completion: mean seconds until the last client's write succeeded.
        events: simulator events run for this row, all trials together.
    """

    algorithm: str
    clients: int
    calls: float
    completion: float
    events: int


@dataclasses.dataclass(frozen=True, slots=True)
class OccResult:
    """The result of :func:`occ`: one :class:`OccRow` per (algorithm, clients)."""

    rows: tuple[OccRow, ...]
    trials: int
    seed: int
    base: float
    cap: float
    hop_mean: float
    hop_sd: float

    def row(self, algorithm: str, clients: int) -> OccRow:
        """The row for *algorithm* and *clients*."""
        for r in self.rows:
            if r.algorithm == algorithm and r.clients == clients:
                return r
        raise KeyError((algorithm, clients))

    @property
    def events(self) -> int:
        return sum(r.events for r in self.rows)


def occ_policy(algorithm: str, base: float, cap: float, rng: random.Random) -> RetryPolicy:
    """The client's real :class:`~seawall.RetryPolicy` for one of :data:`OCC_ALGORITHMS`.

    The blog's first backoff after a conflict uses retry index 1 (``base * 2``); seawall counts
    retries from 0, so the exponential kinds start from ``2 * base``. Decorrelated jitter has no
    index and starts from ``base``.
    """
    if algorithm == "no_backoff":
        backoff = Backoff.constant(0.0)
    elif algorithm == "decorrelated":
        backoff = Backoff(base=base, cap=cap, jitter="decorrelated")
    else:
        jitter = "none" if algorithm == "exponential" else algorithm
        if jitter not in ("none", "full", "equal"):
            raise ValueError(
                f"algorithm must be one of {', '.join(OCC_ALGORITHMS)}; got {algorithm!r}"
            )
        backoff = Backoff(base=min(2.0 * base, cap), cap=cap, jitter=jitter)  # type: ignore[arg-type]
    # Retry until the write succeeds: the experiment has no attempt limit.
    return RetryPolicy(
        max_attempts=2**62,
        backoff=backoff,
        retry_on=WriteConflict,
        name=f"occ-{algorithm}",
        hooks=retry_hooks(),
        rng=rng,
    )


class _HopSampler:
    """Hop latencies ``|Normal(mean, sd)|``, drawn in batches (the blog's network model).

    Box-Muller transform (Box and Muller, 1958), the method of :meth:`random.Random.gauss`, run
    over a batch: the sampler is the hottest code of the scenario and one call per hop costs
    more than the arithmetic.
    """

    __slots__ = ("_buf", "_mean", "_random", "_sd")

    def __init__(self, rng: random.Random, mean: float, sd: float) -> None:
        self._random = rng.random
        self._mean = mean
        self._sd = sd
        self._buf: list[float] = []

    def take(self) -> float:
        buf = self._buf
        if not buf:
            self._refill()
        return buf.pop()

    def _refill(self) -> None:
        rand, mean, sd = self._random, self._mean, self._sd
        log, sqrt, cos, sin, tau = math.log, math.sqrt, math.cos, math.sin, math.tau
        out = self._buf
        for _ in range(256):
            radius = sd * sqrt(-2.0 * log(1.0 - rand()))
            angle = tau * rand()
            out.append(abs(mean + radius * cos(angle)))
            out.append(abs(mean + radius * sin(angle)))


def _trial(
    policy: RetryPolicy, clients: int, rng: random.Random, hop_mean: float, hop_sd: float
) -> tuple[int, float, int]:
    """One trial: (write calls, completion time, events)."""
    engine = Engine()
    at = engine.at
    hops = _HopSampler(rng, hop_mean, hop_sd)
    hop = hops.take
    commits: list[float] = []  # times at which the version incremented, in order
    version_at = bisect.bisect_right
    last = 0.0
    done = 0
    calls = 0

    def attempt(state: RetryState, now: float) -> None:
        # The read goes out, its answer comes back, the conditional write goes out.
        nonlocal calls
        calls += 1
        state.begin_attempt(now)
        read = now + hop()
        at(read + hop() + hop(), on_write, (state, read))

    def on_write(arg: tuple[RetryState, float]) -> None:
        nonlocal last, done
        state, read = arg
        now = engine.now
        # Events run in time order, so every commit before `now` is known: the version the
        # client read is the number of commits up to its read.
        answer = now + hop()
        if version_at(commits, read) == len(commits):
            commits.append(now)
            state.on_success(answer)
            done += 1
            last = max(last, answer)
            return
        # The answer, the policy's decision and the next attempt's start touch only this
        # client's state, so they are computed here, with their own (later) times, instead of
        # as separate events: one event per attempt instead of three.
        delay = state.on_error(WriteConflict(), answer)
        if delay is not None:
            attempt(state, answer + delay)

    new_state = policy.new_state
    for _ in range(clients):
        attempt(new_state(0.0), 0.0)
    engine.run()
    if done != clients:
        # The policy has no attempt limit; only the kill switch or a changed policy stops it.
        raise RuntimeError(
            f"{clients - done} of {clients} clients gave up ({policy.backoff.jitter} backoff)"
        )
    return calls, last, engine.events


def _cell(args: tuple[str, int, int, int, float, float, float, float]) -> OccRow:
    algorithm, clients, trials, seed, base, cap, hop_mean, hop_sd = args
    calls = 0
    completion = 0.0
    events = 0
    for trial in range(trials):
        rng = trial_rng(seed, "occ", algorithm, clients, trial)
        policy = occ_policy(algorithm, base, cap, rng)
        c, t, e = _trial(policy, clients, rng, hop_mean, hop_sd)
        calls += c
        completion += t
        events += e
    return OccRow(algorithm, clients, calls / trials, completion / trials, events)


@isolated
def occ(
    clients: Sequence[int] = tuple(range(10, 200, 10)),
    *,
    algorithms: Sequence[str] = OCC_ALGORITHMS,
    trials: int = 100,
    seed: int = 0,
    base: float = 0.005,
    cap: float = 2.0,
    hop_mean: float = 0.010,
    hop_sd: float = 0.002,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> OccResult:
    """Run the optimistic-concurrency experiment.

    Args:
        clients: the values of N to run (default 10, 20, ..., 190).
        algorithms: a subset of :data:`OCC_ALGORITHMS`: ``"no_backoff"`` (retry at once),
            ``"exponential"`` (no jitter), ``"full"``, ``"equal"``, ``"decorrelated"`` jitter.
        trials: trials per (algorithm, N); the results are averages.
        seed: the seed; the same seed gives the same result, whatever *workers* is.
        base: the backoff base in seconds (5 ms in the blog).
        cap: the backoff cap in seconds (2 s in the blog).
        hop_mean: mean latency of one network hop (10 ms).
        hop_sd: its standard deviation (2 ms); a hop takes ``|Normal(hop_mean, hop_sd)|``.
        workers: processes to spread the cells over (1 runs in this process).
        progress: called with (cells done, cells in all) as the run advances.

    Returns:
        An :class:`OccResult`.

    Raises:
        ValueError: a parameter is out of range (the message names it).
    """
    clients = tuple(_validate.count("clients", n, minimum=1) for n in clients)
    if not clients:
        raise ValueError("clients must name at least one N, got none")
    algorithms = tuple(algorithms)
    for a in algorithms:
        if a not in OCC_ALGORITHMS:
            raise ValueError(f"algorithms must be among {', '.join(OCC_ALGORITHMS)}; got {a!r}")
    trials = _validate.count("trials", trials, minimum=1)
    seed = _validate.count("seed", seed, minimum=0)
    base = _validate.seconds("base", base, zero=False, finite=True)
    cap = _validate.seconds("cap", cap, zero=False, finite=True)
    if cap < base:
        raise ValueError(f"cap must be >= base ({base!r}), got {cap!r}")
    hop_mean = _validate.seconds("hop_mean", hop_mean, zero=False, finite=True)
    hop_sd = _validate.seconds("hop_sd", hop_sd, finite=True)
    if not math.isfinite(hop_mean + hop_sd):
        raise ValueError("hop_mean and hop_sd must be finite")
    check_volume("trials * clients", trials * len(algorithms) * sum(clients))
    cells = [(a, n, trials, seed, base, cap, hop_mean, hop_sd) for a in algorithms for n in clients]
    # Big cells first, so that the processes finish together.
    rows = parallel_map(_cell, cells, workers=workers, progress=progress, cost=lambda cell: cell[1])
    return OccResult(
        rows=tuple(rows),
        trials=trials,
        seed=seed,
        base=base,
        cap=cap,
        hop_mean=hop_mean,
        hop_sd=hop_sd,
    )
