"""Type-checked only (mypy --strict): the public API as users write it."""

from __future__ import annotations

import datetime
import random

import seawall
from seawall import Backoff, Outcome, RetryPolicy
from seawall.lowlevel import RetryStatistics

policy = RetryPolicy(
    max_attempts=4,
    backoff=Backoff(base=0.2, cap=5.0, jitter="equal"),
    retry_on=(ConnectionError, TimeoutError),
    timeout=10.0,
    rng=random.Random(1),
    name="api",
)
other: RetryPolicy = policy.replace(max_attempts=2)
by_predicate = seawall.retry(retry_on=lambda exc: isinstance(exc, OSError))


@policy
def fetch(key: str, *, default: int = 0) -> int:
    return default


@policy
async def afetch(key: str) -> bytes:
    return key.encode()


value: int = fetch("k", default=3)

# What the decorator adds is known to type checkers, on functions and on methods.
counted = seawall.retry(statistics=True)


@counted
def lookup(key: str) -> int:
    return len(key)


stats: RetryStatistics | None = lookup.statistics
decorated_by: RetryPolicy = lookup.policy
again: int = lookup.retry_with(max_attempts=5)("k")


# Without parentheses too (the default policy): the same attributes, sync and async.
@seawall.retry
def bare(key: str) -> int:
    return len(key)


@seawall.retry
async def abare(key: str) -> bytes:
    return key.encode()


bare_stats: RetryStatistics | None = bare.statistics
bare_policy: RetryPolicy = abare.policy
bare_again: int = bare.retry_with(max_attempts=5)("k")


class Client:
    @counted
    def get(self, key: str) -> int:
        return len(key)

    @counted
    async def aget(self, key: str) -> bytes:
        return key.encode()


from_method: int = Client().get("k")
method_stats: RetryStatistics | None = Client().get.statistics
unbound_stats: RetryStatistics | None = Client.get.statistics


async def use() -> None:
    data: bytes = await afetch("k")
    data = await Client().aget("k")
    got: int = await policy.acall(_aget, 1)
    outcome: Outcome[int] = await policy.arun(_aget, 2)
    async for attempt in policy.attempts():
        with attempt:
            data = await afetch("again")
    del data, got, outcome


async def _aget(x: int) -> int:
    return x


def _get(x: int) -> int:
    return x


n: int = policy.call(_get, 1)
out: Outcome[int] = policy.run(_get, 2)
maybe: int | None = out.value
sure: int = out.unwrap()
for attempt in policy.attempts():
    with attempt:
        _get(3)

b: Backoff = Backoff.constant(1.0)
lin: Backoff = Backoff.linear(base=0.1, step=0.2, cap=3.0)
envoy: Backoff = Backoff.envoy(base_interval=0.025, max_interval=0.25)
summed: Backoff = Backoff(base=0.1, cumulative=True)
delay: float = b.compute(0, random.Random(0))
with seawall.deadline(2.0) as dl:
    left: float = seawall.remaining()
    at: float = dl.at
seawall.set_enabled(False, name="payments")
err: ConnectionError = seawall.permanent(ConnectionError())


async def one() -> int:
    return 1


on_trio: int = seawall.testing.run(one(), seawall.VirtualClock(), backend="trio")
with seawall.testing.instant():
    pass

# -- budgets, deadlines across hops, latency ------------------------------------------------
budget = seawall.RetryBudget(ratio=0.1, min_per_second=10.0, window=10.0)
bucket = seawall.TokenBucket(max_tokens=10.0, token_ratio=0.1)
quota = seawall.RetryQuota.aws_standard()
throttle = seawall.AdaptiveThrottle(k=2.0, window=120.0)
budgeted = RetryPolicy(budget=budget)
as_budget: seawall.Budget = bucket
headers: dict[str, str] = seawall.propagation.deadline_headers()
grpc: str = seawall.propagation.encode_grpc_timeout(1.5)
back: float | None = seawall.propagation.decode_grpc_timeout("100m")
server_side: float = seawall.propagation.timeout_from_headers(
    {"grpc-timeout": "5S"}, max_seconds=30.0
)
tracker = seawall.LatencyTracker()
tracker.record(0.012)
p99: float | None = tracker.quantile(0.99)

# -- hedging, breaker, pipeline -------------------------------------------------------------
breaker = seawall.CircuitBreaker()
state: seawall.lowlevel.BreakerState = breaker.state
pipeline = seawall.Pipeline(retry=policy, breaker=breaker)


@pipeline
def through_pipeline(x: int) -> int:
    return x


piped: int = through_pipeline(1)


async def hedged() -> None:
    first: int = await seawall.hedge(_aget, 1, delay=0.05)
    del first


# -- sagas ----------------------------------------------------------------------------------------
from seawall import saga  # noqa: E402


def _reserve(ctx: saga.StepContext) -> dict[str, int]:
    key: str = ctx.idempotency_key
    del key
    return {"attempt": ctx.attempt}


async def _undo(ctx: saga.StepContext) -> None:
    return None


order = saga.Saga("order", [saga.Step("reserve", _reserve, compensate=_undo, policy=policy)])


def _drive(orch: saga.Orchestrator) -> None:
    run_id: str = orch.start("order", {"order_id": 42})
    ran: int = orch.run_due()
    run: saga.Run = orch.run_until_settled(run_id)
    record: saga.StepRecord = run.steps[0]
    status: saga.Status = record.status
    history: tuple[saga.HistoryEntry, ...] = orch.history(run_id)
    del ran, status, history


