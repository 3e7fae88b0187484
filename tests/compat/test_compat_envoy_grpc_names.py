"""Envoy's route retry policy and gRPC's A6 retry policy, read by seawall's names.

Envoy cannot run here: its router documentation is the reference (x-envoy-retry-on,
x-envoy-max-retries, x-envoy-overloaded; the cluster's circuit_breakers.retry_budget). What
seawall means the same way is pinned as Envoy says it; where seawall differs on purpose, the
test pins seawall's behaviour and docs/compat.md says why.
"""

from __future__ import annotations

import errno
import random
import ssl
import warnings

import httpx
import pytest
import requests
import urllib3

import seawall
import seawall.httpx
from seawall.config import ConfigError, parse_config
from seawall.http import is_overloaded
from servers import serve_asgi


def route(**retry_policy: object) -> seawall.config.RouteConfig:
    return parse_config({"routes": {"r": {"retry_policy": retry_policy}}})["r"]


def test_num_retries_counts_retries_after_the_first_attempt() -> None:
    # Envoy: num_retries retries; gRPC: maxAttempts tries. seawall: max_attempts tries.
    assert route(num_retries=3).build().max_attempts == 4
    assert route(num_retries=0).build().max_attempts == 1


def test_max_interval_defaults_to_ten_times_base_interval() -> None:
    back_off = route(retry_back_off={"base_interval": "25ms"}).back_off
    assert (back_off.base, back_off.cap) == (0.025, 0.25)


# -- the back-off curve ------------------------------------------------------------------------


def test_retry_back_off_follows_envoys_curve() -> None:
    # Envoy: retry N waits in [0, (2^N - 1) * base): 0-25 ms, 0-75 ms, 0-175 ms, then the cap.
    back_off = route(retry_back_off={"base_interval": "25ms"}).back_off
    ceilings = [round(back_off.raw(n) * 1000, 9) for n in range(6)]
    assert ceilings == [25.0, 75.0, 175.0, 250.0, 250.0, 250.0]
    assert back_off == seawall.Backoff.envoy()  # Envoy's defaults: 25 ms, 10 x 25 ms


def test_envoy_waits_are_fully_jittered_below_each_ceiling() -> None:
    back_off = seawall.Backoff.envoy(0.025)
    rng = random.Random(12)
    for n, ceiling in enumerate((0.025, 0.075, 0.175, 0.25)):
        waits = [back_off.compute(n, rng) for _ in range(2000)]
        assert all(0.0 <= w < ceiling for w in waits)
        # Uniform over the whole range: the mean is about half the ceiling, and draws reach
        # close to it (full jitter, not "half plus jitter").
        assert sum(waits) / len(waits) == pytest.approx(ceiling / 2, rel=0.06)
        assert max(waits) > 0.98 * ceiling


