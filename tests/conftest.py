"""Every test starts from the same process-wide state, and leaves none behind.

seawall keeps a few things per process on purpose (the kill switch, the testing mode of
``seawall.testing.instant()``, one retry budget per HTTP host, the counters of deadline headers
read by servers, the latches of its hot paths, the simulator's scenario registry): all of it in
or known to ``seawall._core.runtime``. A test that changes one of them (or fails half-way through
a ``try``/``finally``) must not change the next test's outcome, so this file resets all of them
around every test, with the runtime's one ``reset()``; test files do not reset them themselves.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import seawall.sim  # noqa: F401 - its built-in scenarios are registered before the first reset
from backends import backend, run  # noqa: F401 - fixtures: the async backends
from seawall._core import runtime
from seawall._policy import http as _http

# Hypothesis times each example against a deadline (200 ms) and the drawing of data against a
# health check: both time the machine, and fail a property on a loaded one. The properties hold
# or fail whatever the time they take (a test that needs a bound on time says so itself).
settings.register_profile(
    "seawall", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("seawall")


def reset_process_state() -> None:
    """Put every piece of seawall's process-wide state back as a fresh process has it."""
    runtime.reset()
    assert runtime.SWITCH.enabled and not runtime.SWITCH.disabled_names
    assert runtime.TESTING.instant == 0 and runtime.HEADER_COUNTS.accepted == 0
    assert not runtime.SCOPES.used and runtime.DEADLINE.get() is None


def pytest_configure(config: pytest.Config) -> None:
    # Tests send SIGINT to the commands they start, as Ctrl-C in a terminal does. A suite
    # started in the background of a non-interactive shell (`make test &`) inherits SIGINT
    # ignored, and so would every command it starts (an ignored signal stays ignored across
    # exec): Ctrl-C would then do nothing. Python's own handler here makes the commands start
    # with the terminal's default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
