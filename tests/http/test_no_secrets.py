"""Secrets never reach logs or metric labels: real requests with an API key in the query string,
a password in the user info and a token in the headers; every emitted log record, structlog event
and metric series is searched for them.

The errors come from real failures against the test server (a refused port, resets, 503s):
requests repeats the failed URL, query string included, in its errors, and httpx's
``HTTPStatusError`` repeats the whole URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import prometheus_client
import pytest
import requests
import structlog
from seawall_test_server import Server

import seawall
import seawall.httpx
import seawall.requests
from seawall.instrumentation import Counters, MetricsHook
from seawall.instrumentation.prometheus import PrometheusRecorder
from seawall.instrumentation.structlog import StructlogHook

KEY = "qk-4f9e2d1c"  # in query strings
PASSWORD = "pw-77aa31"  # in user info
TOKEN = "tok-0b5e8c"  # in headers
SECRETS = (KEY, PASSWORD, TOKEN)


def with_user(url: str) -> str:
    return url.replace("http://", f"http://svc:{PASSWORD}@", 1)


class Emitted:
    """Everything the hooks under test emitted, as text."""

    def __init__(self) -> None:
        self.counters = Counters()
        self.registry = prometheus_client.CollectorRegistry()
        self.prometheus = PrometheusRecorder(registry=self.registry)
        self.structlog: list[dict[str, Any]] = []

    def hooks(self) -> list[Any]:
        return [StructlogHook(), MetricsHook(self.counters), MetricsHook(self.prometheus)]

    def texts(self) -> Iterator[str]:
        for entry in self.structlog:
            yield repr(entry)
        for key in self.counters.snapshot():
            yield repr(key)
        yield self.counters.format()
        yield prometheus_client.generate_latest(self.registry).decode()


def leaked(texts: Iterator[str]) -> list[str]:
    return [t[:300] for t in texts if any(s in t for s in SECRETS)]


def log_texts(records: list[logging.LogRecord]) -> Iterator[str]:
    for record in records:
        yield record.getMessage()
        yield repr(record.__dict__)


def exercise(server: Server, refused_url: str, hooks: list[Any]) -> None:
    """Failing requests whose errors name URLs with secrets, through every integration."""
    clock = seawall.VirtualClock()
    # A policy named after a URL (a route named carelessly): its metric label must be clean too.
    named = f"{server.url}/v1/charge?api_key={KEY}"
    policy = seawall.RetryPolicy(clock=clock, max_attempts=3, hooks=hooks, name=named)
    headers = {"Authorization": f"Bearer {TOKEN}", "Cookie": f"session={TOKEN}"}

    session = requests.Session()
    session.mount("http://", seawall.requests.RetryAdapter(policy, budget=None))
    with session:
        for url in (
            f"{refused_url}?api_key={KEY}",
            f"{server.url}/reset-head/10?api_key={KEY}",
            with_user(f"{server.url}/reset-body/10?api_key={KEY}"),
        ):
            with pytest.raises(requests.exceptions.RequestException):
                session.get(url, headers=headers)

    transport = seawall.httpx.RetryTransport(policy, budget=None)
    outer = seawall.RetryPolicy(
        clock=clock, hooks=hooks, retry_on=httpx.HTTPError, max_attempts=2, retry_nested=True
    )
    with httpx.Client(transport=transport, headers=headers) as client:
        for url in (
            with_user(f"{server.url}/status/503?api_key={KEY}"),
            f"{server.url}/reset-head/10?api_key={KEY}",
        ):
            outcome = outer.run(lambda u=url: client.get(u).raise_for_status())
            assert outcome.error is not None


def test_hooks_of_the_integrations_emit_no_secrets(server: Server, refused_url: str) -> None:
    emitted = Emitted()
    with structlog.testing.capture_logs() as logs:
        exercise(server, refused_url, emitted.hooks())
    emitted.structlog = logs
    # The run did log errors, and their URLs were there before redaction.
    errors = [e["error"] for e in logs if e.get("error")]
    assert any("[redacted]" in e for e in errors), errors
    assert emitted.counters.total("retries") > 0
    assert leaked(emitted.texts()) == []


def test_structlog_hook_can_be_told_to_log_everything(server: Server, refused_url: str) -> None:
    with structlog.testing.capture_logs() as logs:
        exercise(server, refused_url, [StructlogHook(redact=False)])
    assert any(KEY in repr(e) for e in logs)  # the opt-in: errors as they are


def test_the_default_logging_hook_emits_no_secrets(
    server: Server, refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    exercise(server, refused_url, [seawall.logging_hook])
    # seawall's records (urllib3's own debug lines name the URL they send, as they should).
    ours = [r for r in caplog.records if r.name.startswith("seawall")]
    assert ours
    assert leaked(log_texts(ours)) == []


def test_integrations_log_nothing_of_their_own(
    server: Server, refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # With no hooks, seawall's HTTP integrations emit no record at all (so none with a header).
    caplog.set_level(logging.DEBUG)
    exercise(server, refused_url, [])
    assert [r for r in caplog.records if r.name.startswith("seawall")] == []