def test_the_curve_reaches_the_policy_built_from_the_file() -> None:
    policy = route(retry_back_off={"base_interval": "10ms", "max_interval": "1s"}).build()
    assert [round(policy.backoff.raw(n), 9) for n in range(8)] == [
        0.01,
        0.03,
        0.07,
        0.15,
        0.31,
        0.63,
        1.0,
        1.0,
    ]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"base_interval": 0}, "base_interval"),
        ({"base_interval": -0.025}, "base_interval"),
        ({"base_interval": 0.1, "max_interval": 0.05}, "max_interval"),
        ({"base_interval": 0.1, "max_interval": float("inf")}, "max_interval"),
    ],
)
def test_backoff_envoy_refuses_bad_values_by_name(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        seawall.Backoff.envoy(**kwargs)


def test_the_summed_curve_never_overflows() -> None:
    huge = seawall.Backoff(base=1e-300, multiplier=1e300, cap=10.0, cumulative=True)
    assert [huge.raw(n) for n in (0, 1, 2, 10**6)] == [1e-300, 1.0, 10.0, 10.0]
    flat = seawall.Backoff(base=1.0, multiplier=1.0, cap=10.0, cumulative=True)
    assert [flat.raw(n) for n in range(4)] == [1.0, 2.0, 3.0, 4.0]


def test_the_admin_view_tells_the_curves_apart() -> None:
    envoy = route(retry_back_off={"base_interval": "25ms"}).describe()["back_off"]
    own = route(back_off={"base": "25ms"}).describe()["back_off"]
    assert envoy == {"base": 0.025, "max": 0.25, "jitter": "full", "curve": "envoy"}
    assert own == {"base": 0.025, "max": 0.25, "jitter": "full"}


def test_seawalls_own_spelling_keeps_seawalls_doubling_curve() -> None:
    # back_off = {base, max} is seawall's: base * 2**n, capped (0-25 ms, 0-50 ms, 0-100 ms).
    back_off = route(back_off={"base": "25ms", "max": "250ms"}).back_off
    assert [round(back_off.raw(n) * 1000, 9) for n in range(5)] == [25.0, 50.0, 100.0, 200.0, 250.0]


def test_no_back_off_means_seawalls_default_not_envoys() -> None:
    # Different on purpose: a route without back-off gets seawall's default (0.1 s doubling up to
    # 20 s), not Envoy's 25 ms up to 250 ms, which suits a proxy next to its upstream.
    assert route(num_retries=1).back_off == seawall.Backoff()


def test_default_num_retries_differs_from_envoys() -> None:
    # Envoy retries once by default; seawall's routes twice (its max_attempts=3 default).
    assert route().build().max_attempts == 3


# -- what 5xx, reset, connect-failure and gateway-error retry ------------------------------------


def _connect_error() -> requests.ConnectionError:
    # What requests raises for a refused connection: ConnectionError around urllib3's
    # MaxRetryError around a NewConnectionError.
    reason = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    return requests.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/", reason))  # type: ignore[arg-type]


CONNECT_FAILURES = {
    "ConnectionRefusedError": lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
    "OSError EHOSTUNREACH": lambda: OSError(errno.EHOSTUNREACH, "no route to host"),
    "httpx.ConnectError": lambda: httpx.ConnectError("refused"),
    "httpx.ConnectTimeout": lambda: httpx.ConnectTimeout("connect timed out"),
    "requests.ConnectTimeout": lambda: requests.ConnectTimeout("connect timed out"),
    "requests.ConnectionError(NewConnectionError)": _connect_error,
}
RESETS_AND_READ_TIMEOUTS = {
    "ConnectionResetError": lambda: ConnectionResetError(errno.ECONNRESET, "reset by peer"),
    "BrokenPipeError": lambda: BrokenPipeError(errno.EPIPE, "broken pipe"),
    "TimeoutError": lambda: TimeoutError("read timed out"),
    "httpx.ReadError": lambda: httpx.ReadError("reset"),
    "httpx.ReadTimeout": lambda: httpx.ReadTimeout("read timed out"),
    "httpx.RemoteProtocolError": lambda: httpx.RemoteProtocolError("server disconnected"),
    "requests.ReadTimeout": lambda: requests.ReadTimeout("read timed out"),
    "requests.ConnectionError": lambda: requests.ConnectionError("connection aborted"),
}
NEVER = {
    "ValueError": lambda: ValueError("a bug"),
    "ssl.SSLCertVerificationError": lambda: ssl.SSLCertVerificationError("bad certificate"),
    "requests.exceptions.SSLError": lambda: requests.exceptions.SSLError("bad certificate"),
    "httpx.UnsupportedProtocol": lambda: httpx.UnsupportedProtocol("ftp://"),
}


def retries(condition: str, make: object) -> bool:
    """Whether a route with ``retry_on = condition`` retries the error *make* builds."""
    spec: dict[str, object] = {"retry_on": condition}
    if condition == "retriable-status-codes":
        spec["retriable_status_codes"] = [418]
    policy = route(**spec).build(clock=seawall.VirtualClock(), hooks=())
    calls = 0

    def fail() -> None:
        nonlocal calls
        calls += 1
        raise make()  # type: ignore[operator]

    with pytest.raises(BaseException):
        policy.call(fail)
    return calls > 1


def cases(*groups: dict[str, object]) -> list[object]:
    return [pytest.param(make, id=name) for group in groups for name, make in group.items()]


@pytest.mark.parametrize("make", cases(CONNECT_FAILURES, RESETS_AND_READ_TIMEOUTS))
@pytest.mark.parametrize("condition", ["5xx", "gateway-error", "reset"])
def test_5xx_gateway_error_and_reset_retry_every_request_without_a_response(
    condition: str, make: object
) -> None:
    # Envoy: 5xx retries "any 5xx response code, or does not respond at all
    # (disconnect/reset/read timeout)", connect-failure and refused-stream included; reset:
    # "does not respond at all"; gateway-error: as 5xx, for 502/503/504.
    assert retries(condition, make)


@pytest.mark.parametrize("make", cases(CONNECT_FAILURES))
def test_connect_failure_retries_connections_never_made(make: object) -> None:
    assert retries("connect-failure", make)


@pytest.mark.parametrize("make", cases(RESETS_AND_READ_TIMEOUTS))
def test_connect_failure_leaves_resets_and_read_timeouts_alone(make: object) -> None:
    # Envoy: "a connection failure/timeout is at the TCP level", not a request timeout.
    assert not retries("connect-failure", make)


@pytest.mark.parametrize("make", cases(NEVER))
@pytest.mark.parametrize("condition", ["5xx", "gateway-error", "reset", "connect-failure"])
def test_bugs_and_certificate_errors_are_never_retried(condition: str, make: object) -> None:
    assert not retries(condition, make)


@pytest.mark.parametrize("condition", ["retriable-4xx", "retriable-status-codes"])
def test_status_only_conditions_retry_no_transport_error(condition: str) -> None:
    assert not retries(condition, lambda: ConnectionResetError("reset"))


def test_the_route_says_what_it_retries_for_integrations_that_decide_themselves() -> None:
    errors = route(retry_on="connect-failure").retry_errors
    assert callable(errors)
    assert errors(httpx.ConnectError("refused"))
    assert not errors(httpx.ReadTimeout("slow"))
    assert route().retry_errors is None  # no retry_on: the policy's default


def test_5xx_names_every_5xx_status_and_reset_none() -> None:
    assert route(retry_on="5xx").retry_statuses == frozenset(range(500, 600))
    assert route(retry_on="reset").retry_statuses is None  # no status: the transports' default


@pytest.mark.parametrize(
    ("condition", "said"),
    [
        ("retriable-headers", "response headers"),
        ("envoy-ratelimited", "x-envoy-ratelimited"),
        ("http3-post-connect-failure", "HTTP/3"),
    ],
)
def test_envoy_conditions_seawall_lacks_are_refused_by_name(condition: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        route(retry_on=f"5xx,{condition}")
    assert caught.value.path == "routes.r.retry_policy.retry_on"


def test_route_timeout_includes_the_retries_and_per_try_timeout_bounds_each() -> None:
    cfg = parse_config(
        {"routes": {"r": {"timeout": "1s", "retry_policy": {"per_try_timeout": "250ms"}}}}
    )["r"]
    policy = cfg.build(clock=seawall.VirtualClock())
    assert (policy.timeout, policy.attempt_timeout) == (1.0, 0.25)


@pytest.mark.parametrize(
    ("condition", "statuses"),
    [("gateway-error", {502, 503, 504}), ("retriable-4xx", {409})],
)
def test_status_conditions_name_the_same_statuses(condition: str, statuses: set[int]) -> None:
    assert route(retry_on=condition).retry_statuses == frozenset(statuses)


def test_retriable_status_codes_adds_the_listed_codes() -> None:
    cfg = route(retry_on="retriable-status-codes", retriable_status_codes=[418, 429])
    assert cfg.retry_statuses == frozenset({418, 429})


def test_x_envoy_overloaded_stops_retries() -> None:
    assert is_overloaded({"x-envoy-overloaded": "true"})
    assert not is_overloaded({"content-type": "text/plain"})


@pytest.mark.parametrize("value", ["true", "false", "0", "", "anything"])
def test_x_envoy_overloaded_counts_by_its_presence(value: str) -> None:
    # Envoy sets the header when it sheds a request; its value carries nothing.
    assert is_overloaded({"x-envoy-overloaded": value})


def test_seawalls_own_overloaded_header_may_say_false() -> None:
    assert not is_overloaded({"x-seawall-overloaded": "false"})
    assert is_overloaded({"x-seawall-overloaded": "1"})


async def _shedding(scope: dict[str, object], receive: object, send: object) -> None:
    # 503 with x-envoy-overloaded: "false" for every request: Envoy's shape, an odd value.
    assert scope["type"] == "http"
    headers = [(b"content-length", b"0"), (b"x-envoy-overloaded", b"false")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b""})  # type: ignore[operator]


def test_a_503_carrying_x_envoy_overloaded_is_not_retried_over_http() -> None:
    seen = 0

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        nonlocal seen
        seen += 1
        await _shedding(scope, receive, send)

    cfg = route(retry_on="5xx", num_retries=3)
    transport = seawall.httpx.RetryTransport(
        cfg.build(hooks=()), retry_statuses=cfg.retry_statuses, budget=None
    )
    with serve_asgi(app) as url, httpx.Client(transport=transport) as client:
        response = client.get(f"{url}/shed")
    assert response.status_code == 503
    assert seen == 1  # 4 attempts allowed; the header stops them after the first


# -- the budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize("envoy_name", ["budget_percent", "min_retry_concurrency"])
def test_envoys_concurrent_retry_budget_is_refused_not_misread(envoy_name: str) -> None:
    # Envoy's retry_budget limits retries *in flight* to budget_percent of the requests in
    # flight (default 20 %), but at least min_retry_concurrency (default 3). seawall's budget
    # counts retries over a time window (Finagle's); reading one as the other would be wrong.
    with pytest.raises(ConfigError, match="concurrent retries") as caught:
        route(budget={envoy_name: 20})
    assert caught.value.path == f"routes.r.retry_policy.budget.{envoy_name}"


def test_the_budget_takes_finagles_names_with_finagles_meaning() -> None:
    # Finagle's RetryBudget(ttl, minRetriesPerSec, percentCanRetry).
    cfg = route(budget={"percent_can_retry": 20, "min_retries_per_sec": 0, "ttl": "10s"})
    clock = seawall.VirtualClock()
    assert cfg.budget is not None
    budget = cfg.budget.build(clock)
    assert (budget.ratio, budget.min_per_second, budget.window) == (0.2, 0.0, 10.0)
    for _ in range(50):  # 50 requests within the ttl: 20 per 100 may retry, so 10
        budget.on_request()
        clock.advance(0.1)
    allowed = sum(budget.allow_retry(ConnectionError()) for _ in range(50))
    assert allowed == 10
    clock.advance(10.0)  # past the ttl: everything has expired
    assert not budget.allow_retry(ConnectionError())


def test_min_retries_per_sec_is_a_reserve_per_ttl() -> None:
    cfg = route(budget={"percent_can_retry": 10, "min_retries_per_sec": 2, "ttl": "5s"})
    assert cfg.budget is not None
    budget = cfg.budget.build(seawall.VirtualClock())
    # No request yet: the floor alone, 2 a second over a 5-second ttl.
    assert sum(budget.allow_retry(ConnectionError()) for _ in range(20)) == 10


def test_the_former_budget_names_still_work_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="percent_can_retry"):
        cfg = route(budget={"percent": 20, "min": 3, "window": 5})
    assert cfg.budget == seawall.config.BudgetConfig(20.0, 3.0, 5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ConfigError, match="not both"):
            route(budget={"percent": 20, "percent_can_retry": 20})


def test_grpc_token_bucket_defaults_match_the_a6_example() -> None:
    bucket = seawall.TokenBucket()
    assert (bucket.max_tokens, bucket.token_ratio, bucket.tokens) == (10.0, 0.1, 10.0)
    for _ in range(4):
        bucket.on_failure(Exception())
    assert bucket.allow_retry(Exception())  # 6 > 10 / 2
    bucket.on_failure(Exception())
    assert not bucket.allow_retry(Exception())  # 5 is not above the threshold
    bucket.on_success()
    assert bucket.allow_retry(Exception())  # 5.1 is
