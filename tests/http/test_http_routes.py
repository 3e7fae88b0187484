"""Transports built from the policy registry follow its reloads on a live client."""

from __future__ import annotations

import pathlib
import ssl

import httpx
import pytest
import requests
from seawall_test_server import Server

import seawall
from seawall.httpx import AsyncRetryTransport, RetryTransport
from seawall.requests import RetryAdapter

TLS = ssl.create_default_context()

POLICIES = """
[routes.users]
retry_policy = {{ num_retries = {retries}, retry_on = "{retry_on}" }}
"""


def write(
    path: pathlib.Path, retries: int, retry_on: str = "connect-failure,gateway-error"
) -> None:
    path.write_text(POLICIES.format(retries=retries, retry_on=retry_on))


@pytest.fixture
def clock() -> seawall.VirtualClock:
    return seawall.VirtualClock()


def test_reload_changes_num_retries_of_a_live_client(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    write(file, retries=1)
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    transport = RetryTransport.from_route(registry, "users", httpx.HTTPTransport(verify=TLS))
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/flaky/9/503").status_code == 503
        assert server.count("GET", "/flaky/9/503") == 2  # num_retries = 1
        write(file, retries=3)
        assert registry.reload()
        assert transport.policy.max_attempts == 4
        assert c.get(server.url + "/flaky/9/502").status_code == 502
        assert server.count("GET", "/flaky/9/502") == 4  # the same client, now 3 retries
    assert transport.policy.name == "users"


def test_route_statuses_replace_the_defaults(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    write(file, retries=2, retry_on="gateway-error")  # 502, 503, 504: not 429
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    transport = RetryTransport.from_route(registry, "users", httpx.HTTPTransport(verify=TLS))
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/flaky/1/429").status_code == 429
        assert c.get(server.url + "/flaky/2/500").status_code == 500
        write(file, retries=2, retry_on="5xx")  # now 500-599, still not 429
        registry.reload()
        assert c.get(server.url + "/flaky/2/500").status_code == 200
    assert server.count("GET", "/flaky/1/429") == 1
    assert server.count("GET", "/flaky/2/500") == 3  # 1 before the reload, 2 after


def test_explicit_statuses_win_over_the_route(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    write(file, retries=2, retry_on="gateway-error")
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    transport = RetryTransport.from_route(
        registry, "users", httpx.HTTPTransport(verify=TLS), retry_statuses={429}
    )
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/flaky/1/429").status_code == 200
        assert c.get(server.url + "/flaky/1/503").status_code == 503


def test_a_handle_registered_in_code_follows_replace(
    server: Server, clock: seawall.VirtualClock
) -> None:
    registry = seawall.config.PolicyRegistry(clock=clock)
    handle = registry.register("svc", seawall.RetryPolicy(max_attempts=2, clock=clock, hooks=()))
    transport = RetryTransport(handle, httpx.HTTPTransport(verify=TLS), budget=None)
    with httpx.Client(transport=transport, timeout=5.0) as c:
        c.get(server.url + "/flaky/9/503")
        registry.replace("svc", max_attempts=5)
        c.get(server.url + "/flaky/9/504")
    assert server.count("GET", "/flaky/9/503") == 2
    assert server.count("GET", "/flaky/9/504") == 5


def test_the_per_name_kill_switch_reaches_the_transport(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    write(file, retries=3)
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    transport = RetryTransport.from_route(registry, "users", httpx.HTTPTransport(verify=TLS))
    registry.set_enabled(False, name="users")
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/flaky/1/503").status_code == 503
    assert server.count("GET", "/flaky/1/503") == 1


async def test_async_transport_follows_reload_and_hedges_from_the_route(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    file.write_text(
        '[routes.users]\nretry_policy = { num_retries = 1 }\nhedge = { delay = "1s" }\n'
    )
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    transport = AsyncRetryTransport.from_route(
        registry, "users", httpx.AsyncHTTPTransport(verify=TLS)
    )
    assert transport.hedge is not None
    assert transport.hedge.name == "users"
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
        r = await c.get(server.url + "/stall/1")
        assert r.text == "ok after 2"
        assert transport.hedge.wins == 1  # the copy answered; the stall would hold for 10 s
        file.write_text("[routes.users]\nretry_policy = { num_retries = 2 }\n")
        registry.reload()
        await c.get(server.url + "/flaky/9/503")
    assert server.count("GET", "/stall/1") == 2
    assert server.count("GET", "/flaky/9/503") == 3


def test_requests_adapter_follows_reload(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    file = tmp_path / "policies.toml"
    write(file, retries=0)
    registry = seawall.config.PolicyRegistry(file, clock=clock, hooks=())
    session = requests.Session()
    session.mount("http://", RetryAdapter.from_route(registry, "users"))
    with session:
        assert session.get(server.url + "/flaky/9/503", timeout=5).status_code == 503
        write(file, retries=2)
        registry.reload()
        assert session.get(server.url + "/flaky/9/504", timeout=5).status_code == 504
    assert server.count("GET", "/flaky/9/503") == 1
    assert server.count("GET", "/flaky/9/504") == 3


def test_unknown_route_and_bad_registry() -> None:
    registry = seawall.config.PolicyRegistry({"routes": {"users": {}}})
    with pytest.raises(KeyError, match="orders"):
        RetryTransport.from_route(registry, "orders")
    with pytest.raises(TypeError, match="registry"):
        RetryTransport.from_route({"routes": {}}, "users")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="registry"):
        RetryAdapter.from_route(None, "users")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="policy"):
        RetryTransport(policy=registry)  # type: ignore[arg-type]


def _conditions_registry(
    tmp_path: pathlib.Path, clock: seawall.VirtualClock, retry_on: str
) -> seawall.config.PolicyRegistry:
    file = tmp_path / "policies.toml"
    write(file, retries=2, retry_on=retry_on)
    return seawall.config.PolicyRegistry(file, clock=clock, hooks=())


def _attempts(error: BaseException) -> int:
    return len(getattr(error, seawall.http.HISTORY_ATTRIBUTE))


def test_route_connect_failure_retries_a_refused_connection_not_a_reset(
    server: Server, refused_url: str, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    registry = _conditions_registry(tmp_path, clock, "connect-failure")
    transport = RetryTransport.from_route(registry, "users", budget=None)
    with httpx.Client(transport=transport, timeout=5.0) as c:
        with pytest.raises(httpx.ConnectError) as refused:
            c.get(refused_url)
        assert _attempts(refused.value) == 3  # refused: retried twice
        with pytest.raises(httpx.TransportError) as reset:
            c.get(server.url + "/reset-head/1")
        assert _attempts(reset.value) == 1  # a reset is not a connect failure
    assert server.count("GET", "/reset-head/1") == 1
    # The note says why, in the HTTP rules' terms (not "does not match retry_on ()").
    notes = getattr(reset.value, "__notes__", [])
    assert any("is not a transport error the HTTP rules retry" in n for n in notes), notes
    assert not any("does not match retry_on" in n for n in notes), notes


def test_route_reset_retries_a_reset(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    registry = _conditions_registry(tmp_path, clock, "reset")
    transport = RetryTransport.from_route(registry, "users", budget=None)
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/reset-head/1").text == "ok after 2"
    assert server.count("GET", "/reset-head/1") == 2


def test_route_without_error_conditions_retries_no_transport_error(
    refused_url: str, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    # retriable-4xx names statuses only: not even a refused connection is retried, as in Envoy.
    registry = _conditions_registry(tmp_path, clock, "retriable-4xx")
    transport = RetryTransport.from_route(registry, "users", budget=None)
    with (
        httpx.Client(transport=transport, timeout=5.0) as c,
        pytest.raises(httpx.ConnectError) as refused,
    ):
        c.get(refused_url)
    assert _attempts(refused.value) == 1


def test_given_retry_on_wins_over_the_route(
    server: Server, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    registry = _conditions_registry(tmp_path, clock, "connect-failure")
    transport = RetryTransport.from_route(
        registry, "users", budget=None, retry_on=(httpx.ReadError, httpx.RemoteProtocolError)
    )
    with httpx.Client(transport=transport, timeout=5.0) as c:
        assert c.get(server.url + "/reset-head/1").text == "ok after 2"


async def test_async_route_conditions(
    server: Server, refused_url: str, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    registry = _conditions_registry(tmp_path, clock, "connect-failure")
    transport = AsyncRetryTransport.from_route(registry, "users", budget=None)
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
        with pytest.raises(httpx.ConnectError) as refused:
            await c.get(refused_url)
        assert _attempts(refused.value) == 3
        with pytest.raises(httpx.TransportError):
            await c.get(server.url + "/reset-head/1")
    assert server.count("GET", "/reset-head/1") == 1
    # A reload that names "reset" changes the live transport's error conditions.
    write(tmp_path / "policies.toml", retries=2, retry_on="reset")
    assert registry.reload()
    async with httpx.AsyncClient(transport=transport, timeout=5.0) as c:
        assert (await c.get(server.url + "/reset-head/2")).text == "ok after 3"


def test_requests_route_conditions(
    server: Server, refused_url: str, tmp_path: pathlib.Path, clock: seawall.VirtualClock
) -> None:
    registry = _conditions_registry(tmp_path, clock, "connect-failure")
    session = requests.Session()
    session.mount("http://", RetryAdapter.from_route(registry, "users", budget=None))
    with session:
        with pytest.raises(requests.ConnectionError) as refused:
            session.get(refused_url, timeout=5)
        assert _attempts(refused.value) == 3
        with pytest.raises(requests.ConnectionError) as reset:
            session.get(server.url + "/reset-head/1", timeout=5)
        assert _attempts(reset.value) == 1
    assert server.count("GET", "/reset-head/1") == 1