waiting = saga.Saga(
    "waiting",
    [saga.WaitFor("paid", timeout=60.0), saga.Sleep(5.0, name="pause")],
    version=2,
    timeout=3600.0,
)


def _signal(orch: saga.Orchestrator, run_id: str) -> None:
    kept: bool = orch.signal(run_id, "paid", {"tx": "T-9"})
    limit: int = orch.max_payload_bytes
    deadline: datetime.datetime | None = orch.get(run_id).deadline
    del kept, limit, deadline


async def _asignal(orch: saga.Orchestrator, run_id: str) -> None:
    kept: bool = await orch.asignal(run_id, "paid", {"tx": "T-9"})
    del kept


def fleet_shared() -> None:
    from seawall import redis as fleet_redis

    fleet = fleet_redis.Fleet("redis://localhost:6379/0", namespace="shop", interval=0.1)
    budget: seawall.Budget = fleet_redis.SharedRetryBudget(fleet, "payments", ratio=0.1)
    bucket: seawall.Budget = fleet_redis.SharedTokenBucket(fleet, "payments")
    breaker: seawall.CircuitBreaker = fleet_redis.SharedCircuitBreaker(fleet, "payments")
    shared_policy = RetryPolicy(budget=budget)
    stats: fleet_redis.FleetStats = fleet.stats()
    degraded: bool = stats.degraded
    hosts: list[fleet_redis.SharedRetryBudget] = fleet_redis.share_hosts(fleet, ["https://a"])
    del bucket, breaker, shared_policy, degraded, hosts
    fleet.close()


# -- integrations: gRPC, aiohttp, WSGI -------------------------------------------------------

import aiohttp  # noqa: E402
import grpc as grpcio  # noqa: E402

import seawall.aiohttp  # noqa: E402
import seawall.grpc  # noqa: E402
from seawall.server.aiohttp import LoadShedder as AiohttpShedder  # noqa: E402
from seawall.server.wsgi import LoadShedder as WsgiShedder  # noqa: E402

grpc_channel: grpcio.Channel = grpcio.intercept_channel(
    grpcio.insecure_channel("127.0.0.1:50051"),
    seawall.grpc.RetryInterceptor(policy, budget=seawall.TokenBucket()),
)
aio_interceptor = seawall.grpc.AsyncRetryInterceptor(
    policy, hedge=seawall.Hedge(delay=0.05), hedge_methods=["/pkg.Users/Get"]
)
aio_interceptors: list[grpcio.aio.ClientInterceptor] = seawall.grpc.AsyncRetryInterceptor(
    policy, request_buffer=seawall.grpc.DEFAULT_REQUEST_BUFFER
).interceptors()
stream_interceptor = seawall.grpc.RetryInterceptor(policy, request_buffer=0)
grpc_server_interceptors: list[grpcio.ServerInterceptor] = [
    seawall.grpc.LoadShedder(max_concurrency=8, retry_after=0.5),
    seawall.grpc.DeadlineInterceptor(max_request_time=10.0),
]
pushback: float | object | None = seawall.grpc.parse_pushback([("grpc-retry-pushback-ms", "10")])


async def with_aiohttp() -> int:
    middleware = seawall.aiohttp.RetryMiddleware(policy, idempotency_key=True)
    async with (
        aiohttp.ClientSession(middlewares=[middleware]) as session,
        session.get("http://127.0.0.1:8080/") as response,
    ):
        return response.status


aiohttp_shedder = AiohttpShedder(max_concurrency=32, max_request_time=10.0)


def wsgi_app(environ: dict[str, object], start_response: object) -> list[bytes]:
    return [b"ok"]


wsgi_shedder = WsgiShedder(wsgi_app, max_concurrency=8)


# -- limits, redaction, fault injection -----------------------------------------------------
probed = seawall.CircuitBreaker(probe_timeout=5.0)
kept = seawall.VirtualClock(keep_sleeps=10)
waits: list[float] = kept.sleeps
count: int = kept.sleep_count
clean: str = seawall.instrumentation.redact_url("https://u:p@h/x?k=v")
cleaned: str = seawall.instrumentation.redact_text("url: /x?k=v")
plan = seawall.faults.FaultPlan(
    [
        seawall.faults.Latency(0.1, rate=0.1),
        seawall.faults.Status(503, {"Retry-After": "1"}, schedule=seawall.faults.nth(1)),
        seawall.faults.Reset(after_send=True, schedule=seawall.faults.window(5.0, 10.0)),
    ],
    seed=1,
)
decision: seawall.faults.Decision = plan.decide()
chaos = seawall.faults.FaultTransport(plan)
achaos = seawall.faults.AsyncFaultTransport(plan)
limited = seawall.httpx.RetryTransport(total_timeout=10.0, transport=chaos)
# HTTP: one set of options, per-request overrides, the history.
options: seawall.http.HttpOptions = {"budget": None, "total_timeout": 5.0}
optioned = seawall.httpx.AsyncRetryTransport(None, achaos, **options)
with seawall.http.override(retries=0), seawall.http.override(seawall.RetryPolicy()):
    pass
step = seawall.http.HttpAttempt(503, None, 1.0)
step_status: int | None = step.status
step_wait: float | None = step.wait
history: tuple[seawall.http.HttpAttempt, ...] = (step,)
middleware = seawall.aiohttp.RetryMiddleware(total_timeout=None, budget=None)
