"""The behaviours urllib3's and httpx-retries' own tests check, written again for seawall.

Each test runs the peer's real object beside seawall's, on the same input; where seawall
differs on purpose, the assertion pins seawall's answer and docs/compat.md says why.
"""

from __future__ import annotations

import email.utils
import random
import time

import pytest

import seawall
from seawall.http import DEFAULT_RETRY_STATUSES, IDEMPOTENT_METHODS, parse_retry_after

urllib3_retry = pytest.importorskip("urllib3.util.retry")
urllib3_exceptions = pytest.importorskip("urllib3.exceptions")
httpx_retries = pytest.importorskip("httpx_retries")

Retry = urllib3_retry.Retry
HxRetry = httpx_retries.Retry


# -- attempts: total tries against retries ------------------------------------------------


def _urllib3_attempts(total: int) -> int:
    """Attempts urllib3 makes with Retry(total=...) when every attempt fails to connect."""
    retry = Retry(total=total)
    attempts = 0
    error = urllib3_exceptions.ConnectTimeoutError("connect timed out")
    while True:
        attempts += 1
        try:
            retry = retry.increment(method="GET", url="/", error=error)
        except urllib3_exceptions.MaxRetryError:
            return attempts


@pytest.mark.parametrize("retries", [0, 1, 2, 5])
def test_max_attempts_counts_the_first_try_where_urllib3_counts_retries(retries: int) -> None:
    calls = 0

    def fails() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("refused")

    policy = seawall.RetryPolicy(
        max_attempts=retries + 1, backoff=seawall.Backoff.constant(0.0), hooks=()
    )
    outcome = policy.run(fails)
    assert outcome.attempts == calls == _urllib3_attempts(retries) == retries + 1


def test_no_retry_at_all_is_one_attempt_and_zero_attempts_is_refused() -> None:
    # urllib3: Retry(0) and Retry(False) both mean one try; seawall says max_attempts=1, and
    # refuses max_attempts=0 by name rather than reading it as "no retries".
    assert _urllib3_attempts(0) == 1
    with pytest.raises(ValueError, match="max_attempts"):
        seawall.RetryPolicy(max_attempts=0)


# -- backoff formulas -----------------------------------------------------------------------


def _urllib3_backoffs(factor: float, backoff_max: float, n: int) -> list[float]:
    """urllib3's wait before each of *n* retries (after 1, 2, ... consecutive errors)."""
    retry = Retry(total=100, backoff_factor=factor, backoff_max=backoff_max)
    waits = []
    for _ in range(n):
        retry = retry.increment(method="GET")
        waits.append(retry.get_backoff_time())
    return waits


@pytest.mark.parametrize(("factor", "backoff_max"), [(0.1, 120.0), (0.2, 1.0), (0.5, 7.0)])
def test_urllib3_backoff_is_a_seawall_backoff_with_an_immediate_first_retry(
    factor: float, backoff_max: float
) -> None:
    # urllib3: 0 before the first retry, then factor * 2**n, capped at backoff_max.
    ours = seawall.Backoff(base=2 * factor, cap=backoff_max, jitter="none", immediate_first=True)
    theirs = _urllib3_backoffs(factor, backoff_max, 14)
    assert [ours.raw(n) for n in range(14)] == pytest.approx(theirs)


def test_urllib3_jitter_is_added_before_the_cap_seawall_jitters_after_it() -> None:
    # At the cap urllib3's additive jitter is clipped away: every client waits backoff_max
    # exactly (lockstep). seawall draws full jitter from the capped value: they spread out.
    factor, cap = 0.5, 2.0
    retry = Retry(total=100, backoff_factor=factor, backoff_max=cap, backoff_jitter=1.0)
    for _ in range(10):
        retry = retry.increment(method="GET")
    theirs = {retry.get_backoff_time() for _ in range(200)}
    assert theirs == {cap}
    ours = seawall.Backoff(base=2 * factor, cap=cap, immediate_first=True)
    rng = random.Random(1)
    waits = [ours.compute(9, rng) for _ in range(200)]
    assert all(0.0 <= w <= cap for w in waits)
    assert max(waits) - min(waits) > cap / 2


def test_httpx_retries_backoff_is_a_seawall_backoff_without_jitter() -> None:
    factor, cap = 0.1, 5.0
    ours = seawall.Backoff(base=2 * factor, cap=cap, jitter="none")
    retry = HxRetry(total=20, backoff_factor=factor, backoff_jitter=0.0, max_backoff_wait=cap)
    theirs = []
    for _ in range(12):
        retry = retry.increment()
        theirs.append(retry.backoff_strategy())
    assert [ours.raw(n) for n in range(12)] == pytest.approx(theirs)


def test_httpx_retries_caps_after_jitter_seawall_before_it() -> None:
    # httpx-retries draws raw * U(1 - jitter, 1), then caps: far past the cap, nearly every
    # draw is the cap itself. seawall caps first, then draws from [0, cap].
    factor, cap = 0.1, 1.0
    retry = HxRetry(total=50, backoff_factor=factor, backoff_jitter=1.0, max_backoff_wait=cap)
    for _ in range(20):
        retry = retry.increment()
    random.seed(4)  # httpx-retries draws from the random module
    theirs = [retry.backoff_strategy() for _ in range(200)]
    assert sum(w == cap for w in theirs) > 190
    rng = random.Random(4)
    ours = [seawall.Backoff(base=2 * factor, cap=cap).compute(19, rng) for _ in range(200)]
    assert sum(w == cap for w in ours) == 0
    assert all(0.0 <= w <= cap for w in ours)


