"""Sharp edges a first-time user or a hostile input met: each case failed before its fix."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import seawall
from backends import Run
from seawall import config
from seawall._core import runtime
from seawall.propagation import Deadline, deadline_headers

# -- configuration: a bad default is refused even when every route overrides it -------------

#: field (below a route) -> (a bad value, a good one)
OVERRIDDEN: dict[str, tuple[Any, Any]] = {
    "timeout": (10**400, "2s"),
    "retry_policy.num_retries": (-1, 2),
    "retry_policy.per_try_timeout": (1e10, "1s"),
    "retry_policy.retry_on": ("bogus", "5xx"),
    "retry_policy.back_off.base": ("nan", "25ms"),
    "retry_policy.budget.ttl": (5e-324, "10s"),
    "hedge.delay": ("9" * 100 + "h", 0.1),
    "enabled": ("yes", True),
}


def nested(field: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``; a budget gets the field it needs besides."""
    table: dict[str, Any] = {}
    inner = table
    *parents, leaf = field.split(".")
    for key in parents:
        inner = inner.setdefault(key, {})
    inner[leaf] = value
    if parents[-1:] == ["budget"]:
        inner["percent_can_retry"] = 10
    return table


@pytest.mark.parametrize("field", sorted(OVERRIDDEN))
def test_a_bad_default_is_refused_even_when_every_route_overrides_it(field: str) -> None:
    bad, good = OVERRIDDEN[field]
    data = {
        "defaults": nested(field, bad),
        "routes": {"users": nested(field, good), "orders": nested(field, good)},
    }
    with pytest.raises(config.ConfigError) as caught:
        config.parse_config(data)
    assert caught.value.path.startswith(f"defaults.{field.split('.')[0]}"), caught.value
    # The same good value as a default is accepted.
    good_data = {**data, "defaults": nested(field, good)}
    assert set(config.parse_config(good_data)) == {"users", "orders"}


def test_default_status_codes_may_wait_for_the_routes_retry_on() -> None:
    data = {
        "defaults": {"retry_policy": {"retriable_status_codes": [409]}},
        "routes": {"users": {"retry_policy": {"retry_on": "retriable-status-codes"}}},
    }
    assert config.parse_config(data)["users"].retry_statuses == frozenset({409})
    data["routes"] = {}  # a bad default is refused with no route at all, too
    data["defaults"]["retry_policy"]["retriable_status_codes"] = [999]
    with pytest.raises(config.ConfigError, match=r"^defaults\.retry_policy\.retriable_status"):
        config.parse_config(data)


# -- values beyond a float ------------------------------------------------------------------


@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["huge", "-huge"])
def test_latency_tracker_refuses_an_int_beyond_a_float_by_name(value: int) -> None:
    tracker = seawall.LatencyTracker()
    with pytest.raises(ValueError, match=r"^seconds must be finite and >= 0, got .*401 digits"):
        tracker.record(value)
    tracker.record(0.25)
    assert tracker.count == 1


def test_deadline_headers_take_an_int_beyond_a_float_as_no_deadline() -> None:
    assert deadline_headers(10**400) == {}  # as far off as infinity: nothing to send
    passed = {"grpc-timeout": "0n", "x-request-deadline": "0"}
    assert deadline_headers(-(10**400)) == passed
    assert deadline_headers(float("-inf")) == passed
    assert deadline_headers(3.0)["x-request-deadline"] == "2995"


@pytest.mark.parametrize("clock", [0, "system", object()])
def test_deadline_after_names_a_clock_that_is_not_one(clock: object) -> None:
    with pytest.raises(TypeError, match=r"^clock must implement seawall.Clock, got "):
        Deadline.after(1.0, clock=clock)  # type: ignore[arg-type]
    virtual = seawall.VirtualClock(start=5.0)
    assert Deadline.after(1.0, clock=virtual) == Deadline(6.0, virtual)


