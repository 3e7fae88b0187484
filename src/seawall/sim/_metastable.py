"""Scenario ``metastable``: a load spike tips a server into a collapse that retries sustain."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from seawall._core import validate as _validate
from seawall._core.clock import Clock
from seawall._core.errors import Overloaded
from seawall._strategies.backoff import Backoff
from seawall._strategies.budget import AdaptiveThrottle, Budget, RetryBudget
from seawall._strategies.retry import RetryPolicy, RetryState
from seawall.server._admission import Admission, Ticket
from seawall.sim._engine import Engine, SimClock
from seawall.sim._metrics import retry_hooks
from seawall.sim._servers import SERVER_MODELS, make_server
from seawall.sim._util import MAX_DURATION, check_volume, isolated, parallel_map, trial_rng

__all__ = ["METASTABLE_STRATEGIES", "MetastableResult", "MetastableSeries", "metastable"]

METASTABLE_STRATEGIES: tuple[str, ...] = (
    "naive",
    "backoff",
    "budget",
    "budget_shedding",
    "published_backoff",
    "retry_once",
    "no_retries",
    "adaptive_throttle",
)
#: The strategies a run compares unless told otherwise.
DEFAULT_METASTABLE_STRATEGIES: tuple[str, ...] = ("naive", "backoff", "budget", "budget_shedding")
TRIGGERS: tuple[str, ...] = ("spike", "ramp", "peak")


class AttemptTimedOut(TimeoutError):
    """The client stopped waiting for the attempt (the server still does the work)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MetastableSeries:
    """One strategy's run(s).

    Attributes:
        strategy: one of :data:`METASTABLE_STRATEGIES`.
        goodput: successful requests per second, per bin (mean over runs).
        offered: attempts reaching the server per second, per bin (mean over runs).
        in_flight: requests in the server at the end of each bin (mean over runs).
        recovered_at: per run, when goodput came back after the spike (``None``: never).
        success: the fraction of the requests settled by the end (succeeded or given up)
            that succeeded (mean over runs).
        load: attempts per request (mean over runs).
        events: simulator events, all runs together.
    """

    strategy: str
    goodput: tuple[float, ...]
    offered: tuple[float, ...]
    in_flight: tuple[float, ...]
    recovered_at: tuple[float | None, ...]
    success: float
    load: float
    events: int

    @property
    def recovered(self) -> bool:
        """Whether goodput recovered after the spike in every run."""
        return all(t is not None for t in self.recovered_at)


@dataclasses.dataclass(frozen=True, slots=True)
class MetastableResult:
    """The result of :func:`metastable`."""

    series: tuple[MetastableSeries, ...]
    bin_width: float
    duration: float
    rate: float
    spike_rate: float
    spike_start: float
    spike_end: float
    runs: int
    seed: int
    server: str = "fixed"
    trigger: str = "spike"
    outage: tuple[float, float] | None = None
    latency_step: tuple[float, float, float] | None = None

    @property
    def trigger_end(self) -> float:
        """When the trigger (the spike or ramp, the outage, the latency step) ended."""
        return max(
            self.spike_end,
            self.outage[1] if self.outage else 0.0,
            self.latency_step[1] if self.latency_step else 0.0,
        )

    def get(self, strategy: str) -> MetastableSeries:
        for s in self.series:
            if s.strategy == strategy:
                return s
        raise KeyError(strategy)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.series)


@dataclasses.dataclass(frozen=True, slots=True)
class _Params:
    strategy: str
    run: int
    seed: int
    duration: float
    rate: float
    spike_rate: float
    spike_start: float
    spike_end: float
    base_latency: float
    per_request: float
    network_mean: float
    timeout: float
    attempts: int
    shed_limit: int
    bin_width: float
    server: str = "fixed"
    concurrency: int = 1
    queue_limit: float = math.inf
    trigger: str = "spike"
    outage_start: float = 0.0
    outage_end: float = 0.0
    # Scenario files (seawall.sim._file): a piecewise rate, bursts, failures, a policy file.
    rate_points: tuple[tuple[float, float], ...] = ()  # (time, rate), linear between points
    even: bool = False  # arrivals evenly spaced instead of Poisson
    bursts: tuple[tuple[float, int], ...] = ()  # (time, requests at once)
    failure_probability: float = 0.0  # each attempt fails at once, independently
    error_outages: tuple[tuple[float, float], ...] = ()  # every attempt fails in these windows
    stall_outages: tuple[tuple[float, float], ...] = ()  # the server stalls in these windows
    route: Any = None  # a seawall.config.RouteConfig: the policy under test
    shed_queue: int = 0  # the shedder's queue (LoadShedder's max_queue)
    shed_queue_wait: float = 1.0  # how long a request waits in it (max_queue_wait)
    client_timeout: float = math.inf  # the client's own patience per attempt
    # Bronson et al.'s trigger: between step_start and step_end every request reaches the
    # server step_extra seconds later (its slots and queue are not held meanwhile).
    step_start: float = 0.0
    step_end: float = 0.0
    step_extra: float = 0.0


