"""The dependency-free HTTP rules: Retry-After parsing, overload signals, keys, configuration."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import math
import uuid

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import seawall
from seawall._policy import http as _http
from seawall._policy.http import HttpRules, budget_for_host, is_overloaded, parse_retry_after
from seawall._policy.http import hosts as _hosts

NOW = 1_700_000_000.0  # a fixed wall-clock time for HTTP-dates


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("120", 120.0),
        (" 7 ", 7.0),
        ("1.5", 1.5),
        (b"30", 30.0),
        (email.utils.formatdate(NOW + 90, usegmt=True), 90.0),
        (email.utils.formatdate(NOW - 90, usegmt=True), 0.0),  # in the past: now
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),  # RFC 9110's own example, long past
    ],
)
def test_valid_values(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-1",
        "+5",
        "NaN",
        "inf",
        "1e3",
        "0x10",
        "soon",
        "5s",
        "1,5",
        "\u0661",
        b"\xff\xfe",
        "Fri, 31 Feb 2015 25:61:00 GMT",
        "9" * 100,
    ],
)
def test_invalid_values_are_ignored(value: str | bytes | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_clamped_to_maximum() -> None:
    assert parse_retry_after("9" * 32, maximum=60.0) == 60.0
    far = email.utils.formatdate(NOW + 10 * 365 * 86400, usegmt=True)
    assert parse_retry_after(far, now=NOW, maximum=60.0) == 60.0


@pytest.mark.volume
@given(st.one_of(st.text(max_size=80), st.binary(max_size=80)))
def test_never_raises_and_stays_in_bounds(value: str | bytes) -> None:
    got = parse_retry_after(value, now=NOW, maximum=120.0)
    assert got is None or (math.isfinite(got) and 0.0 <= got <= 120.0)


@given(st.datetimes(timezones=st.just(datetime.timezone.utc)))
def test_any_http_date_is_bounded(when: datetime.datetime) -> None:
    value = email.utils.format_datetime(when, usegmt=True)
    got = parse_retry_after(value, now=NOW, maximum=3600.0)
    assert got is not None
    assert 0.0 <= got <= 3600.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, False),
        ({"x-envoy-overloaded": "true"}, True),
        ({"x-seawall-overloaded": "1"}, True),
        ({"x-seawall-overloaded": "0"}, False),
        ({"x-envoy-overloaded": "false"}, True),  # by presence, as Envoy means it
        ({"x-seawall-overloaded": " TRUE "}, True),
    ],
)
def test_overload_signal(headers: dict[str, str], expected: bool) -> None:
    assert is_overloaded(headers) is expected


def test_idempotency_keys_are_random_uuid4() -> None:
    keys = {_http.new_idempotency_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(uuid.UUID(k).version == 4 for k in keys)


def test_rules_normalise_methods_and_statuses() -> None:
    rules = HttpRules(retry_statuses=[503], idempotent_methods=["get", "Put"])
    assert rules.retry_statuses == frozenset({503})
    assert rules.idempotent_methods == frozenset({"GET", "PUT"})


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"retry_statuses": [True]}, ValueError, "retry_statuses"),
        ({"retry_statuses": 503}, TypeError, "retry_statuses"),
        ({"idempotent_methods": [1]}, ValueError, "idempotent_methods"),
        ({"deadline_headers": 1}, TypeError, "deadline_headers"),
        ({"buffer_limit": 1.5}, TypeError, "buffer_limit"),
    ],
)
def test_rules_validation(kwargs: dict[str, object], error: type[Exception], name: str) -> None:
    with pytest.raises(error, match=name):
        HttpRules(**kwargs)  # type: ignore[arg-type]


def test_host_budgets_are_shared_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_hosts, "MAX_HOSTS", 3)
    a = budget_for_host("http://a:80")
    assert isinstance(a, seawall.RetryBudget)
    assert budget_for_host("http://a:80") is a
    for host in ("http://b:80", "http://c:80", "http://d:80"):
        budget_for_host(host)
    assert len(_http._HOST_BUDGETS) == 3
    assert budget_for_host("http://a:80") is not a  # evicted as least recently used


@given(st.text(max_size=12))
def test_content_length_is_untrusted(value: str) -> None:
    # str.isdigit() accepts "²" and other digits that int() refuses: never an exception.
    assert _http.read_within_attempt(value, 1 << 20) in (True, False)


def test_unicode_digits_in_content_length_are_not_a_length() -> None:
    assert _http.read_within_attempt("²", 1 << 20) is False
    assert _http.read_within_attempt("١٢", 1 << 20) is False  # Arabic-Indic digits
    assert _http.read_within_attempt("12", 1 << 20) is True


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("https://api.example:443", "https://api.example"),
        ("HTTPS://User:pw@Api.Example", "https://api.example"),
        ("http://api.example:80", "http://api.example"),
        ("http://api.example:8080", "http://api.example:8080"),
        ("https://api.example:80", "https://api.example:80"),
        ("http://[::1]:80", "http://[::1]"),
        ("http://[::1]", "http://[::1]"),
        ("http://127.0.0.1:54321", "http://127.0.0.1:54321"),
    ],
)
def test_one_budget_key_per_origin(host: str, expected: str) -> None:
    assert _http.origin(host) == expected


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example:443/x",
        "HTTPS://User:pw@Api.Example/x",
        "http://api.example:8080/",
        "https://api.example:80/",
        "http://[::1]:80/",
        "http://[::1]:8443/",
        "http://127.0.0.1:54321/",
        "http://\u4e2d\u56fd.icom.museum/",
    ],
)
def test_httpx_url_parts_name_the_same_budget(url: str) -> None:
    # The httpx transports key a request by (scheme, host, port), read through the URL's
    # properties: the budget of its spelled-out netloc hears the request.
    import seawall.httpx

    u = httpx.URL(url)
    budget = budget_for_host(_http.origin(f"{u.scheme}://{u.netloc.decode('ascii')}"))
    assert isinstance(budget, seawall.RetryBudget)
    before = budget.requests
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    with httpx.Client(transport=seawall.httpx.RetryTransport(transport=mock)) as client:
        assert client.get(url).status_code == 200
    assert budget.requests == before + 1

    async def send() -> int:
        transport = seawall.httpx.AsyncRetryTransport(transport=mock)
        async with httpx.AsyncClient(transport=transport) as client:
            return (await client.get(url)).status_code

    assert asyncio.run(send()) == 200
    assert budget.requests == before + 2
