"""Untrusted response headers from the real server: seawall's integrations behave as the plain
libraries do, never worse.

A ``Content-Length`` of thousands of digits made ``RetryAdapter`` raise Python's integer
conversion ``ValueError`` (it decides whether to read the body within the attempt), where plain
requests returns the response.
"""

from __future__ import annotations

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
import seawall.httpx
import seawall.requests
from seawall._policy.http import read_within_attempt
from seawall.http import HttpRules


@pytest.mark.parametrize("digits", [4301, 5000, 60_000])
def test_requests_adapter_returns_what_requests_returns(server: Server, digits: int) -> None:
    url = f"{server.url}/huge-length/{digits}"
    plain = requests.get(url, timeout=5.0)
    session = requests.Session()
    session.mount("http://", seawall.requests.RetryAdapter(seawall.RetryPolicy(hooks=())))
    with session:
        ours = session.get(url, timeout=5.0)
    assert (ours.status_code, ours.content) == (plain.status_code, plain.content) == (200, b"ok")


@pytest.mark.parametrize("digits", [4301, 5000])
def test_httpx_transport_fails_as_httpx_does(server: Server, digits: int) -> None:
    url = f"{server.url}/huge-length/{digits}"
    with pytest.raises(httpx.RemoteProtocolError) as plain:
        httpx.get(url, timeout=5.0)
    policy = seawall.RetryPolicy(hooks=(), clock=seawall.VirtualClock())
    with (
        httpx.Client(transport=seawall.httpx.RetryTransport(policy, budget=None)) as client,
        pytest.raises(httpx.RemoteProtocolError) as ours,
    ):
        client.get(url)
    assert str(ours.value) == str(plain.value)


@pytest.mark.parametrize(
    "value",
    ["9" * 5000, "9" * 20, "1" + "0" * 19, "", " 12", "-1", "+5", "1e3", "\xb2", "١٢"],
)
def test_read_within_attempt_never_raises(value: str) -> None:
    assert read_within_attempt(value, HttpRules().buffer_limit) is False


def test_read_within_attempt_reads_small_declared_bodies() -> None:
    assert read_within_attempt("1048576", 1 << 20) is True
    assert read_within_attempt("1048577", 1 << 20) is False
    assert read_within_attempt("9" * 19, 10**19) is True