class AttemptFailed(ConnectionError):
    """The dependency answered the attempt with an error (at once)."""


class _Request:
    __slots__ = ("attempt", "deadline", "done", "state")

    def __init__(self, state: RetryState) -> None:
        self.state = state
        self.attempt = 0  # answers and timeouts of older attempts are stale
        self.deadline = 0.0
        self.done = False


def _policy(
    strategy: str,
    attempts: int,
    timeout: float,
    clock: Clock,
    seed: int,
    run: int,
    route: Any = None,
) -> RetryPolicy:
    rng = trial_rng(seed, "metastable", strategy, run, "policy")
    if route is not None:
        # A policy from the user's own policy file, as production builds it, on virtual time.
        budget_config = route.budget
        policy: RetryPolicy = route.build(
            budget=None if budget_config is None else budget_config.build(clock), clock=clock
        )
        return policy.replace(rng=rng, hooks=retry_hooks())
    budget: Budget | None = None
    if strategy in ("budget", "budget_shedding"):
        budget = RetryBudget(clock=clock)
    elif strategy == "adaptive_throttle":
        # Google SRE book, ch. 21 ("Handling Overload", client-side throttling): K = 2 over
        # two minutes, seawall's defaults.
        budget = AdaptiveThrottle(clock=clock, rng=trial_rng(seed, "metastable", run, "throttle"))
    if strategy in ("naive", "retry_once"):
        backoff = Backoff.constant(0.0)  # retry at once
    elif strategy == "published_backoff":
        # U(0, 20 s) before the first retry, U(0, 40 s) before the second: full jitter, base
        # 20 s, doubling, capped at 40 s.
        backoff = Backoff(base=20.0, multiplier=2.0, cap=40.0, jitter="full")
    else:
        backoff = Backoff(base=0.1, cap=2.0)
    return RetryPolicy(
        max_attempts={"retry_once": 2, "no_retries": 1}.get(strategy, attempts),
        backoff=backoff,
        attempt_timeout=timeout,
        budget=budget,
        rng=rng,
        name=f"metastable-{strategy}",
        hooks=retry_hooks(),
    )


def _rate_at(p: _Params, now: float) -> float:
    points = p.rate_points
    if points:
        if now <= points[0][0]:
            return points[0][1]
        for (t0, r0), (t1, r1) in itertools.pairwise(points):
            if now < t1:
                return r0 if t1 == t0 else r0 + (r1 - r0) * (now - t0) / (t1 - t0)
        return points[-1][1]
    if p.trigger == "peak":
        return _peak_rate(p.rate, p.spike_rate, p.spike_start, p.spike_end, now)
    if not p.spike_start <= now < p.spike_end:
        return p.rate
    if p.trigger == "ramp":
        # Up from `rate` to `spike_rate` across the window, then back down at once.
        span = p.spike_end - p.spike_start
        return p.rate + (p.spike_rate - p.rate) * (now - p.spike_start) / span
    return p.spike_rate


def _peak_rate(rate: float, peak: float, start: float, at: float, now: float) -> float:
    """The arrival rate of the ``peak`` trigger at *now*: *rate* until *start*, up linearly to
    *peak* at *at*, then down at the same slope, to zero (and no arrivals after).

    The ramp of M. Brooker's simulator (github.com/mbrooker/simulator_example,
    ``simple_collapse_sim/sim.py``, ``run_sim_ramp``) is ``80 - 1.6 * |t - 25|`` per second:
    ``rate=40, spike_rate=80, spike_start=0, spike_end=25``.
    """
    if now < start:
        return rate
    if now < at:
        return rate + (peak - rate) * (now - start) / (at - start)
    slope = (peak - rate) / (at - start) if at > start else 0.0
    return max(0.0, peak - slope * (now - at))


