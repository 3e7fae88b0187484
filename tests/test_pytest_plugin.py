"""seawall's pytest plugin: fixtures for users' own suites (loaded through its entry point)."""

from __future__ import annotations

import pytest

import seawall
from seawall._policy import http as _http

pytest_plugins = ["pytester"]


def test_the_plugin_is_registered(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("seawall")


def test_seawall_instant_takes_the_waits_out(seawall_instant: None) -> None:
    calls = []
    policy = seawall.RetryPolicy(max_attempts=3, hooks=(), backoff=seawall.Backoff.constant(30))

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    assert policy.call(flaky) == "ok"  # would sleep a minute without the fixture


def test_seawall_clock_is_virtual(seawall_clock: seawall.VirtualClock) -> None:
    policy = seawall.RetryPolicy(
        hooks=(), clock=seawall_clock, backoff=seawall.Backoff.constant(60)
    )
    outcome = policy.run(lambda: (_ for _ in ()).throw(ConnectionError("down")))
    assert outcome.attempts == 3
    assert seawall_clock.now() == 120.0


def test_a_users_suite_gets_a_fresh_start_from_seawall_reset(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
import pytest

@pytest.fixture(autouse=True)
def fresh(seawall_reset):
    yield
"""
    )
    pytester.makepyfile(
        """
import seawall
from seawall._policy import http

def test_one():
    seawall.set_enabled(False)
    http.budget_for_host("http://127.0.0.1:1")

def test_two():
    assert seawall.is_enabled()
    assert not http._HOST_BUDGETS
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert not _http._HOST_BUDGETS
