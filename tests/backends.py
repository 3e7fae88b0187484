"""The async tests run on asyncio and on trio, on virtual time for both.

A test that takes the ``run`` fixture (defined here, registered by ``conftest.py``) runs twice:
``run(main(), clock)`` runs the coroutine on seawall's :class:`~seawall.testing.VirtualEventLoop`
or on trio with :func:`seawall.testing.trio_clock`, the library's timers following *clock* in
both. The tests write their waits, cancellations and task groups with anyio, which speaks to
whichever library runs them.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

import pytest

import seawall.testing

T = TypeVar("T")

BACKENDS = ("asyncio", "trio")


class Run(Protocol):
    """``run(main(), clock=None)``: *main* run to its end on the test's backend."""

    def __call__(
        self, main: Coroutine[Any, Any, T], clock: seawall.VirtualClock | None = None
    ) -> T: ...


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The async library the test runs on."""
    return str(request.param)


@pytest.fixture
def run(backend: str) -> Run:
    """Runs a coroutine on virtual time on the test's backend."""

    def run(main: Coroutine[Any, Any, T], clock: seawall.VirtualClock | None = None) -> T:
        return seawall.testing.run(main, clock, backend=backend)

    return run