def _run(p: _Params) -> tuple[list[int], list[int], list[int], int, int, int, int, int]:
    engine = Engine()
    at = engine.at
    rng = trial_rng(p.seed, "metastable", p.strategy, p.run)
    expo = rng.expovariate
    net = 1.0 / p.network_mean
    policy = _policy(p.strategy, p.attempts, p.timeout, SimClock(engine), p.seed, p.run, p.route)
    fail_p = p.failure_probability
    rand = rng.random
    shed = p.strategy == "budget_shedding"
    nbins = math.ceil(p.duration / p.bin_width)
    goodput = [0] * nbins
    offered = [0] * nbins
    in_flight_at = [0] * nbins
    width = p.bin_width
    requests = 0
    succeeded = 0
    settled = 0
    attempts = 0

    def on_done(arg: tuple[_Request, int]) -> None:
        at(engine.now + expo(net), on_ok, arg)
        if admission is not None:
            admission.release()  # the slot passes to the newest waiter, or is freed

    # Shedding is the load shedders' own decision core (seawall.server._admission, which
    # LoadShedder drives with asyncio futures and timers), driven here by engine events.
    admission = (
        Admission(
            max_concurrency=p.shed_limit,
            max_queue=p.shed_queue,
            max_queue_wait=p.shed_queue_wait,
            deadlines=False,
            clock=SimClock(engine),
        )
        if shed
        else None
    )

    server = make_server(
        p.server,
        engine,
        on_done,
        base=p.base_latency,
        per_request=p.per_request,
        concurrency=p.concurrency,
        queue_limit=p.queue_limit,
    )

    def serve(arg: tuple[_Request, int]) -> None:
        if not server.submit(arg):
            at(engine.now + expo(net), on_overloaded, arg)  # a full queue refuses at once
            if admission is not None:
                admission.release()

    def on_ticket(ticket: Ticket) -> None:
        # Granted a slot (a request finished), or shed from the queue (evicted, timed out).
        if ticket.result is None:
            serve(ticket.handle)
        else:
            at(engine.now + expo(net), on_overloaded, ticket.handle)

    def on_queue_timeout(ticket: Ticket) -> None:
        assert admission is not None
        if ticket.waiting:
            admission.expire(ticket)

    def send(req: _Request, now: float) -> None:
        nonlocal attempts
        attempts += 1
        req.attempt += 1
        req.deadline = min(req.state.begin_attempt(now), now + p.client_timeout)
        arg = (req, req.attempt)
        at(now + expo(net), on_server, arg)
        # The client stops waiting at the attempt's deadline; the server does not know.
        at(req.deadline, on_timeout, arg)

    def on_server(arg: tuple[_Request, int]) -> None:
        now = engine.now
        k = int(now / width)
        if k < nbins:
            offered[k] += 1
        if p.outage_start <= now < p.outage_end:
            # The server stalls (a pause, a lost dependency): requests wait in its queue and
            # it takes them, in order, when it comes back.
            at(p.outage_end, take, arg)
            return
        for start, end in p.stall_outages:
            if start <= now < end:
                at(end, take, arg)
                return
        if p.step_start <= now < p.step_end:
            # The latency step: the request is answered step_extra later than the server alone
            # would answer it (it then queues as any other), without holding a slot meanwhile.
            at(now + p.step_extra, admit, arg)
            return
        admit(arg)

    def admit(arg: tuple[_Request, int]) -> None:
        now = engine.now
        if (fail_p and rand() < fail_p) or any(s <= now < e for s, e in p.error_outages):
            at(now + expo(net), on_failed, arg)  # answered at once, with an error
            return
        take(arg)

    def take(arg: tuple[_Request, int]) -> None:
        if admission is None:
            serve(arg)
            return
        # Past the shedder's limit a request waits in its queue, or is shed at once with
        # "overloaded; don't retry" (the shedder's 503) instead of being taken in.
        outcome = admission.enter(3, None, on_ticket)  # RFC 9218's default urgency for all
        if outcome is None:
            serve(arg)
        elif isinstance(outcome, str):
            at(engine.now + expo(net), on_overloaded, arg)
        else:
            outcome.handle = arg
            at(engine.now + outcome.wait, on_queue_timeout, outcome)

    def on_ok(arg: tuple[_Request, int]) -> None:
        nonlocal succeeded, settled
        req, n = arg
        if req.done or n != req.attempt:
            return  # the client gave up on this attempt: the work was wasted
        now = engine.now
        req.done = True
        req.state.on_success(now)
        succeeded += 1
        settled += 1
        k = int(now / width)
        if k < nbins:
            goodput[k] += 1

    def fail(arg: tuple[_Request, int], error: BaseException) -> None:
        nonlocal settled
        req, n = arg
        if req.done or n != req.attempt:
            return
        now = engine.now
        # The attempt is over: an answer to it that arrives later, during the backoff before
        # the next attempt, finds nobody waiting (a client that timed out has dropped the
        # call), as in the source's model (its client moves to the next try on a timeout).
        req.attempt += 1
        delay = req.state.on_error(error, now)
        if delay is None:
            req.done = True
            settled += 1
        else:
            at(now + delay, resend, req)

    def resend(req: _Request) -> None:
        send(req, engine.now)

    def on_timeout(arg: tuple[_Request, int]) -> None:
        fail(arg, AttemptTimedOut("attempt timed out"))

    def on_overloaded(arg: tuple[_Request, int]) -> None:
        fail(arg, Overloaded())

    def on_failed(arg: tuple[_Request, int]) -> None:
        fail(arg, AttemptFailed("the dependency failed the attempt"))

    def on_arrival(_: None) -> None:
        nonlocal requests, settled
        now = engine.now
        requests += 1
        try:
            state = policy.new_state(now)
        except Overloaded:  # a client-side throttle rejected the request locally: it failed
            settled += 1
        else:
            send(_Request(state), now)
        schedule_next(now)

    def schedule_next(now: float) -> None:
        rate = _rate_at(p, now)
        if rate <= 0:
            # No arrivals for now: look again at the next point of the rate, or in 0.1 s
            # (a ramp up from zero).
            later = [t for t, _ in p.rate_points if t > now]
            again = min(later[0] if later else math.inf, now + 0.1)
            if again < p.duration:
                at(again, wake, None)
            return
        nxt = now + (1.0 / rate if p.even else expo(rate))
        if nxt < p.duration:
            at(nxt, on_arrival, None)

    def wake(_: None) -> None:
        schedule_next(engine.now)

    def on_burst(n: int) -> None:
        nonlocal requests, settled
        now = engine.now
        for _ in range(n):
            requests += 1
            try:
                state = policy.new_state(now)
            except Overloaded:
                settled += 1
                continue
            send(_Request(state), now)

    def sample(k: int) -> None:
        in_flight_at[k] = len(server)
        if k + 1 < nbins:
            at((k + 2) * width, sample, k + 1)

    schedule_next(0.0)
    for when, n in p.bursts:
        if when < p.duration:
            at(when, on_burst, n)
    at(width, sample, 0)
    engine.run(until=p.duration)
    return goodput, offered, in_flight_at, requests, succeeded, settled, attempts, engine.events


