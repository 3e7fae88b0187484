"""The model of one ``metastable`` trial: the load (a spike, a ramp or a peak), the clients'
retry policies, the server, and when goodput came back; run on the simulator's engine."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

from seawall._core.clock import Clock
from seawall._core.errors import Overloaded
from seawall._strategies.backoff import Backoff
from seawall._strategies.budget import AdaptiveThrottle, Budget, RetryBudget
from seawall._strategies.retry import RetryPolicy, RetryState
from seawall.server._admission import Admission, Ticket
from seawall.sim._engine import Engine, SimClock
from seawall.sim._metrics import retry_hooks
from seawall.sim._servers import make_server
from seawall.sim._util import trial_rng

__all__ = ["AttemptFailed", "AttemptTimedOut"]


class AttemptTimedOut(TimeoutError):
    """The client stopped waiting for the attempt (the server still does the work)."""


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