# -- immediate_first: one immediate retry at most ------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0.0},
        {"base": 0.0, "step": 0.5},
        {"base": 0, "cap": 0, "jitter": "none"},
        {"base": 1e-300},  # no wait either
        {"base": 0.0009, "jitter": "none"},
    ],
)
def test_immediate_first_refuses_a_base_that_would_hammer(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^immediate_first=True allows one immediate retry.*base"):
        seawall.Backoff(immediate_first=True, **kwargs)
    seawall.Backoff(**kwargs)  # without immediate_first, a zero backoff is the caller's choice


@pytest.mark.parametrize("jitter", ["none", "equal", "decorrelated", "full"])
def test_immediate_first_makes_one_immediate_retry_then_waits(jitter: str) -> None:
    clock = seawall.VirtualClock()
    backoff = seawall.Backoff(base=0.01, cap=1.0, jitter=jitter, immediate_first=True)  # type: ignore[arg-type]
    policy = seawall.RetryPolicy(max_attempts=6, backoff=backoff, clock=clock, hooks=())

    def down() -> None:
        raise ConnectionError("down")

    outcome = policy.run(down)
    assert outcome.attempts == 6
    assert clock.sleeps[0] == 0.0
    assert all(wait > 0.0 for wait in clock.sleeps[1:]), clock.sleeps


# -- the budget warning, and policies named after the function -----------------------------


def test_an_unnamed_decorated_policy_is_named_after_its_function(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = seawall.VirtualClock()
    budget = seawall.RetryBudget(ratio=0.1, min_per_second=0.1, window=10.0, clock=clock)

    @seawall.retry(budget=budget, clock=clock)
    def fetch_user() -> None:
        raise ConnectionError("reset by peer")

    name = f"{test_an_unnamed_decorated_policy_is_named_after_its_function.__name__}.<locals>"
    name += ".fetch_user"
    assert fetch_user.policy.name == name  # type: ignore[attr-defined]
    notes: list[str] = []
    with caplog.at_level(logging.INFO, logger="seawall"):
        for _ in range(3):
            with pytest.raises(ConnectionError) as info:
                fetch_user()
            notes += getattr(info.value, "__notes__", [])
    scheduled = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert scheduled, caplog.records
    assert all(m.startswith(f"retry {name} scheduled in ") for m in scheduled), scheduled
    [warning, *_] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"retry budget exhausted for {name} (RetryBudget(ratio=0.1, ")
    # the budget's state: 1 call, and its 1 retry (the floor of 0.1/s over 10 s) taken
    assert "window=10.0), in the last 10 s: calls 1, retries 1, more retries allowed 0" in warning
    assert "ConnectionError('reset by peer')" in warning
    assert "budget=None" in warning  # the remedy
    assert any(f"{name}': gave up after 2 attempts" in n and "(budget)" in n for n in notes)


def test_a_refusing_budget_warns_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = seawall.VirtualClock()
    monkeypatch.setattr(runtime.BUDGET_WARNINGS, "clock", clock.now)
    spent = seawall.RetryBudget(min_per_second=0.0, ratio=0.001, window=1000.0, clock=clock)
    other = seawall.RetryBudget(min_per_second=0.0, ratio=0.001, window=1000.0, clock=clock)
    first = seawall.RetryPolicy(name="orders", budget=spent, clock=clock)
    second = seawall.RetryPolicy(name="orders", budget=other, clock=clock)

    def down() -> None:
        raise ConnectionError("down")

    def refusals(policy: seawall.RetryPolicy, calls: int) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="seawall"):
            for _ in range(calls):
                with pytest.raises(ConnectionError):
                    policy.call(down)
        return [r.getMessage() for r in caplog.records]

    # 100 refusals within the interval: one line; another budget has its own.
    [line] = refusals(first, 100)
    assert line.startswith("retry budget exhausted for orders (") and "more refused" not in line
    assert len(refusals(second, 5)) == 1
    clock.sleep(9.9)
    assert refusals(first, 20) == []
    clock.sleep(0.1)  # 10 s after the first line: the next says how many it left out
    [line, *rest] = refusals(first, 3)
    assert "is not retried (and 119 more refused since the last warning); " in line
    assert rest == []


def test_an_unnamed_policy_logs_without_a_double_space(caplog: pytest.LogCaptureFixture) -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(max_attempts=2, clock=clock)
    attempts = iter([ConnectionError("reset"), None])

    def flaky() -> str:
        error = next(attempts)
        if error is not None:
            raise error
        return "ok"

    with caplog.at_level(logging.INFO, logger="seawall"):
        assert policy.call(flaky) == "ok"
    [record] = caplog.records
    assert record.getMessage().startswith("retry scheduled in ")
    budget = seawall.RetryBudget(min_per_second=0.0, ratio=0.1, clock=clock)
    refused = seawall.RetryPolicy(budget=budget, clock=clock)
    caplog.clear()

    def down() -> None:
        raise ConnectionError("down")

    with caplog.at_level(logging.INFO, logger="seawall"), pytest.raises(ConnectionError):
        refused.call(down)
    [warning] = caplog.records
    assert warning.getMessage().startswith("retry budget exhausted for an unnamed policy (")


