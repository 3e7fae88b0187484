"""Envoy's route retry policy and gRPC's A6 retry policy, read by seawall's names.

Only what seawall means the same way is pinned here; what differs (and is being changed, see
docs/compat.md) is described in the page, not pinned.
"""

from __future__ import annotations

import pytest

import seawall
from seawall.config import parse_config
from seawall.http import is_overloaded


def route(**retry_policy: object) -> seawall.config.RouteConfig:
    return parse_config({"routes": {"r": {"retry_policy": retry_policy}}})["r"]


def test_num_retries_counts_retries_after_the_first_attempt() -> None:
    # Envoy: num_retries retries; gRPC: maxAttempts tries. seawall: max_attempts tries.
    assert route(num_retries=3).build().max_attempts == 4
    assert route(num_retries=0).build().max_attempts == 1


def test_max_interval_defaults_to_ten_times_base_interval() -> None:
    back_off = route(retry_back_off={"base_interval": "25ms"}).back_off
    assert (back_off.base, back_off.cap) == (0.025, 0.25)


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
