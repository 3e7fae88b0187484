"""The store view (``seawall web --store``) on each store, SQLite and PostgreSQL: its queries,
its store's clock and its actions, served on a loopback port (the page itself is tested in
``tests/web``)."""

from __future__ import annotations

import contextlib
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import seawall
from seawall import saga

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

START = 1_700_000_000.0


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode())


@contextlib.contextmanager
def served_view(url: str, *, allow_actions: bool = False) -> Iterator[str]:
    """The store view of *url* on a loopback port (uvicorn in a thread); its base URL."""
    from seawall.web import create_store_app
    from servers import serve_asgi

    app: Any = create_store_app(url, allow_actions=allow_actions)
    try:
        with serve_asgi(app) as base:
            yield base
    finally:
        app.state.store_view.close()


@pytest.fixture
def view(store_url: str) -> Iterator[tuple[str, str]]:
    clock = seawall.VirtualClock(start=START)
    flow = saga.Saga("order", [saga.Step("charge", _charge, on_exhausted="park")])
    with saga.Orchestrator(store_url, [flow], clock=clock, hooks=()) as orch:
        orch.start("order", {"ok": False}, run_id="parked")
        orch.start("order", {"ok": True}, run_id="paid")
        orch.run_due()
    with served_view(store_url, allow_actions=True) as base:
        yield base, store_url


def _charge(ctx: saga.StepContext) -> str:
    if not ctx.input["ok"]:
        raise seawall.Permanent("card declined")
    return "paid"


def test_the_view_reads_and_acts_on_each_store(view: tuple[str, str]) -> None:
    base, store_url = view
    page = get(base + "/?error=DECLINED")
    latest = page[page.index("id='latest'") :]
    assert re.findall(r"<a href='/run\?id=[^']*'>([^<]*)</a>", latest) == ["parked"]
    counts = page[page.index("id='counts'") : page.index("id='stuck'")]
    assert re.findall(r"<th scope='col'>([^<]*)</th>", counts) == [
        "saga",
        "NEEDS_ATTENTION",
        "SUCCEEDED",
        "overdue",
    ]
    run = get(base + "/run?id=parked")
    assert "Permanent: card declined" in run and "<dt>lease</dt><dd>none</dd>" in run
    token = re.search(r"name='csrf' value='([^']+)'", run)
    assert token is not None
    form = urllib.parse.urlencode({"csrf": token.group(1), "run": "parked", "op": "compensate"})
    request = urllib.request.Request(base + "/action", data=form.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:  # follows the 303
        assert response.url.endswith("/run?id=parked&done=applied")
        shown = response.read().decode()
    assert "<span id='run-status' class='status'>COMPENSATING</span>" in shown
    with saga.Orchestrator(
        store_url, [saga.Saga("order", [saga.Step("charge", _charge)])], hooks=()
    ) as orch:
        assert orch.get("parked").status is saga.Status.COMPENSATING


def test_the_view_reconnects_after_the_database_drops_it(pg_url: str) -> None:
    import urllib.error

    import psycopg

    flow = saga.Saga("order", [saga.Step("charge", _charge, on_exhausted="park")])
    with saga.Orchestrator(pg_url, [flow], hooks=()) as orch:
        orch.start("order", {"ok": False}, run_id="parked")
        orch.run_due()
    with served_view(pg_url) as base:
        assert "parked" in get(base + "/run?id=parked")
        # A restart or a failover, as the view sees it: its connection is gone.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(urllib.error.HTTPError) as info:
            get(base + "/run?id=parked")
        assert info.value.code == 503
        assert info.value.headers["Retry-After"] == "1"
        message = info.value.read().decode()
        assert "cannot be reached now" in message and "password" not in message
        assert "parked" in get(base + "/run?id=parked")  # on a new connection


def test_an_action_on_a_row_another_session_holds_is_a_503(pg_url: str) -> None:
    """With a ``lock_timeout``, an operator's action on a run whose row another session holds
    loses the conflict: the view answers 503 (try again), not 500, and the same action applies
    once the row is free."""
    import urllib.error

    import psycopg

    flow = saga.Saga("order", [saga.Step("charge", _charge, on_exhausted="park")])
    with saga.Orchestrator(pg_url, [flow], hooks=()) as orch:
        orch.start("order", {"ok": False}, run_id="parked")
        orch.run_due()
    options = urllib.parse.quote("-c lock_timeout=50ms")
    with served_view(f"{pg_url}?options={options}", allow_actions=True) as base:

        def compensate() -> Any:
            token = re.search(r"name='csrf' value='([^']+)'", get(base + "/run?id=parked"))
            assert token is not None
            fields = {"csrf": token.group(1), "run": "parked", "op": "compensate"}
            form = urllib.parse.urlencode(fields).encode()
            request = urllib.request.Request(base + "/action", data=form, method="POST")
            return urllib.request.urlopen(request, timeout=60)

        with psycopg.connect(pg_url) as holder:
            holder.execute("SELECT 1 FROM seawall_saga_runs WHERE run_id = 'parked' FOR UPDATE")
            with pytest.raises(urllib.error.HTTPError) as info:
                compensate()
            assert info.value.code == 503
            assert "busy" in info.value.read().decode()
            holder.rollback()
        with compensate() as response:
            assert response.url.endswith("/run?id=parked&done=applied")
