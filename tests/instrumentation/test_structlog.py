"""The structlog hook, captured with structlog's own testing helper."""

from __future__ import annotations

import pytest
import structlog

import seawall
from seawall.instrumentation.structlog import StructlogHook
from seawall.testing import VirtualClock


def test_retries_and_give_ups_are_logged_with_structured_fields() -> None:
    clock = VirtualClock()
    p = seawall.RetryPolicy(
        name="users",
        clock=clock,
        backoff=seawall.Backoff.constant(0.5),
        max_attempts=2,
        hooks=[StructlogHook()],
    )

    def down() -> None:
        raise ConnectionError("refused")

    with structlog.testing.capture_logs() as logs, pytest.raises(ConnectionError):
        p.call(down)
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("seawall.retry", "info"),
        ("seawall.give_up", "warning"),
    ]
    assert logs[0]["policy"] == "users"
    assert logs[0]["attempt"] == 1
    assert logs[0]["delay"] == 0.5
    assert logs[0]["error"] == "ConnectionError('refused')"
    assert logs[1]["reason"] == "attempts_exhausted"


def test_a_permanent_error_on_the_first_attempt_is_not_news() -> None:
    p = seawall.RetryPolicy(hooks=[StructlogHook()])

    def missing() -> None:
        raise seawall.Permanent("404")

    with structlog.testing.capture_logs() as logs, pytest.raises(seawall.Permanent):
        p.call(missing)
    assert logs == []