def _recovery(
    goodput: Sequence[float], width: float, spike_end: float, baseline: Sequence[float]
) -> float | None:
    """When goodput came back after the spike, for good: the start of the first 5 s window
    whose mean goodput is >= 90% of the baseline and after which no 5 s window falls below 75%.

    Window means, not single bins, so that Poisson noise in one bin does not count as a relapse;
    "for good", so that the burst of requests the server finishes just after the spike (late,
    already timed out, or not) does not count as recovery. The *baseline* is given per bin
    (one value throughout for a load that comes back to its rate; the demand of the moment for
    one that keeps changing, such as the ``peak`` trigger's) and taken as its mean over each
    window; windows whose baseline is below a tenth of the highest are not judged (a few
    requests a second say nothing either way).
    """
    first = math.ceil(spike_end / width)
    need = max(1, round(5.0 / width))
    count = len(goodput) - need + 1
    means = [sum(goodput[k : k + need]) / need for k in range(count)]
    wanted = [sum(baseline[k : k + need]) / need for k in range(count)]
    floor = 0.1 * max(wanted, default=0.0)
    found: int | None = None
    for k in range(count - 1, first - 1, -1):
        if wanted[k] < floor:
            continue
        if means[k] < 0.75 * wanted[k]:
            break
        if means[k] >= 0.9 * wanted[k]:
            found = k
    return None if found is None else found * width


