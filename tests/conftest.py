"""Every test starts from the same process-wide state, and leaves none behind.

seawall keeps a few things per process on purpose: the kill switch, the testing mode of
``seawall.testing.instant()``, one retry budget per HTTP host, the counters of deadline headers
read by servers, and the simulator's scenario registry. A test that changes one of them (or
fails half-way through a ``try``/``finally``) must not change the next test's outcome, so this
file resets all of them around every test; test files do not reset them themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import seawall.testing
from backends import backend, run  # noqa: F401 - fixtures: the async backends
from seawall._core.clock import TESTING
from seawall._core.switch import SWITCH
from seawall._policy import http as _http
from seawall._strategies import deadline as _deadline
from seawall.sim import _metrics as _sim_metrics
from seawall.sim import _registry as _sim_registry

# Hypothesis times each example against a deadline (200 ms) and the drawing of data against a
# health check: both time the machine, and fail a property on a loaded one. The properties hold
# or fail whatever the time they take (a test that needs a bound on time says so itself).
settings.register_profile(
    "seawall", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("seawall")

# Importing seawall.sim registered the built-in scenarios: every test starts with those only.
_BUILT_IN_SCENARIOS = dict(_sim_registry.SCENARIOS)


def reset_process_state() -> None:
    """Put every piece of seawall's process-wide state back as a fresh process has it."""
    # The kill switch (whatever SEAWALL_RETRIES says in the shell that runs the suite: the
    # tests of the variable run in a subprocess), instant() blocks, the per-host HTTP budgets
    # (each test's server, a new port or an old one reused, starts with a fresh budget) and the
    # deadline-header counters: what seawall.testing.reset() offers users too.
    seawall.testing.reset()
    assert SWITCH.enabled and not SWITCH.disabled_names and TESTING.instant == 0
    assert not _http._HOST_BUDGETS and _deadline._COUNTERS.accepted == 0
    # The ambient deadline of the main thread's context (a scope a test entered and never left).
    _deadline._DEADLINE.set(None)
    # No override block nor deadline scope used yet, as in a fresh process: the HTTP
    # integrations look their first-attempt record up themselves (see Policies.first) until a
    # test enters one.
    _http.OVERRIDES.used = False
    _deadline.SCOPES.used = False
    # The simulator: the built-in scenarios only, and no collect_metrics() block open.
    _sim_registry.SCENARIOS.clear()
    _sim_registry.SCENARIOS.update(_BUILT_IN_SCENARIOS)
    _sim_metrics._hook = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A volume test runs many calls through lines other tests trace too: coverage (pytest-cov's
    # no_cover) skips it, so that `make test` with coverage stays about as fast as without.
    for item in items:
        if item.get_closest_marker("volume"):
            item.add_marker(pytest.mark.no_cover)


@pytest.fixture(autouse=True)
def _fresh_process_state() -> Iterator[None]:
    reset_process_state()
    yield
    reset_process_state()


@pytest.fixture
def first_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The hosts ``Policies.first`` is called for, in order (the HTTP integrations read a
    host's first-attempt record themselves while nothing else applies)."""
    called: list[object] = []
    first = _http.Policies.first

    def counted(self: _http.Policies, method: str, host: Any, *args: Any) -> Any:
        called.append(host)
        return first(self, method, host, *args)

    monkeypatch.setattr(_http.Policies, "first", counted)
    return called