def test_a_policy_name_from_a_file_cannot_forge_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    # A route's name is read from a policy file and logged on every retry and budget refusal.
    name = "users\x1b[2J\nseawall: all healthy\u202e"
    clock = seawall.VirtualClock()
    budget = seawall.RetryBudget(min_per_second=0.0, ratio=0.1, clock=clock)
    for policy in (
        config.PolicyRegistry({"routes": {name: {}}}, clock=clock).policy(name),
        seawall.RetryPolicy(name=name, max_attempts=2, budget=budget, clock=clock),
    ):
        caplog.clear()

        def down() -> None:
            raise ConnectionError("down")

        with caplog.at_level(logging.INFO, logger="seawall"), pytest.raises(ConnectionError):
            policy.call(down)
        messages = [r.getMessage() for r in caplog.records]
        assert messages, caplog.records
        for message in messages:
            assert "users\\x1b[2J\\nseawall: all healthy\\u202e" in message, message
            assert message.isprintable(), message


# -- the command's output in a pipe -----------------------------------------------------------


def test_tables_keep_their_full_width_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from seawall.cli import main

    monkeypatch.delenv("COLUMNS", raising=False)
    argv = ["sim", "sweep", "--clients", "10", "--duration", "1", "--splits", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out  # captured: not a terminal, as in `seawall sim ... | less`
    assert "…" not in out
    header = next(line for line in out.splitlines() if "no_retries" in line)
    for name in ("retry_budget", "token_bucket", "adaptive_throttle", "breaker"):
        assert f" {name} " in header, header
    assert max(len(line) for line in out.splitlines()) > 80
    assert main(["sim", "amplify", "--requests", "50", "--metrics"]) == 0
    rules = [line for line in capsys.readouterr().out.splitlines() if line.startswith("──")]
    assert rules and all(len(line) == 100 for line in rules)


# -- a cancelled attempt's TimeoutError says what timed out ---------------------------------


def test_an_attempt_timeout_has_a_message(run: Run) -> None:
    import anyio

    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(
        max_attempts=2, attempt_timeout=2.0, backoff=seawall.Backoff.constant(1.0), clock=clock
    )

    @policy
    async def slow() -> None:
        await anyio.sleep(3600)

    async def main() -> BaseException:
        try:
            await slow()
        except TimeoutError as exc:
            return exc
        raise AssertionError("no timeout")

    error = run(main(), clock)
    assert type(error) is TimeoutError
    assert (
        str(error) == "attempt 2 of 'test_an_attempt_timeout_has_a_message.<locals>.slow' "
        "timed out after 2.000 s (attempt_timeout)"
    )
    limited = policy.replace(name="reads", timeout=2.5)

    async def blocks() -> BaseException:
        async for attempt in limited.attempts():
            async with attempt:
                await anyio.sleep(3600)
        raise AssertionError("no timeout")

    async def main_blocks() -> BaseException:
        try:
            return await blocks()
        except TimeoutError as exc:
            return exc

    error = run(main_blocks(), clock)
    # the first attempt's 2 s, a wait of 1 s: 0.5 s of the call's deadline is too little
    assert str(error) == "attempt 1 of 'reads' timed out after 2.000 s (attempt_timeout)"


def test_a_timeout_raised_inside_the_attempt_keeps_its_own_message(run: Run) -> None:
    clock = seawall.VirtualClock()
    policy = seawall.RetryPolicy(max_attempts=1, attempt_timeout=2.0, clock=clock)

    async def own() -> None:
        raise TimeoutError("the database said so")

    async def main() -> str:
        try:
            await policy.acall(own)
        except TimeoutError as exc:
            return str(exc)
        return ""

    assert run(main(), clock) == "the database said so"


# -- describe() shows a budget under its current names --------------------------------------


def test_describe_shows_the_budget_under_the_names_a_file_takes_today() -> None:
    budget = {"percent_can_retry": 25, "min_retries_per_sec": 2, "ttl": "30s"}
    data = {"routes": {"users": {"retry_policy": {"budget": budget}}}}
    shown = config.PolicyRegistry(data).describe()["users"]["budget"]
    assert shown == {"percent_can_retry": 25, "min_retries_per_sec": 2, "ttl": 30.0}
    # Written back as it is shown: no DeprecationWarning (an error in this suite).
    again = {"routes": {"users": {"retry_policy": {"budget": shown}}}}
    assert config.PolicyRegistry(again).describe()["users"]["budget"] == shown
