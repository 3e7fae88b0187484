"""seawall.RetryQuota beside botocore's own retry quota, token by token.

botocore's standard retry mode is driven through its real classes: ``quota.RetryQuota``, the
``RetryQuotaChecker`` that charges it (with its ``ThrottlingErrorDetector``), the
``StandardRetryConditions`` that decide a retry and the ``RetryHandler`` that ties them, called
the way botocore's endpoint calls them (``needs-retry`` after every attempt, ``after-call`` with
the final HTTP response). seawall's side is a ``RetryPolicy`` with a ``RetryQuota`` configured
explicitly to the same numbers. Both see the same outcome sequences; the tokens left are
compared after every call. ``RetryQuota.aws_standard()`` is compared the same way.

The outcomes of one attempt:

* ``"ok"``: HTTP 200;
* ``"503"``: HTTP 503 (a transient status for both);
* ``"timeout"``: a read timeout before any response;
* ``"400"``: HTTP 400 ``ValidationError``, an answer that is not retried;
* ``"throttle"``: HTTP 400 ``ThrottlingException`` (botocore charges less after throttling).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

import seawall

botocore_quota = pytest.importorskip("botocore.retries.quota")
standard = pytest.importorskip("botocore.retries.standard")
awsrequest = pytest.importorskip("botocore.awsrequest")
exceptions = pytest.importorskip("botocore.exceptions")
botocore_session = pytest.importorskip("botocore.session")

MAX_ATTEMPTS = 3
# Today's botocore standard mode (retries/standard.py, RetryQuotaChecker): 500 tokens, 14 per
# retry, 5 per retry after a throttling error, no separate timeout cost, 1 back per success at
# the first attempt, the latest retry's cost back after a success that needed retries.
BOTOCORE_CAPACITY = 500
BOTOCORE_RETRY_COST = 14
BOTOCORE_THROTTLING_COST = 5
BOTOCORE_REWARD = 1


def test_the_installed_botocore_has_the_numbers_this_suite_compares_with() -> None:
    checker = standard.RetryQuotaChecker
    assert botocore_quota.RetryQuota.INITIAL_CAPACITY == BOTOCORE_CAPACITY
    assert checker._RETRY_COST == BOTOCORE_RETRY_COST
    assert checker._THROTTLING_RETRY_COST == BOTOCORE_THROTTLING_COST
    assert checker._NO_RETRY_INCREMENT == BOTOCORE_REWARD


# -- botocore's side ------------------------------------------------------------------------


_OPERATION: Any = None


def _operation() -> Any:
    """A real operation model (STS GetCallerIdentity) from botocore's own service data."""
    global _OPERATION
    if _OPERATION is None:
        model = botocore_session.get_session().get_service_model("sts")
        _OPERATION = model.operation_model("GetCallerIdentity")
    return _OPERATION


class Botocore:
    """botocore's standard retry handler and quota, driven as its endpoint drives them."""

    def __init__(self) -> None:
        self.quota = botocore_quota.RetryQuota()
        adapter = standard.RetryEventAdapter()
        self.checker = standard.RetryQuotaChecker(
            self.quota, standard.ThrottlingErrorDetector(adapter)
        )
        self.handler = standard.RetryHandler(
            retry_policy=standard.RetryPolicy(
                retry_checker=standard.StandardRetryConditions(max_attempts=MAX_ATTEMPTS),
                retry_backoff=standard.ExponentialBackoff(),
            ),
            retry_event_adapter=adapter,
            retry_quota=self.checker,
            sleep=lambda seconds: None,
        )

    @property
    def tokens(self) -> int:
        return int(self.quota.available_capacity)

    def call(self, outcomes: Sequence[str]) -> int:
        """One API call whose attempts see *outcomes* in turn; returns the attempts made."""
        context: dict[str, Any] = {}
        attempt = 0
        http_response = None
        while True:
            outcome = outcomes[min(attempt, len(outcomes) - 1)]
            attempt += 1
            http_response, parsed, caught = _botocore_outcome(outcome)
            delay = self.handler.needs_retry(
                response=None if http_response is None else (http_response, parsed),
                attempts=attempt,
                operation=_operation(),
                caught_exception=caught,
                request_dict={"context": context},
            )
            if delay is None:
                break
        # after-call: only when a response came back (an exception skips it).
        if http_response is not None:
            self.checker.release_retry_quota(context, http_response)
        return attempt