@isolated
def metastable(
    *,
    strategies: Sequence[str] = DEFAULT_METASTABLE_STRATEGIES,
    duration: float = 80.0,
    rate: float = 40.0,
    spike_rate: float = 80.0,
    spike_start: float = 20.0,
    spike_end: float = 25.0,
    base_latency: float = 1.0,
    per_request: float = 0.01,
    network_mean: float = 0.1,
    timeout: float = 3.0,
    attempts: int = 3,
    shed_limit: int = 100,
    bin_width: float = 1.0,
    runs: int = 1,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    server: str = "fixed",
    concurrency: int = 100,
    queue_limit: float = math.inf,
    trigger: str = "spike",
    outage: tuple[float, float] | None = None,
    latency_step: tuple[float, float, float] | None = None,
    policies: Any = None,
    shed_queue: int = 0,
    shed_queue_wait: float = 1.0,
) -> MetastableResult:
    """A server that slows down with load, a short spike, and clients that retry.

    By default (``server="fixed"``) the server has no concurrency limit; a request takes
    ``base_latency + per_request * n`` seconds where n is the number of requests in the server
    once it has arrived (itself included), and it finishes its work even after the client has
    stopped waiting. With the defaults this is the spike model of M. Brooker's simulator
    (github.com/mbrooker/simulator_example, ``simple_collapse_sim/sim.py``): open-loop
    arrivals, the same server, timeout, attempts and network. The system is bistable: a run
    either recovers or collapses, so the mean of several runs (*runs*) is a share of each.
    ``server="processor_sharing"`` shares the server between the requests in it (throughput
    capped at ``1 / per_request``); ``server="limit"`` gives it *concurrency* slots of
    *base_latency* seconds each and a FIFO queue of *queue_limit* (see
    ``seawall.sim._servers``). Each network hop takes Exp(mean
    *network_mean*). Requests arrive as a Poisson process at *rate* per second, at *spike_rate*
    between *spike_start* and *spike_end*. Every attempt times out after *timeout* seconds.

    Strategies (each a real :class:`~seawall.RetryPolicy` with ``max_attempts=attempts``):

    - ``naive``: retry at once after a timeout.
    - ``backoff``: full-jitter backoff (base 0.1 s, cap 2 s).
    - ``budget``: backoff plus a shared :class:`~seawall.RetryBudget` (defaults).
    - ``budget_shedding``: the same, and in front of the server the decision core of
      :class:`seawall.server.LoadShedder` (its ``Admission``) admits *shed_limit* requests at a
      time, queues *shed_queue* more for up to *shed_queue_wait* seconds (newest first), and
      answers the rest at once with "overloaded; don't retry".
    - ``published_backoff``: U(0, 20 s) before the first retry, U(0, 40 s) before the second.
    - ``retry_once``: one retry, at once (Bronson et al., HotOS'21).
    - ``no_retries``: one attempt.
    - ``adaptive_throttle``: backoff (as ``backoff``) and a shared
      :class:`~seawall.AdaptiveThrottle` (defaults: K = 2 over two minutes), which rejects
      requests locally once the server accepts fewer than half of them.

    ``trigger="ramp"`` raises the rate linearly from *rate* to *spike_rate* between
    *spike_start* and *spike_end* instead of jumping; ``trigger="peak"`` raises it the same way,
    then lowers it at the same slope, to zero (the ramp of Brooker's simulator); goodput then
    recovers once it is back to 90% of the arrivals of the moment; *outage* ``(start, end)``
    stalls the server for that window: requests reaching it wait, and it takes them in order when it
    comes back; *latency_step* ``(start, end, extra)`` makes every request of that window reach
    the server *extra* seconds late, without holding its slots (Bronson et al.'s latency step:
    the server's capacity does not change, only its latency).

    Goodput has recovered once, after the spike, its mean over 5 s is back to >= 90% of its mean
    before the spike (from 5 s on).

    Args:
        strategies: a subset of :data:`METASTABLE_STRATEGIES`.
        duration: seconds simulated.
        rate: arrivals per second outside the spike.
        spike_rate: arrivals per second during the spike.
        spike_start: when the spike starts (seconds).
        spike_end: when it ends.
        base_latency: the server's latency when empty.
        per_request: seconds of latency added by each request in the server.
        network_mean: mean one-way network latency.
        timeout: the client's timeout per attempt.
        attempts: attempts per request, the first included.
        shed_limit: the shedder's ``max_concurrency`` (``budget_shedding``).
        shed_queue: the shedder's ``max_queue``.
        shed_queue_wait: the shedder's ``max_queue_wait`` (seconds).
        bin_width: seconds per bin of the time series.
        server: the server model, one of ``fixed``, ``processor_sharing``, ``limit``.
        concurrency: slots of the ``limit`` server.
        queue_limit: the ``limit`` server's queue (beyond it, refused at once).
        trigger: ``spike``, ``ramp`` or ``peak``.
        outage: a window ``(start, end)`` during which the server stalls, or ``None``.
        latency_step: ``(start, end, extra)``: in that window every request reaches the server
            *extra* seconds late, without holding its slots or queue (the trigger of Bronson
            et al.'s retry example), or ``None``.
        policies: the data of a seawall policy file (``seawall.config``): each route runs too,
            as a strategy named after it, with the policy production would build from it.
        runs: independent runs per strategy; the series are their means.
        seed: the seed.
        workers: processes to spread the runs over.
        progress: called with (runs done, runs in all).

    Returns:
        A :class:`MetastableResult`.
    """
    for s in strategies:
        if s not in METASTABLE_STRATEGIES:
            raise ValueError(
                f"strategies must be among {', '.join(METASTABLE_STRATEGIES)}; got {s!r}"
            )
    duration = _validate.seconds("duration", duration, zero=False, finite=True)
    if duration > MAX_DURATION:
        raise ValueError(f"duration must be <= {MAX_DURATION:g} seconds, got {duration!r}")
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    spike_rate = _validate.number("spike_rate", spike_rate, minimum=0.0, above=True, finite=True)
    spike_start = _validate.seconds("spike_start", spike_start, finite=True)
    spike_end = _validate.seconds("spike_end", spike_end, finite=True)
    if spike_end < spike_start:
        raise ValueError(f"spike_end must be >= spike_start ({spike_start!r}), got {spike_end!r}")
    base_latency = _validate.seconds("base_latency", base_latency, zero=False, finite=True)
    per_request = _validate.seconds("per_request", per_request, finite=True)
    network_mean = _validate.seconds("network_mean", network_mean, zero=False, finite=True)
    timeout = _validate.seconds("timeout", timeout, zero=False, finite=True)
    attempts = _validate.count("attempts", attempts, minimum=1)
    shed_limit = _validate.count("shed_limit", shed_limit, minimum=1)
    shed_queue = _validate.count("shed_queue", shed_queue, minimum=0)
    shed_queue_wait = _validate.seconds("shed_queue_wait", shed_queue_wait, finite=True)
    bin_width = _validate.seconds("bin_width", bin_width, zero=False, finite=True)
    runs = _validate.count("runs", runs, minimum=1)
    seed = _validate.count("seed", seed, minimum=0)
    if duration / bin_width > 1_000_000:
        raise ValueError(f"duration / bin_width must be <= 1e6 bins, got {duration / bin_width:g}")
    check_volume(
        "rate * duration * attempts (over every run)",
        max(rate, spike_rate) * duration * attempts * runs * len(tuple(strategies)),
    )
    if server not in SERVER_MODELS:
        raise ValueError(f"server must be one of {', '.join(SERVER_MODELS)}; got {server!r}")
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}; got {trigger!r}")
    concurrency = _validate.count("concurrency", concurrency, minimum=1)
    if queue_limit != math.inf:
        queue_limit = _validate.count("queue_limit", queue_limit, minimum=0)
    down = (0.0, 0.0)
    if outage is not None:
        o_start, o_end = (_validate.seconds("outage", t, finite=True) for t in outage)
        if o_end < o_start:
            raise ValueError(f"outage must be (start, end) with end >= start, got {outage!r}")
        down = (o_start, o_end)
    step = (0.0, 0.0, 0.0)
    if latency_step is not None:
        if len(latency_step) != 3:
            raise ValueError(f"latency_step must be (start, end, extra), got {latency_step!r}")
        s_start, s_end, s_extra = (
            _validate.seconds("latency_step", t, finite=True) for t in latency_step
        )
        if s_end < s_start:
            raise ValueError(
                f"latency_step must be (start, end, extra) with end >= start, got {latency_step!r}"
            )
        step = (s_start, s_end, s_extra)
    routes: dict[str, Any] = {}
    if policies is not None:
        from seawall._policy.config import ConfigError, load_config

        try:
            routes = load_config(policies)
        except ConfigError as err:
            raise ValueError(f"policies: {err}") from None
    strategies = [*strategies, *(r for r in routes if r not in strategies)]
    jobs = [
        _Params(
            s,
            r,
            seed,
            duration,
            rate,
            spike_rate,
            spike_start,
            spike_end,
            base_latency,
            per_request,
            network_mean,
            timeout,
            attempts,
            shed_limit,
            bin_width,
            server,
            concurrency,
            queue_limit,
            trigger,
            *down,
            route=routes.get(s),
            shed_queue=shed_queue,
            shed_queue_wait=shed_queue_wait,
            step_start=step[0],
            step_end=step[1],
            step_extra=step[2],
        )
        for s in strategies
        for r in range(runs)
    ]
    # The trigger: the spike (or ramp), the outage, or both; recovery counts from its end.
    windows = [w for w in ((spike_start, spike_end), down, step[:2]) if w[1] > w[0]]
    trigger_start = min((w[0] for w in windows), default=spike_start)
    trigger_end = max((w[1] for w in windows), default=spike_end)
    series = run_series(
        jobs, strategies, runs, trigger_start, trigger_end, workers=workers, progress=progress
    )
    return MetastableResult(
        series,
        bin_width,
        duration,
        rate,
        spike_rate,
        spike_start,
        spike_end,
        runs,
        seed,
        server,
        trigger,
        down if down[1] > down[0] else None,
        step if step[1] > step[0] else None,
    )


