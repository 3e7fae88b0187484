"""seawall's pytest plugin, loaded by pytest when seawall is installed (entry point ``pytest11``).

Fixtures for your own test suite; none is used unless a test asks for it:

* ``seawall_reset``: seawall's process-wide state (kill switch, per-host HTTP budgets,
  ``instant()`` blocks, deadline-header counters) reset before and after the test.
* ``seawall_instant``: the same, and the test runs inside :func:`seawall.testing.instant`:
  real policies, no sleeping (waits pass at once on instant time, and an attempt timeout or
  deadline on blocked async code fires after a short grace).
* ``seawall_clock``: a fresh :class:`seawall.VirtualClock` for policies built in the test
  (``RetryPolicy(clock=seawall_clock)``); asyncio code runs on it with
  :func:`seawall.testing.run`, where attempt timeouts and deadlines are virtual too.

Put ``@pytest.fixture(autouse=True)`` around ``seawall_reset`` in your ``conftest.py`` to give
every test a fresh start.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from seawall._core.clock import VirtualClock

# pytest loads this module at start-up, before a coverage tool starts measuring: seawall itself
# is imported only when a fixture is used, so that a suite measuring seawall's coverage (this
# project's own) sees all of it.

__all__ = ["seawall_clock", "seawall_instant", "seawall_reset"]


@pytest.fixture
def seawall_reset() -> Iterator[None]:
    """seawall's process-wide state reset before and after the test."""
    from seawall.testing import reset

    reset()
    yield
    reset()


@pytest.fixture
def seawall_instant(seawall_reset: None) -> Iterator[None]:
    """The test inside :func:`seawall.testing.instant`: waits pass at once, timeouts still hold
    (attempts and decisions unchanged), and blocked async attempts time out after the grace."""
    from seawall.testing import instant

    with instant():
        yield


@pytest.fixture
def seawall_clock() -> VirtualClock:
    """A virtual clock starting at 0: sleeps jump it instead of waiting."""
    from seawall._core.clock import VirtualClock

    return VirtualClock()