def _botocore_outcome(outcome: str) -> tuple[Any, dict[str, Any], BaseException | None]:
    url = "https://compat.invalid/"
    if outcome == "timeout":
        return None, {}, exceptions.ReadTimeoutError(endpoint_url=url)
    status, code = {
        "ok": (200, None),
        "503": (503, "ServiceUnavailable"),
        "400": (400, "ValidationError"),
        "throttle": (400, "ThrottlingException"),
    }[outcome]
    parsed: dict[str, Any] = {"ResponseMetadata": {"HTTPStatusCode": status}}
    if code is not None:
        parsed["Error"] = {"Code": code, "Message": outcome}
    return awsrequest.AWSResponse(url, status, {}, None), parsed, None


# -- seawall's side -------------------------------------------------------------------------


class Transient(Exception):
    """A 503 or a throttling answer: retried."""


class ThrottlingException(Transient):
    """A throttling answer (named as AWS names it): retried, and cheaper in botocore."""


class Answered(Exception):
    """A 400: the service answered; not retried."""


class Seawall:
    def __init__(self, quota: seawall.RetryQuota) -> None:
        self.quota = quota
        self.policy = seawall.RetryPolicy(
            max_attempts=MAX_ATTEMPTS,
            backoff=seawall.Backoff.constant(0.0),
            retry_on=(Transient, TimeoutError),
            budget=quota,
            clock=seawall.VirtualClock(),
            hooks=(),
        )

    @property
    def tokens(self) -> int:
        return self.quota.available

    def call(self, outcomes: Sequence[str]) -> int:
        attempts = 0

        def attempt() -> str:
            nonlocal attempts
            outcome = outcomes[min(attempts, len(outcomes) - 1)]
            attempts += 1
            if outcome == "ok":
                return outcome
            if outcome == "timeout":
                raise TimeoutError("read timed out")
            if outcome == "400":
                raise Answered(outcome)
            if outcome == "throttle":
                raise ThrottlingException(outcome)
            raise Transient(outcome)

        outcome = self.policy.run(attempt)
        assert outcome.attempts == attempts
        return attempts


def explicit_quota() -> seawall.RetryQuota:
    """botocore's numbers, given one by one (a timeout costs what any retry costs)."""
    return seawall.RetryQuota(
        capacity=BOTOCORE_CAPACITY,
        retry_cost=BOTOCORE_RETRY_COST,
        timeout_cost=BOTOCORE_RETRY_COST,
        success_reward=BOTOCORE_REWARD,
    )


def side_by_side(
    calls: Sequence[Sequence[str]], quota: seawall.RetryQuota | None = None
) -> list[tuple[int, int, int, int]]:
    """(botocore attempts, seawall attempts, botocore tokens, seawall tokens) after each call."""
    boto, ours = Botocore(), Seawall(quota or explicit_quota())
    rows = []
    for outcomes in calls:
        rows.append((boto.call(outcomes), ours.call(outcomes), boto.tokens, ours.tokens))
    return rows


def assert_same(rows: list[tuple[int, int, int, int]]) -> None:
    for i, (boto_attempts, our_attempts, boto_tokens, our_tokens) in enumerate(rows):
        assert (our_attempts, our_tokens) == (boto_attempts, boto_tokens), f"call {i}"


# -- the sequences --------------------------------------------------------------------------

OUTAGE = [["503"]] * 40  # every attempt fails: the quota drains, then retries stop
RECOVERY = [["ok"]] * 30


def test_a_healthy_client_stays_full() -> None:
    rows = side_by_side([["ok"]] * 20)
    assert_same(rows)
    assert rows[-1][2] == BOTOCORE_CAPACITY


def test_a_success_after_retries_refunds_the_latest_retry() -> None:
    rows = side_by_side([["503", "ok"], ["503", "503", "ok"], ["timeout", "ok"]])
    assert_same(rows)
    # each call spent its retries and got the latest one back
    assert [r[2] for r in rows] == [500, 486, 486]


