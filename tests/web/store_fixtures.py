"""Fixtures of the store view: a saga store holding runs in every state an operator looks for
(one with hostile text in its error), and the view served on a loopback port, in a thread of
this process or by a real ``seawall web --store`` process.

Loaded as a plugin (``pytest_plugins``) by the store view's test modules.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import web_servers
from web_servers import seawall_web

import seawall
from seawall import saga

#: Years ago: what is due in these stores is overdue on the real clock, and leases expired.
PAST = 1_700_000_000.0
#: An error message that is markup: the view must show it as text.
HOSTILE = "<img src=x onerror=alert(1)> & </td><script>alert(2)</script>"


class Crash(BaseException):
    """The worker process dies here (escapes the orchestrator, as a kill would end it)."""


def populate(url: str, start: float = PAST) -> None:
    """``parked`` (NEEDS_ATTENTION, card declined), ``hostile`` (NEEDS_ATTENTION, its error
    the markup of :data:`HOSTILE`), ``waiting`` (RETRYING, gateway reset), ``done``
    (SUCCEEDED) and ``held`` (its worker died inside its attempt: an expired lease)."""
    clock = seawall.VirtualClock(start=start)

    def charge(ctx: saga.StepContext) -> str:
        kind = ctx.input.get("kind")
        if kind == "decline":
            raise seawall.Permanent("card declined")
        if kind == "hostile":
            raise seawall.Permanent(HOSTILE)
        if kind == "flaky":
            raise ConnectionError("gateway reset")
        if kind == "die":
            raise Crash
        return "paid"

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(600.0), hooks=())
    order = saga.Saga(
        "order",
        [
            saga.Step("reserve", lambda ctx: "r", compensate=lambda ctx: None),
            saga.Step("charge", charge, policy=pol, on_exhausted="park"),
        ],
    )
    with saga.Orchestrator(url, [order], clock=clock, hooks=()) as orch:
        for run_id, kind in (
            ("parked", "decline"),
            ("hostile", "hostile"),
            ("waiting", "flaky"),
            ("done", "ok"),
        ):
            orch.start("order", {"kind": kind}, run_id=run_id)
        orch.run_due()
    dying = saga.Orchestrator(url, [order], clock=clock, hooks=(), worker_id="w-1")
    dying.start("order", {"kind": "die"}, run_id="held")
    with pytest.raises(Crash):
        dying.run_due()
    dying.close()


@pytest.fixture
def hostile() -> str:
    """The markup one run's error holds."""
    return HOSTILE


@pytest.fixture
def serve_view() -> Any:
    """:func:`served`, for the test modules (which cannot import this plugin's module)."""
    return served


@pytest.fixture
def seawall_web_process() -> Any:
    """:func:`seawall_web`, for the test modules."""
    return seawall_web


@pytest.fixture
def store_file(tmp_path: pathlib.Path) -> str:
    url = f"sqlite:///{tmp_path}/saga.db"
    populate(url)
    return url


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """The store view's *app* under uvicorn in a thread of this process (see
    :func:`web_servers.served`); its store closed after."""
    try:
        with web_servers.served(app) as url:
            yield url
    finally:
        app.state.store_view.close()