def run_series(
    jobs: Sequence[_Params],
    strategies: Sequence[str],
    runs: int,
    trigger_start: float,
    trigger_end: float,
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[MetastableSeries, ...]:
    """Run *jobs* (``runs`` per strategy, in order) and average them into one series each."""
    outs = parallel_map(_run, jobs, workers=workers, progress=progress)
    series = []
    for i, s in enumerate(strategies):
        mine = outs[i * runs : (i + 1) * runs]
        params = jobs[i * runs]
        bin_width, rate = params.bin_width, params.rate
        nbins = len(mine[0][0])
        good = tuple(sum(o[0][k] for o in mine) / runs / bin_width for k in range(nbins))
        offered = tuple(sum(o[1][k] for o in mine) / runs / bin_width for k in range(nbins))
        inflight = tuple(sum(o[2][k] for o in mine) / runs for k in range(nbins))
        recovered: list[float | None] = []
        # A load that keeps changing after its peak is judged against its own demand.
        demand = (
            [_rate_at(params, (k + 0.5) * bin_width) for k in range(nbins)]
            if params.trigger == "peak"
            else None
        )
        for o in mine:
            g = [x / bin_width for x in o[0]]
            pre = [
                g[k]
                for k in range(len(g))
                if k * bin_width >= 5.0 and (k + 1) * bin_width <= trigger_start
            ]
            flat = [sum(pre) / len(pre) if pre else rate] * nbins
            baseline = demand if demand is not None else flat
            recovered.append(_recovery(g, bin_width, trigger_end, baseline))
        series.append(
            MetastableSeries(
                strategy=s,
                goodput=good,
                offered=offered,
                in_flight=inflight,
                recovered_at=tuple(recovered),
                success=sum(o[4] / max(1, o[5]) for o in mine) / runs,
                load=sum(o[6] / max(1, o[3]) for o in mine) / runs,
                events=sum(o[7] for o in mine),
            )
        )
    return tuple(series)
