"""The process-wide state lives in (or is known to) seawall._core.runtime, reset by its reset()."""

from __future__ import annotations

import contextlib
import threading

import seawall
import seawall.http
import seawall.lowlevel
import seawall.propagation
import seawall.testing
from seawall._core import runtime
from seawall._core.clock import DEFAULT_GRACE, TESTING
from seawall._core.switch import ISOLATED, SWITCH
from seawall._strategies import deadline as _deadline
from seawall.sim import SCENARIOS, Scenario, register_scenario


def dirty_everything() -> list[object]:
    """Change every piece of process-wide state the way a test (or a program) could; returns
    the blocks left open (held, so that collecting them does not close them)."""
    seawall.set_enabled(False)
    seawall.set_enabled(False, name="billing")
    instant = seawall.testing.instant(grace=5.0)
    instant.__enter__()  # left open, as by a test that failed inside the block
    TESTING.skip(3.0)
    seawall.http.budget_for_host("http://127.0.0.1:9")
    seawall.propagation.timeout_from_headers({"grpc-timeout": "1S"}, max_seconds=5.0)
    scope = seawall.deadline(30.0)
    scope.__enter__()  # an ambient deadline left in this context
    with seawall.http.override(retries=0):
        pass
    with seawall.lowlevel.one_attempt():
        pass
    register_scenario(
        Scenario(
            "left-over", "a test's own", lambda p: None, lambda a, p: 1, lambda s, w, p: 1, print
        )
    )
    return [instant, scope]


def test_reset_puts_back_what_a_fresh_process_has() -> None:
    built_in = set(SCENARIOS)
    held = dirty_everything()
    assert len(held) == 2
    assert not SWITCH.enabled and TESTING.instant == 1 and runtime.SCOPES.used
    assert seawall.remaining() < 40.0 and "left-over" in SCENARIOS
    runtime.reset()
    assert SWITCH.enabled and SWITCH.disabled_names == frozenset()
    assert (TESTING.instant, TESTING.skipped, TESTING.grace) == (0, 0.0, DEFAULT_GRACE)
    assert seawall.propagation.deadline_header_counts().accepted == 0
    assert seawall.remaining() == float("inf")
    assert not runtime.SCOPES.used and not SWITCH.delegating
    assert set(SCENARIOS) == built_in
    # A host's budget starts afresh: a new object.
    first = seawall.http.budget_for_host("http://127.0.0.1:9")
    runtime.reset()
    assert seawall.http.budget_for_host("http://127.0.0.1:9") is not first


def test_users_reset_leaves_the_latches_another_thread_may_rely_on() -> None:
    held = dirty_everything()
    assert len(held) == 2
    seawall.testing.reset()  # runtime.reset(latches=False)
    assert SWITCH.enabled and TESTING.instant == 0
    assert runtime.SCOPES.used and SWITCH.delegating
    assert seawall.remaining() < 40.0  # this context's deadline: the user's own scope
    assert "left-over" in SCENARIOS  # a user's scenarios stay registered


def test_the_modules_share_the_runtime_objects() -> None:
    # One object each, whichever module a reader imports it from.
    assert SWITCH is runtime.SWITCH and ISOLATED is runtime.ISOLATED
    assert TESTING is runtime.TESTING
    assert _deadline.SCOPES is runtime.SCOPES and _deadline._DEADLINE is runtime.DEADLINE
    assert _deadline._COUNTERS is runtime.HEADER_COUNTS
    assert seawall.testing._INSTANT_LOCK is runtime.INSTANT_LOCK


def test_registered_resets_run_with_reset() -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def reset_mine() -> None:
        with lock:
            calls.append("reset")

    try:
        assert runtime.register(reset_mine) is reset_mine
        runtime.register(reset_mine)  # once only
        runtime.reset()
        seawall.testing.reset()
        assert calls == ["reset", "reset"]
    finally:
        runtime._RESETS.remove(reset_mine)


def test_every_change_of_the_switch_reaches_the_failure_path() -> None:
    """The failure path reads one summary of the kill switch (retries on, no name off,
    one_attempt() never entered): each way the switch changes (set_enabled, globally or by
    name, one_attempt(), both resets) must keep that summary true."""

    def attempts(name: str) -> int:
        calls: list[int] = []

        def fn() -> str:
            calls.append(1)
            if len(calls) < 3:
                raise ConnectionError("transient")
            return "ok"

        policy = seawall.RetryPolicy(name=name, hooks=(), backoff=seawall.Backoff.constant(0.0))
        with contextlib.suppress(ConnectionError):
            policy.call(fn)
        return len(calls)

    assert attempts("billing") == 3
    held = dirty_everything()  # retries off, for all and for "billing"; one_attempt() entered
    assert len(held) == 2
    assert (attempts("billing"), attempts("search")) == (1, 1)
    seawall.testing.reset()  # switch back on; one_attempt()'s latch stays
    assert (attempts("billing"), attempts("search")) == (3, 3)
    seawall.set_enabled(False, name="billing")
    assert (attempts("billing"), attempts("search")) == (1, 3)
    runtime.reset()  # the latches too: no ambient deadline, the loop without a clock
    assert (attempts("billing"), attempts("search")) == (3, 3)
    seawall.set_enabled(False)
    assert attempts("search") == 1
    seawall.set_enabled(True)
    assert attempts("search") == 3
    with seawall.lowlevel.one_attempt():
        assert attempts("search") == 1
    assert attempts("search") == 3