def test_an_outage_drains_the_quota_and_stops_retries_the_same_way() -> None:
    rows = side_by_side(OUTAGE + RECOVERY)
    assert_same(rows)
    attempts = [r[0] for r in rows[: len(OUTAGE)]]
    # 500 // 14 = 35 retries paid for, two per call: 17 calls retried twice, one retried once,
    # and then single attempts until successes bring tokens back.
    assert attempts[:17] == [3] * 17
    assert attempts[17] == 2
    assert set(attempts[18:]) == {1}
    assert rows[len(OUTAGE) - 1][2] == 500 - 35 * 14


def test_an_answer_after_a_retry_refunds_nothing() -> None:
    # 503 then 400: the retry's cost stays spent in both (botocore refunds on 2xx only).
    rows = side_by_side([["503", "400"], ["400"], ["503", "400"]])
    assert_same(rows)
    assert [r[2] for r in rows] == [486, 486, 472]


def test_timeouts_cost_what_any_retry_costs() -> None:
    rows = side_by_side([["timeout", "timeout", "timeout"], ["timeout", "ok"]])
    assert_same(rows)
    assert rows[0][2] == 500 - 2 * 14


def test_random_sequences_agree_call_by_call() -> None:
    rng = random.Random(12)
    kinds = ["ok", "ok", "ok", "503", "timeout", "400"]
    calls = [[rng.choice(kinds) for _ in range(MAX_ATTEMPTS)] for _ in range(600)]
    # long outages inside, so that the quota runs dry and recovers more than once
    for start in (100, 350):
        for i in range(start, start + 60):
            calls[i] = ["503", "503", rng.choice(["503", "ok"])]
    rows = side_by_side(calls)
    assert_same(rows)
    assert min(r[2] for r in rows) < 14  # the quota did run dry


# -- where seawall differs ------------------------------------------------------------------


def test_throttling_costs_less_in_botocore_and_the_same_in_an_explicit_quota() -> None:
    """botocore charges 5 after a throttling error; a RetryQuota given one ``retry_cost``
    charges it for every retry (it has no notion of throttling codes)."""
    rows = side_by_side([["throttle", "ok"], ["throttle", "throttle", "throttle"]])
    boto_tokens = [r[2] for r in rows]
    our_tokens = [r[3] for r in rows]
    assert boto_tokens == [500, 490]
    assert our_tokens == [500, 472]
    assert [r[0] for r in rows] == [r[1] for r in rows]  # the same attempts


def _throttle_aware_cost(error: BaseException) -> int:
    return BOTOCORE_THROTTLING_COST if "throttle" in str(error) else BOTOCORE_RETRY_COST


def test_a_cost_function_matches_botocore_with_throttling() -> None:
    quota = seawall.RetryQuota(
        capacity=BOTOCORE_CAPACITY,
        success_reward=BOTOCORE_REWARD,
        cost=_throttle_aware_cost,
    )
    rng = random.Random(5)
    kinds = ["ok", "ok", "503", "throttle", "timeout", "400"]
    calls = [[rng.choice(kinds) for _ in range(MAX_ATTEMPTS)] for _ in range(300)]
    assert_same(side_by_side(calls, quota))


def test_aws_standard_is_todays_botocore() -> None:
    # RetryQuota.aws_standard() tells throttling by the error's class name (or a 429 status).
    rng = random.Random(7)
    kinds = ["ok", "ok", "503", "timeout", "400", "throttle"]
    calls = [[rng.choice(kinds) for _ in range(MAX_ATTEMPTS)] for _ in range(300)]
    calls[50:110] = [["503"]] * 60
    assert_same(side_by_side(calls, seawall.RetryQuota.aws_standard()))


def test_aws_standard_legacy_has_the_former_costs() -> None:
    legacy = seawall.RetryQuota.aws_standard_legacy()
    assert (legacy.capacity, legacy.retry_cost, legacy.timeout_cost, legacy.success_reward) == (
        500,
        5,
        10,
        1,
    )
