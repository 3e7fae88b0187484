"""Every public constructor against hostile values: a TypeError/ValueError naming the parameter, or
an object that works.

For each parameter of each constructor, hypothesis draws values that broke earlier versions:
integers far beyond float range (``10**400``), subnormal floats (``5e-324``), NaN, infinities,
bools, strings, ``None``, containers and arbitrary objects. Each must either be refused with a
``TypeError`` or ``ValueError`` whose message names the parameter, or give an object that then
survives a short, bounded exercise on virtual time (a retried call, budget withdrawals, breaker
transitions, a hedged call, quantiles, a shed request) without any other exception.

The number of values tried is written to the figures of ``docs/reliability.md`` (see
``tests/figures.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seawall
import seawall.httpx
import seawall.requests
import seawall.testing
from backends import BACKENDS
from figures import record_figures
from seawall import faults
from seawall.server import LoadShedder, ShedOptions

# -- hostile values ---------------------------------------------------------------------------

HUGE_INTS = st.integers(min_value=19, max_value=1000).flatmap(
    lambda k: st.sampled_from([10**k, -(10**k), 10**k + 1])
)
TINY = st.sampled_from([5e-324, -5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-12])
SPECIAL = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        True,
        False,
        None,
        "1",
        "",
        b"1",
        [1],
        {},
        (),
        1j,
        object(),
        0,
        -1,
        1,
        -0.0,
        1e9,
        1e10,
        1e308,
        -1e308,
        2**63,
        2**64,
    ]
)
HOSTILE = st.one_of(
    HUGE_INTS,
    TINY,
    SPECIAL,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
)

#: Errors the exercises may meet in normal operation (the callee failed, a deadline passed, a
#: breaker or a throttle refused): anything else escaping is a defect.
EXPECTED = (ConnectionError, TimeoutError, seawall.Overloaded, seawall.CircuitOpen)


class Flaky:
    """Fails with ConnectionError *failures* times, then returns "ok"."""

    def __init__(self, failures: int = 2) -> None:
        self.left = failures

    def __call__(self) -> str:
        if self.left > 0:
            self.left -= 1
            raise ConnectionError("flaky")
        return "ok"


async def aflaky_factory(clock: seawall.VirtualClock, failures: int = 2) -> Callable[[], Any]:
    flaky = Flaky(failures)

    async def call() -> str:
        await anyio.sleep(0.01)
        return flaky()

    return call


def run_on_each_backend(
    main: Callable[[], Coroutine[Any, Any, None]], clock: seawall.VirtualClock | None
) -> None:
    """``main()`` run on asyncio, then on trio, on virtual time (*clock*, or a new one)."""
    for backend in BACKENDS:
        seawall.testing.run(main(), clock, backend=backend)


# -- exercises: a short, bounded use of each object --------------------------------------------


def use_backoff(b: seawall.Backoff, clock: seawall.VirtualClock) -> None:
    rng = random.Random(0)
    for d in itertools.islice(b.delays(rng), 80):
        assert 0.0 <= d <= b.cap, d
    assert 0.0 <= b.raw(10**9) <= b.cap
    policy = seawall.RetryPolicy(backoff=b, clock=clock, rng=rng, hooks=(), max_attempts=4)
    with contextlib.suppress(ConnectionError):
        policy.call(Flaky(3))


def use_policy(policy: seawall.RetryPolicy, clock: seawall.VirtualClock) -> None:
    started = clock.now()
    with contextlib.suppress(EXPECTED):
        policy.call(Flaky(2))
    if policy.timeout is not None and policy.clock is clock:
        assert clock.now() - started <= policy.timeout + 1e-9

    async def main() -> None:
        with contextlib.suppress(EXPECTED):
            await policy.acall(await aflaky_factory(clock))

    run_on_each_backend(main, clock if policy.clock is clock else None)
    for attempt in policy.attempts():
        with attempt:
            pass


def use_budget(budget: seawall.Budget, clock: seawall.VirtualClock) -> None:
    error = ConnectionError("down")
    for i in range(60):
        try:
            budget.on_request()
        except seawall.Overloaded:
            continue
        if i % 3:
            budget.on_failure(error)
            budget.allow_retry(error)
        else:
            budget.on_success()
        clock.advance(0.37)
    policy = seawall.RetryPolicy(budget=budget, clock=clock, hooks=())
    with contextlib.suppress(EXPECTED):
        policy.call(Flaky(1))


def use_breaker(breaker: seawall.CircuitBreaker, clock: seawall.VirtualClock) -> None:
    for i in range(80):
        try:
            permit = breaker.acquire()
        except seawall.CircuitOpen:
            clock.advance(1.0)
            continue
        clock.advance(0.01)
        breaker.record(permit, ConnectionError("down") if i < 50 else None)
    assert breaker.state in ("closed", "open", "half_open")
    breaker.metrics()


def use_hedge(hedge: seawall.Hedge, clock: seawall.VirtualClock) -> None:
    async def main() -> None:
        async def answer(*replica: object) -> str:
            await anyio.sleep(0.05)
            return "ok"

        for _ in range(3):
            with contextlib.suppress(EXPECTED):
                await hedge.acall(answer)

    run_on_each_backend(main, clock)


def use_pipeline(pipeline: seawall.Pipeline, clock: seawall.VirtualClock) -> None:
    with contextlib.suppress(EXPECTED):
        pipeline.call(Flaky(1))


def use_tracker(tracker: seawall.LatencyTracker, clock: seawall.VirtualClock) -> None:
    rng = random.Random(1)
    samples = [rng.expovariate(20.0) for _ in range(300)]
    for s in samples:
        tracker.record(s)
        clock.advance(0.001)
    for q in (0.0, 0.5, 0.99, 1.0):
        value = tracker.quantile(q)
        assert value is not None and 0.0 <= value < math.inf
    assert tracker.bucket_count <= 2048 or tracker.bucket_count <= tracker._max_buckets + 1
    tracker.suggest_timeout(min_samples=1)


def use_clock(clock: seawall.VirtualClock, _: seawall.VirtualClock) -> None:
    before = clock.now()
    clock.sleep(0.5)
    clock.advance(1.0)
    assert clock.now() >= before
    assert len(clock.sleeps) <= 1


def use_deadline(scope: seawall.deadline, clock: seawall.VirtualClock) -> None:
    try:
        with scope:
            left = seawall.remaining()
            assert not math.isnan(left)
            seawall.RetryPolicy(clock=clock, hooks=()).call(Flaky(1))
    except EXPECTED:
        pass


def use_shedder(shedder: LoadShedder, clock: seawall.VirtualClock) -> None:
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
        await asyncio.gather(*(shedder(dict(scope), receive, send) for _ in range(3)))

    # On asyncio: tests/server/test_shed.py drives the shedder on trio too.
    seawall.testing.run(main(), clock)
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert len(statuses) == 3 and set(statuses) <= {200, 429, 503, 504}, statuses


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    await asyncio.sleep(0.01)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def use_plan(plan: faults.FaultPlan, clock: seawall.VirtualClock) -> None:
    for _ in range(50):
        decision = plan.decide()
        assert 0.0 <= decision.delay < math.inf
        clock.advance(0.1)


def use_fault(fault: faults.Fault, clock: seawall.VirtualClock) -> None:
    use_plan(faults.FaultPlan([fault], seed=0, clock=clock), clock)


def use_schedule(schedule: faults.Schedule, clock: seawall.VirtualClock) -> None:
    use_fault(faults.Status(503, schedule=schedule), clock)


def use_nothing(obj: object, clock: seawall.VirtualClock) -> None:
    """Constructors whose objects are exercised against real servers elsewhere."""


INNER = httpx.HTTPTransport()
AINNER = httpx.AsyncHTTPTransport()

# (constructor, valid keyword arguments, the exercise); the clock is injected where accepted.
CONSTRUCTORS: dict[str, tuple[Callable[..., Any], dict[str, Any], Callable[..., None]]] = {
    "Backoff": (seawall.Backoff, {}, use_backoff),
    "Backoff.constant": (seawall.Backoff.constant, {"delay": 0.5}, use_backoff),
    "Backoff.linear": (seawall.Backoff.linear, {}, use_backoff),
    "RetryPolicy": (seawall.RetryPolicy, {"hooks": (), "clock": "clock"}, use_policy),
    "RetryBudget": (seawall.RetryBudget, {"clock": "clock"}, use_budget),
    "TokenBucket": (seawall.TokenBucket, {}, use_budget),
    "RetryQuota": (seawall.RetryQuota, {}, use_budget),
    "AdaptiveThrottle": (
        seawall.AdaptiveThrottle,
        {"clock": "clock", "rng": random.Random(0)},
        use_budget,
    ),
    "CircuitBreaker": (
        seawall.CircuitBreaker,
        {"clock": "clock", "rng": random.Random(0), "minimum_calls": 5},
        use_breaker,
    ),
    "CircuitBreaker(window_seconds)": (
        seawall.CircuitBreaker,
        {"clock": "clock", "window_seconds": 10.0, "minimum_calls": 5},
        use_breaker,
    ),
    "Hedge": (seawall.Hedge, {"delay": 0.01, "clock": "clock"}, use_hedge),
    "Pipeline": (
        seawall.Pipeline,
        {"retry": seawall.RetryPolicy(hooks=()), "clock": "clock"},
        use_pipeline,
    ),
    "LatencyTracker": (seawall.LatencyTracker, {"clock": "clock"}, use_tracker),
    "VirtualClock": (seawall.VirtualClock, {}, use_clock),
    "deadline": (seawall.deadline, {"seconds": 1.0, "clock": "clock"}, use_deadline),
    "LoadShedder": (
        LoadShedder,
        {"app": ok_app, "max_concurrency": 1, "max_queue": 1, "clock": "clock"},
        use_shedder,
    ),
    "faults.FaultPlan": (
        faults.FaultPlan,
        {"faults": [faults.Latency(0.1), faults.Status(503, rate=0.5)], "clock": "clock"},
        use_plan,
    ),
    "faults.Latency": (faults.Latency, {"seconds": 0.1}, use_fault),
    "faults.Status": (faults.Status, {"status": 503}, use_fault),
    "faults.Error": (faults.Error, {"error": ConnectionError}, use_fault),
    "faults.Reset": (faults.Reset, {}, use_fault),
    "faults.Refuse": (faults.Refuse, {}, use_fault),
    "faults.Drip": (faults.Drip, {}, use_fault),
    "faults.window": (faults.window, {"start": 1.0, "end": 2.0}, use_schedule),
    "faults.FaultMiddleware": (
        faults.FaultMiddleware,
        {"app": ok_app, "plan": faults.FaultPlan([])},
        use_nothing,
    ),
    "faults.FaultTransport": (
        faults.FaultTransport,
        {"plan": faults.FaultPlan([])},
        use_nothing,
    ),
    "faults.FaultAdapter": (faults.FaultAdapter, {"plan": faults.FaultPlan([])}, use_nothing),
    # One real inner transport each, built once: httpx's default one loads the certificate
    # store (tens of milliseconds) on every construction, thousands of times here. A hostile
    # value of `transport` itself replaces it.
    "RetryTransport": (seawall.httpx.RetryTransport, {"transport": INNER}, use_nothing),
    "AsyncRetryTransport": (
        seawall.httpx.AsyncRetryTransport,
        {"hedge": seawall.Hedge(0.1), "transport": AINNER},
        use_nothing,
    ),
    "RetryAdapter": (seawall.requests.RetryAdapter, {}, use_nothing),
    "HttpRules": (seawall.http.HttpRules, {}, use_nothing),
}

# Positional-only or structural parameters that are not configuration.
_SKIP = {"app", "self", "on_state_change"}  # on_state_change: deprecated (hooks=)


# Constructors whose options arrive as ``**options`` typed by a TypedDict: each key is a
# parameter too.
_OPTIONS: dict[str, Any] = {
    "LoadShedder": ShedOptions,
    "RetryTransport": seawall.http.HttpOptions,
    "AsyncRetryTransport": seawall.http.HttpOptions,
    "RetryAdapter": seawall.http.HttpOptions,
}


def _parameters() -> Iterator[tuple[str, str]]:
    import inspect

    for name, (ctor, _, _) in CONSTRUCTORS.items():
        for param in inspect.signature(ctor).parameters.values():
            if param.kind is param.VAR_KEYWORD and name in _OPTIONS:
                yield from ((name, key) for key in _OPTIONS[name].__annotations__)
                continue
            if param.name in _SKIP or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            yield name, param.name


CASES = sorted(_parameters())
TRIED: dict[str, int] = {"values": 0, "refused": 0, "accepted": 0}


@pytest.fixture(scope="module", autouse=True)
def _write_figures() -> Iterator[None]:
    yield
    record_figures(
        "hostile_constructors",
        {
            "parameters": len(CASES),
            "constructors": len(CONSTRUCTORS),
            "values": TRIED["values"],
            "refused_naming_the_parameter": TRIED["refused"],
            "accepted_and_worked": TRIED["accepted"],
            "escaped": 0,  # any escape fails the run, so a written file says zero
        },
    )


def check(ctor_name: str, param: str, value: object) -> None:
    ctor, base, exercise = CONSTRUCTORS[ctor_name]
    clock = seawall.VirtualClock()
    kwargs = {k: (clock if v == "clock" else v) for k, v in base.items()}
    kwargs[param] = value
    if ctor_name == "deadline" and param == "at":
        kwargs.pop("seconds")
    TRIED["values"] += 1
    try:
        obj = ctor(**kwargs)
    except (TypeError, ValueError) as err:
        message = str(err)
        assert param in message, f"{ctor_name}({param}={value!r:.60}): {message!r}"
        TRIED["refused"] += 1
        return
    exercise(obj, clock)
    TRIED["accepted"] += 1


@pytest.mark.parametrize(("ctor_name", "param"), CASES, ids=[f"{c}-{p}" for c, p in CASES])
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(value=HOSTILE)
def test_hostile_value_is_refused_by_name_or_works(ctor_name: str, param: str, value: Any) -> None:
    check(ctor_name, param, value)


@pytest.mark.parametrize(
    ("ctor_name", "param", "value"),
    [
        # The values of the adversarial run's report, pinned.
        ("RetryPolicy", "timeout", 10**400),
        ("RetryPolicy", "timeout", 1e10),
        ("RetryPolicy", "max_retry_after", math.inf),
        ("Backoff", "cap", 1e10),
        ("RetryBudget", "window", 5e-324),
        ("AdaptiveThrottle", "window", 5e-324),
        ("TokenBucket", "max_tokens", 1e308),
        ("CircuitBreaker", "window_calls", 10**20),
        ("CircuitBreaker(window_seconds)", "window_seconds", 5e-324),
        ("CircuitBreaker(window_seconds)", "window_buckets", 10**9),
        ("LatencyTracker", "half_life", 1e-9),
        ("LatencyTracker", "half_life", 5e-324),
        ("VirtualClock", "start", 10**400),
        ("deadline", "seconds", 1e10),
        ("deadline", "clock", 5),
    ],
)
def test_reported_values_are_refused_by_name(ctor_name: str, param: str, value: object) -> None:
    ctor, base, _ = CONSTRUCTORS[ctor_name]
    kwargs = {k: (seawall.VirtualClock() if v == "clock" else v) for k, v in base.items()}
    kwargs[param] = value
    with pytest.raises((TypeError, ValueError), match=param):
        ctor(**kwargs)


def test_huge_timeouts_would_overflow_the_first_wait() -> None:
    # Why durations stop at MAX_SECONDS: the platform's waits overflow a little past 9.2e9 s.
    import threading

    from seawall._core.validate import MAX_SECONDS

    assert MAX_SECONDS < threading.TIMEOUT_MAX
    assert seawall.RetryPolicy(timeout=MAX_SECONDS).timeout == MAX_SECONDS
    assert seawall.RetryPolicy(timeout=math.inf).timeout == math.inf  # "no limit" still works


def test_messages_survive_integers_beyond_the_printing_limit() -> None:
    # repr() of an int of more than 4,300 digits raises ValueError itself.
    for build in (
        lambda: seawall.RetryPolicy(timeout=10**5000),
        lambda: seawall.RetryPolicy(max_attempts=-(10**5000)),
        lambda: seawall.Backoff(base=10**5000),
        lambda: seawall.RetryBudget(ratio=10**5000),
    ):
        with pytest.raises(ValueError, match=r"(timeout|max_attempts|base|ratio) .*digits"):
            build()


def test_tiny_half_life_no_longer_answers_one_sample() -> None:
    # A half-life of a millisecond, samples a microsecond apart: quantiles still spread.
    clock = seawall.VirtualClock()
    tracker = seawall.LatencyTracker(half_life=0.001, clock=clock)
    for i in range(1, 1001):
        tracker.record(i / 1000)
        clock.advance(1e-6)
    assert tracker.quantile(0.1) < 0.2 < 0.8 < tracker.quantile(0.9)