# -- Retry-After parsing --------------------------------------------------------------------


def _urllib3_parse(value: str) -> float | str:
    try:
        return float(Retry().parse_retry_after(value))
    except urllib3_exceptions.InvalidHeader:
        return "invalid"


def _httpx_retries_parse(value: str) -> float | str:
    try:
        return float(HxRetry().parse_retry_after(value))
    except ValueError:
        return "invalid"


def _seawall_parse(value: str, maximum: float = 60.0) -> float | str:
    parsed = parse_retry_after(value, maximum=maximum)
    return "invalid" if parsed is None else parsed


@pytest.mark.parametrize(
    ("value", "urllib3", "httpx_retries", "ours"),
    [
        ("0", 0.0, 0.0, 0.0),
        ("1000", 1000.0, 1000.0, 60.0),  # seawall clamps to the policy's max_retry_after
        ("\t42 ", 42.0, 42.0, 42.0),
        ("-1", "invalid", "invalid", "invalid"),
        ("+1", "invalid", "invalid", "invalid"),
        ("1.5", "invalid", "invalid", 1.5),  # a decimal fraction is tolerated
        ("\xb2", "invalid", "invalid", "invalid"),
        ("soon", "invalid", "invalid", "invalid"),
        # urllib3 clamps to its retry_after_max (6 h); httpx-retries does not parse-clamp
        ("99999999999999999999", 21600.0, 1e20, 60.0),
    ],
)
def test_retry_after_delay_seconds(
    value: str, urllib3: float | str, httpx_retries: float | str, ours: float | str
) -> None:
    assert _urllib3_parse(value) == urllib3
    assert _httpx_retries_parse(value) == httpx_retries
    assert _seawall_parse(value) == ours


@pytest.mark.parametrize("offset", [3600.0, 30.0])
def test_retry_after_http_date_in_the_future(offset: float) -> None:
    value = email.utils.formatdate(time.time() + offset, usegmt=True)
    for parsed in (
        _urllib3_parse(value),
        _httpx_retries_parse(value),
        _seawall_parse(value, maximum=1e9),
    ):
        assert isinstance(parsed, float)
        assert offset - 2.0 <= parsed <= offset + 1.0


@pytest.mark.parametrize(
    "form",
    [
        "Mon, 03 Jun 2019 11:30:12 GMT",  # IMF-fixdate
        "Monday, 03-Jun-19 11:30:12 GMT",  # obsolete RFC 850
        "Mon Jun  3 11:30:12 2019",  # obsolete asctime, no zone: UTC
    ],
)
def test_retry_after_http_date_forms(form: str) -> None:
    # 11:00:00 UTC that day is "now": every form means 1812 s. seawall takes "now" as an
    # argument (no patching of time.time needed).
    now = 1559559600.0
    assert parse_retry_after(form, now=now) == pytest.approx(1812.0)


def test_retry_after_date_in_the_past_parses_as_zero_everywhere() -> None:
    value = email.utils.formatdate(time.time() - 3600, usegmt=True)
    assert _urllib3_parse(value) == 0.0
    assert _httpx_retries_parse(value) == 0.0
    assert _seawall_parse(value) == 0.0


def test_seawall_never_raises_on_a_hostile_header() -> None:
    # urllib3 raises InvalidHeader and httpx-retries ValueError for garbage; seawall ignores it
    # (the backoff applies), whatever the bytes.
    for value in ["x" * 10_000, "\x00", "Mon, 99 Foo 99999 99:99:99 GMT", "1e309", "nan"]:
        assert parse_retry_after(value) is None
    assert parse_retry_after(b"\xff\xfe") is None


# -- which requests are retried -------------------------------------------------------------


def test_idempotent_methods_are_the_same_everywhere() -> None:
    assert frozenset(Retry.DEFAULT_ALLOWED_METHODS) == IDEMPOTENT_METHODS
    # (httpx-retries names them by http.HTTPMethod, a str enum from 3.11; before, its own
    # enum, whose str() is "HTTPMethod.GET": the value is the name in both)
    assert {getattr(m, "value", m) for m in HxRetry.RETRYABLE_METHODS} == IDEMPOTENT_METHODS


def test_default_retried_statuses() -> None:
    # urllib3 retries no status unless told (or a Retry-After comes with 413, 429 or 503);
    # httpx-retries retries 429, 502, 503, 504; seawall adds 408 Request Timeout.
    assert not Retry().status_forcelist
    assert frozenset(Retry.RETRY_AFTER_STATUS_CODES) == {413, 429, 503}
    assert {int(s) for s in HxRetry.RETRYABLE_STATUS_CODES} == {429, 502, 503, 504}
    assert frozenset({408, 429, 502, 503, 504}) == DEFAULT_RETRY_STATUSES
    assert not Retry().is_retry("GET", 503, has_retry_after=False)
    assert Retry().is_retry("GET", 503, has_retry_after=True)
    assert Retry().is_retry("GET", 413, has_retry_after=True)
    assert 413 not in DEFAULT_RETRY_STATUSES


def test_a_forcelist_with_no_method_list_retries_post_in_urllib3_only() -> None:
    # urllib3's allowed_methods=None retries every method; seawall's idempotent_methods can
    # be widened too, but a POST is only replayed with an Idempotency-Key by default.
    assert Retry(status_forcelist=[503], allowed_methods=None).is_retry("POST", 503)
    assert "POST" not in IDEMPOTENT_METHODS
