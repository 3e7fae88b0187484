"""Hedged requests in AsyncRetryTransport, against a real server: the first response wins and
the slow copy is cancelled, its connection closed. Real waits are small and bounded: the stalled
request would hold for 10 s; the copy goes after HEDGE_DELAY (1 s) and answers at once."""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Collection
from typing import Any

import httpx
import pytest
from seawall_test_server import HEDGE_DELAY, READ_TIMEOUT, WELL_BEFORE, Server

import seawall
from seawall.httpx import AsyncRetryTransport

TLS = ssl.create_default_context()


def policy(**kwargs: Any) -> seawall.RetryPolicy:
    return seawall.RetryPolicy(
        clock=seawall.VirtualClock(), rng=random.Random(2), hooks=(), **kwargs
    )


def transport(
    hedge: seawall.Hedge, methods: Collection[str] | None = None, **kwargs: Any
) -> tuple[AsyncRetryTransport, httpx.AsyncHTTPTransport]:
    inner = httpx.AsyncHTTPTransport(verify=TLS)
    kwargs.setdefault("budget", None)
    outer = AsyncRetryTransport(
        kwargs.pop("policy", policy()), inner, hedge=hedge, hedge_methods=methods, **kwargs
    )
    return outer, inner


async def test_stalled_request_is_answered_by_its_hedge(server: Server) -> None:
    hedge = seawall.Hedge(HEDGE_DELAY)
    outer, inner = transport(hedge, frozenset({"GET"}))
    started = time.monotonic()
    async with httpx.AsyncClient(transport=outer, timeout=5.0) as c:
        r = await c.get(server.url + "/stall/1")
        elapsed = time.monotonic() - started
        assert r.text == "ok after 2"  # the second copy's answer
        assert elapsed < WELL_BEFORE  # the stalled copy would hold for 10 s
        assert server.count("GET", "/stall/1") == 2  # exactly one copy more
        assert (hedge.calls, hedge.hedges, hedge.wins) == (1, 1, 1)
        # The loser was cancelled and its connection dropped: only the winner's is left, idle.
        connections = inner._pool.connections
        assert len(connections) == 1
        assert connections[0].is_idle()


async def test_fast_answer_sends_one_request(server: Server) -> None:
    # A hedge delay far above a loopback answer (a TLS handshake included) on a loaded machine:
    # the answer comes first, and the test takes no longer for it.
    hedge = seawall.Hedge(2.0)
    outer, _ = transport(hedge)
    async with httpx.AsyncClient(transport=outer, timeout=5.0) as c:
        r = await c.get(server.url + "/ok")
    assert r.text == "ok"
    assert server.count("GET", "/ok") == 1
    assert (hedge.calls, hedge.hedges) == (1, 0)


async def test_methods_not_listed_are_not_hedged(server: Server) -> None:
    # PUT is idempotent but not listed: no copy; the read timeout makes it a plain retry.
    hedge = seawall.Hedge(0.05)
    outer, _ = transport(hedge, {"GET"})
    timeout = httpx.Timeout(5.0, read=READ_TIMEOUT)
    async with httpx.AsyncClient(transport=outer, timeout=timeout) as c:
        r = await c.put(server.url + "/stall/1", content=b"v")
    assert r.text == "ok after 2"
    assert server.count("PUT", "/stall/1") == 2
    assert hedge.calls == 0


async def test_a_hedged_503_is_retried_by_the_policy(server: Server) -> None:
    hedge = seawall.Hedge(HEDGE_DELAY)
    outer, _ = transport(hedge)
    async with httpx.AsyncClient(transport=outer, timeout=5.0) as c:
        r = await c.get(server.url + "/flaky/1/503")
    assert r.text == "ok after 2"  # the first answer (503) won its attempt; the policy retried
    assert (hedge.calls, hedge.hedges) == (2, 0)


async def test_kill_switch_stops_hedges(server: Server) -> None:
    hedge = seawall.Hedge(0.05, name="reads")
    outer, _ = transport(hedge)
    seawall.set_enabled(False, name="reads")
    timeout = httpx.Timeout(5.0, read=READ_TIMEOUT)
    async with httpx.AsyncClient(transport=outer, timeout=timeout) as c:
        r = await c.get(server.url + "/stall/1")
    assert r.text == "ok after 2"  # the read timeout, then a retry; no hedge
    assert hedge.hedges == 0


async def test_shared_budget_is_not_counted_twice(server: Server) -> None:
    budget = seawall.RetryBudget()
    hedge = seawall.Hedge(HEDGE_DELAY, budget=budget)
    outer, _ = transport(hedge, budget=budget)
    async with httpx.AsyncClient(transport=outer, timeout=5.0) as c:
        await c.get(server.url + "/ok")
        await c.get(server.url + "/stall/1")
    assert budget.requests == 2  # one per logical request, from the retry loop only
    assert hedge.hedges == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"hedge": seawall.Hedge(0.05), "hedge_methods": {"GET", "POST"}}, ValueError, "POST"),
        ({"hedge": seawall.Hedge(0.05), "hedge_methods": ["patch"]}, ValueError, "idempotent"),
        ({"hedge_methods": {"GET"}}, ValueError, "hedge_methods needs a hedge"),
        ({"hedge": 0.05}, TypeError, "hedge must be a seawall.Hedge"),
        ({"hedge": seawall.Hedge(0.05), "hedge_methods": "GET"}, TypeError, "hedge_methods"),
        ({"hedge": seawall.Hedge(0.05, replicas=["a"])}, ValueError, "replicas"),
    ],
)
def test_bad_hedge_configuration_is_refused(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        AsyncRetryTransport(**kwargs)


def test_default_hedge_methods_are_get_and_head() -> None:
    t = AsyncRetryTransport(hedge=seawall.Hedge(0.05))
    assert t._hedge_methods == frozenset({"GET", "HEAD"})
    assert t.hedge is not None
