"""seawall's HTTP integrations, urllib3's Retry and httpx-retries on the same httpbin endpoints.

httpbin (see conftest.py) runs under waitress on 127.0.0.1; the attempts of every client on
every endpoint are counted on the server. Every client is given three attempts in all and the
same short backoff (as close as each one's formula allows) and otherwise its own defaults:

* ``seawall.httpx``: ``httpx.Client`` with ``seawall.httpx.RetryTransport``;
* ``seawall.requests``: a ``requests.Session`` with ``seawall.requests.RetryAdapter``;
* ``urllib3``: a ``requests.Session`` with ``HTTPAdapter(max_retries=Retry(total=2))``;
* ``urllib3+forcelist``: the same with ``status_forcelist=(429, 502, 503, 504)``;
* ``httpx-retries``: ``httpx.Client`` with ``httpx_retries.RetryTransport(Retry(total=2))``.

The table in docs/compat.md is this run's figures (see compat_tables.py).
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Callable
from typing import Any

import compat_tables
import pytest
from compat_httpbin import Httpbin

import seawall

httpx = pytest.importorskip("httpx")
requests = pytest.importorskip("requests")
httpx_retries = pytest.importorskip("httpx_retries")
urllib3_retry = pytest.importorskip("urllib3.util.retry")
seawall_httpx = pytest.importorskip("seawall.httpx")
seawall_requests = pytest.importorskip("seawall.requests")

pytestmark = pytest.mark.slow  # half a minute of real HTTP: backoffs, Retry-After, timeouts

CLIENTS = ["seawall.httpx", "seawall.requests", "urllib3", "urllib3+forcelist", "httpx-retries"]
CONNECT_TIMEOUT = 5.0

# (case shown in the table, method, path, read timeout in seconds)
CASES: list[tuple[str, str, str, float]] = [
    ("GET /anything", "GET", "/anything", 5.0),
    ("GET /status/503", "GET", "/status/503", 5.0),
    ("GET /status/429", "GET", "/status/429", 5.0),
    ("GET /status/502", "GET", "/status/502", 5.0),
    ("GET /status/500", "GET", "/status/500", 5.0),
    ("GET /status/404", "GET", "/status/404", 5.0),
    ("PUT /status/503", "PUT", "/status/503", 5.0),
    ("POST /status/503", "POST", "/status/503", 5.0),
    ("GET /redirect/2", "GET", "/redirect/2", 5.0),
    ("GET /delay/1, read timeout 0.3 s", "GET", "/delay/1", 0.3),
    # The server's own path for what httpbin cannot send (see conftest.py): one 503 (or 429)
    # with Retry-After: 1, then 200.
    ("GET 503 Retry-After: 1, then 200 *", "GET", "/_compat/pushback?retry_after=1", 5.0),
    (
        "GET 429 Retry-After: 1, then 200 *",
        "GET",
        "/_compat/pushback?status=429&retry_after=1",
        5.0,
    ),
    ("GET 503 Retry-After: soon, then 200 *", "GET", "/_compat/pushback?retry_after=soon", 5.0),
    (
        "GET 413 Retry-After: 1, then 200 *",
        "GET",
        "/_compat/pushback?status=413&retry_after=1",
        5.0,
    ),
]


def seawall_policy() -> seawall.RetryPolicy:
    # Waits 0.1 s then 0.2 s, no jitter, so that times compare; no budget, so that the run does
    # not depend on what other tests sent to this host.
    return seawall.RetryPolicy(
        max_attempts=3, backoff=seawall.Backoff(base=0.1, cap=1.0, jitter="none"), hooks=()
    )


def urllib3_session(forcelist: bool) -> Any:
    # backoff_factor 0.05: urllib3 waits 0 before the first retry, then 0.1 s.
    extra: dict[str, Any] = {"status_forcelist": (429, 502, 503, 504)} if forcelist else {}
    retry = urllib3_retry.Retry(total=2, backoff_factor=0.05, **extra)
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=retry))
    return session


Send = Callable[[str, str, dict[str, str], float], Any]


def make_clients() -> tuple[dict[str, Send], list[Callable[[], None]]]:
    closers: list[Callable[[], None]] = []

    def httpx_client(transport: Any) -> Send:
        client = httpx.Client(transport=transport, follow_redirects=True)
        closers.append(client.close)

        def send(method: str, url: str, headers: dict[str, str], read: float) -> Any:
            timeout = httpx.Timeout(CONNECT_TIMEOUT, read=read)
            return client.request(method, url, headers=headers, timeout=timeout).status_code

        return send

    def requests_client(session: Any) -> Send:
        closers.append(session.close)

        def send(method: str, url: str, headers: dict[str, str], read: float) -> Any:
            timeout = (CONNECT_TIMEOUT, read)
            return session.request(method, url, headers=headers, timeout=timeout).status_code

        return send

    ours = requests.Session()
    ours.mount("http://", seawall_requests.RetryAdapter(seawall_policy(), budget=None))
    # httpx-retries: 0.05 * 2**n, n from 1: waits 0.1 s then 0.2 s without jitter.
    theirs = httpx_retries.Retry(total=2, backoff_factor=0.05, backoff_jitter=0.0)
    clients = {
        "seawall.httpx": httpx_client(seawall_httpx.RetryTransport(seawall_policy(), budget=None)),
        "seawall.requests": requests_client(ours),
        "urllib3": requests_client(urllib3_session(forcelist=False)),
        "urllib3+forcelist": requests_client(urllib3_session(forcelist=True)),
        "httpx-retries": httpx_client(httpx_retries.RetryTransport(retry=theirs)),
    }
    return clients, closers


def run_table(server: Httpbin) -> list[compat_tables.Row]:
    clients, closers = make_clients()
    rows: list[compat_tables.Row] = []
    try:
        for case, method, path, read in CASES:
            cells: dict[str, compat_tables.Cell] = {}
            for name in CLIENTS:
                key = f"{name} {case}"
                started = time.perf_counter()
                try:
                    headers = {"x-compat-key": key}
                    result = str(clients[name](method, server.url + path, headers, read))
                except Exception as exc:
                    result = type(exc).__name__
                seconds = round(time.perf_counter() - started, 2)
                cells[name] = compat_tables.Cell(
                    attempts=server.count(key), result=result, seconds=seconds
                )
            rows.append(compat_tables.Row(case=case, cells=cells))
    finally:
        for close in closers:
            close()
    return rows


def versions() -> dict[str, str]:
    names = ("httpbin", "waitress", "httpx", "requests", "urllib3", "httpx-retries")
    return {name: importlib.metadata.version(name) for name in names}


@pytest.fixture(scope="module")
def table(httpbin_server: Httpbin) -> list[compat_tables.Row]:
    return run_table(httpbin_server)


def cell(table: list[compat_tables.Row], case: str, client: str) -> tuple[int, str]:
    for row in table:
        if row["case"] == case:
            c = row["cells"][client]
            return c["attempts"], c["result"]
    raise KeyError(case)


# -- seawall's behaviour, pinned ------------------------------------------------------------

SEAWALL_EXPECTED = {
    "GET /anything": (1, "200"),
    "GET /status/503": (3, "503"),  # retried; the last response is returned, not raised
    "GET /status/429": (3, "429"),
    "GET /status/502": (3, "502"),
    "GET /status/500": (1, "500"),  # a bug, which a retry repeats
    "GET /status/404": (1, "404"),
    "PUT /status/503": (3, "503"),  # PUT is idempotent
    "POST /status/503": (1, "503"),  # POST is not, without an Idempotency-Key
    "GET /redirect/2": (3, "200"),  # three hops, each one request: redirects are not retries
    "GET /delay/1, read timeout 0.3 s": (3, "ReadTimeout"),  # the original error
    "GET 503 Retry-After: 1, then 200 *": (2, "200"),
    "GET 429 Retry-After: 1, then 200 *": (2, "200"),
    "GET 503 Retry-After: soon, then 200 *": (2, "200"),  # malformed: the backoff applies
    "GET 413 Retry-After: 1, then 200 *": (1, "413"),  # 413 is not a transient status
}


@pytest.mark.parametrize("client", ["seawall.httpx", "seawall.requests"])
def test_seawall_integrations_behave_as_documented(
    table: list[compat_tables.Row], client: str
) -> None:
    for case, expected in SEAWALL_EXPECTED.items():
        assert cell(table, case, client) == expected, case


def test_seawall_waits_what_retry_after_asks(table: list[compat_tables.Row]) -> None:
    for row in table:
        if "Retry-After: 1" in row["case"] and "413" not in row["case"]:
            for client in ("seawall.httpx", "seawall.requests"):
                assert 1.0 <= row["cells"][client]["seconds"] < 3.0


# -- the peers, as run here (pinned versions in pyproject.toml) -------------------------------


def test_urllib3_retries_no_status_by_default_unless_retry_after(
    table: list[compat_tables.Row],
) -> None:
    assert cell(table, "GET /status/503", "urllib3") == (1, "503")
    assert cell(table, "GET 503 Retry-After: 1, then 200 *", "urllib3") == (2, "200")
    assert cell(table, "GET 413 Retry-After: 1, then 200 *", "urllib3") == (2, "200")
    # a malformed header reaches the caller as urllib3's InvalidHeader
    assert cell(table, "GET 503 Retry-After: soon, then 200 *", "urllib3") == (1, "InvalidHeader")
    assert cell(table, "GET /delay/1, read timeout 0.3 s", "urllib3") == (3, "ConnectionError")


def test_urllib3_raises_when_statuses_are_exhausted(table: list[compat_tables.Row]) -> None:
    assert cell(table, "GET /status/503", "urllib3+forcelist") == (3, "RetryError")
    assert cell(table, "POST /status/503", "urllib3+forcelist") == (1, "503")


def test_httpx_retries_defaults(table: list[compat_tables.Row]) -> None:
    assert cell(table, "GET /status/503", "httpx-retries") == (3, "503")
    assert cell(table, "GET /status/500", "httpx-retries") == (1, "500")
    assert cell(table, "POST /status/503", "httpx-retries") == (1, "503")


# -- the page shows this run's figures --------------------------------------------------------


def test_docs_table_is_this_runs_figures(table: list[compat_tables.Row]) -> None:
    if os.environ.get("SEAWALL_COMPAT_WRITE") == "1":
        compat_tables.write(CLIENTS, table, versions())
    data = compat_tables.read_data()
    assert data["versions"] == versions(), "re-run with SEAWALL_COMPAT_WRITE=1"
    clients, rows = compat_tables.read_page()
    assert clients == CLIENTS
    assert [r["case"] for r in rows] == [r["case"] for r in table]
    assert rows == data["rows"]  # the page renders the JSON
    for shown, measured in zip(rows, table, strict=True):
        for client in CLIENTS:
            a, b = shown["cells"][client], measured["cells"][client]
            where = f"{shown['case']} / {client}"
            assert (a["attempts"], a["result"]) == (b["attempts"], b["result"]), where
            # Times drift on a shared machine: the page's must be this run's, roughly. A loaded
            # machine only adds to a run's times (up to 0.7 s for one GET at load 18).
            slack = 0.3 + 0.5 * a["seconds"]
            assert -slack <= b["seconds"] - a["seconds"] <= slack + 1.0, where
