import inspect
import itertools
import logging
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seawall
from seawall import (
    Backoff,
    DeadlineExceeded,
    Overloaded,
    Permanent,
    RetryAfter,
    RetryEvent,
    RetryPolicy,
    VirtualClock,
)


class Flaky:
    """Fails with the given errors in order, then returns 'ok'."""

    def __init__(self, *errors: BaseException, clock: VirtualClock | None = None, cost: float = 0):
        self.errors = list(errors)
        self.calls = 0
        self.clock = clock
        self.cost = cost

    def __call__(self) -> str:
        self.calls += 1
        if self.clock is not None and self.cost:
            self.clock.advance(self.cost)
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def always(make: Callable[[], BaseException]) -> Callable[[], str]:
    def fn() -> str:
        fn.calls += 1  # type: ignore[attr-defined]
        raise make()

    fn.calls = 0  # type: ignore[attr-defined]
    return fn


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


def policy(clock: VirtualClock, **kw: object) -> RetryPolicy:
    kw.setdefault("rng", random.Random(0))
    kw.setdefault("hooks", ())
    return RetryPolicy(clock=clock, **kw)  # type: ignore[arg-type]


def test_success_first_try_does_not_wait(clock: VirtualClock) -> None:
    f = Flaky()
    assert policy(clock).call(f) == "ok"
    assert f.calls == 1
    assert clock.sleeps == []


def test_retries_transient_errors_then_succeeds(clock: VirtualClock) -> None:
    f = Flaky(ConnectionError("a"), TimeoutError("b"))
    p = policy(clock, rng=random.Random(9))
    assert p.call(f) == "ok"
    assert f.calls == 3
    expected = list(itertools.islice(Backoff().delays(random.Random(9)), 2))
    assert clock.sleeps == expected
    assert clock.now() == pytest.approx(sum(expected))


def test_raises_the_original_last_exception_with_a_note(clock: VirtualClock) -> None:
    errors = [ConnectionError(f"e{i}") for i in range(3)]
    f = Flaky(*errors)
    with pytest.raises(ConnectionError) as info:
        policy(clock, name="db").call(f)
    assert info.value is errors[-1]
    (note,) = info.value.__notes__
    assert "'db'" in note and "3 attempts" in note and "attempts exhausted" in note
    assert f.calls == 3


@pytest.mark.parametrize(
    "error",
    [
        Permanent("bad input"),
        seawall.permanent(ConnectionError("marked")),
        Overloaded(),
        seawall.permanent(RetryAfter(0)),
        ValueError("not in retry_on"),
    ],
)
def test_never_retried(clock: VirtualClock, error: Exception) -> None:
    f = Flaky(error)
    with pytest.raises(type(error)) as info:
        policy(clock, retry_on=lambda e: not isinstance(error, ValueError)).call(f)
    assert info.value is error
    assert f.calls == 1
    assert clock.sleeps == []


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()])
def test_base_exceptions_propagate_at_once(clock: VirtualClock, error: BaseException) -> None:
    f = Flaky(error)
    with pytest.raises(type(error)):
        policy(clock, retry_on=BaseException).call(f)
    assert f.calls == 1


def test_retry_on_classes_tuple_and_predicate(clock: VirtualClock) -> None:
    assert policy(clock, retry_on=KeyError).call(Flaky(KeyError())) == "ok"
    assert policy(clock, retry_on=(KeyError, OSError)).call(Flaky(OSError(), KeyError())) == "ok"
    only_503 = policy(clock, retry_on=lambda e: "503" in str(e))
    assert only_503.call(Flaky(RuntimeError("503"))) == "ok"
    with pytest.raises(RuntimeError, match="404"):
        only_503.call(Flaky(RuntimeError("404")))


def test_retry_if_result(clock: VirtualClock) -> None:
    results = iter([None, None, 5])
    p = policy(clock, retry_if_result=lambda r: r is None)
    assert p.call(lambda: next(results)) == 5
    assert len(clock.sleeps) == 2
    # When every result is rejected, the last one is returned.
    p2 = policy(clock, retry_if_result=lambda r: r < 10, max_attempts=4)
    counter = itertools.count()
    assert p2.call(lambda: next(counter)) == 3
    outcome = p2.run(lambda: 1)
    assert outcome.ok and outcome.value == 1 and outcome.reason == "attempts_exhausted"


def test_run_returns_an_outcome_with_history(clock: VirtualClock) -> None:
    f = Flaky(ConnectionError("x"), clock=clock, cost=0.5)
    out = policy(clock).run(f)
    assert out.ok and out.value == "ok" and out.attempts == 2
    assert [r.number for r in out.history] == [1, 2]
    assert out.history[0].error is not None and out.history[1].error is None
    assert out.history[0].duration == pytest.approx(0.5)
    assert out.history[0].delay == pytest.approx(out.total_delay)
    failed = policy(clock, max_attempts=2).run(always(lambda: ConnectionError("down")))
    assert not failed.ok and isinstance(failed.error, ConnectionError)
    assert failed.reason == "attempts_exhausted" and failed.attempts == 2
    with pytest.raises(ConnectionError):
        failed.unwrap()


def test_timeout_gives_up_instead_of_sleeping_past_it(clock: VirtualClock) -> None:
    # Each attempt costs 1 s; waits are 2 s fixed; timeout 4 s: attempt 1 ends at 1, wait to 3,
    # attempt 2 ends at 4: no room for anything else, give up at once.
    f = always(lambda: ConnectionError("down"))

    def slow() -> str:
        clock.advance(1)
        return f()

    p = policy(clock, timeout=4.0, max_attempts=10, backoff=Backoff.constant(2.0))
    out = p.run(slow)
    assert out.reason == "deadline"
    assert f.calls == 2  # type: ignore[attr-defined]
    assert clock.now() == pytest.approx(4.0)


def test_ambient_deadline_too_short_fails_before_doing_work(clock: VirtualClock) -> None:
    f = Flaky()
    p = policy(clock, min_attempt_time=0.5)
    with seawall.deadline(0.2, clock=clock), pytest.raises(DeadlineExceeded, match="before"):
        p.call(f)
    assert f.calls == 0


def test_sync_attempt_timeout_is_visible_as_the_ambient_deadline(clock: VirtualClock) -> None:
    seen: list[float] = []

    def fn() -> str:
        seen.append(seawall.remaining())
        raise ConnectionError

    p = policy(clock, attempt_timeout=0.25, backoff=Backoff.constant(1.0))
    with pytest.raises(ConnectionError):
        p.call(fn)
    assert seen == [pytest.approx(0.25)] * 3
    # Inside a longer ambient deadline the attempt still gets its own, tighter one...
    seen.clear()
    with seawall.deadline(10, clock=clock), pytest.raises(ConnectionError):
        p.call(fn)
    assert seen == [pytest.approx(0.25)] * 3
    # ...and inside a shorter one, the ambient deadline wins.
    seen.clear()
    with seawall.deadline(0.1, clock=clock), pytest.raises(ConnectionError):
        policy(clock, attempt_timeout=0.25, max_attempts=1).call(fn)
    assert seen == [pytest.approx(0.1)]
    assert seawall.remaining() == math.inf


def test_retry_after_sets_the_next_wait(clock: VirtualClock) -> None:
    assert policy(clock).call(Flaky(RetryAfter(7.5))) == "ok"
    assert clock.sleeps == [7.5]


def test_retry_after_is_clamped_and_validated(clock: VirtualClock) -> None:
    class Pushback(ConnectionError):
        def __init__(self, retry_after: object) -> None:
            super().__init__("pushback")
            self.retry_after = retry_after

    p = policy(clock, max_retry_after=30, backoff=Backoff.constant(1.0), max_attempts=5)
    assert p.call(Flaky(Pushback(10**12), Pushback(math.nan), Pushback(-5), Pushback("9"))) == "ok"
    # huge -> clamped to 30; NaN, negative and non-numbers are ignored (the backoff applies).
    assert clock.sleeps == [30, 1.0, 1.0, 1.0]


def test_retry_after_crossing_the_deadline_gives_up_now(clock: VirtualClock) -> None:
    f = Flaky(RetryAfter(50))
    with pytest.raises(RetryAfter):
        policy(clock, timeout=10).call(f)
    assert clock.sleeps == [] and f.calls == 1


def test_kill_switch_makes_every_policy_single_attempt(clock: VirtualClock) -> None:
    seawall.set_enabled(False)
    assert not seawall.is_enabled()
    f = Flaky(ConnectionError())
    with pytest.raises(ConnectionError) as info:
        policy(clock).call(f)
    assert f.calls == 1
    assert not hasattr(info.value, "__notes__")
    seawall.set_enabled(True)
    assert policy(clock).call(Flaky(ConnectionError())) == "ok"


def test_kill_switch_per_policy_name(clock: VirtualClock) -> None:
    seawall.set_enabled(False, name="payments")
    with pytest.raises(ConnectionError):
        policy(clock, name="payments").call(Flaky(ConnectionError()))
    assert policy(clock, name="search").call(Flaky(ConnectionError())) == "ok"
    assert not seawall.is_enabled("payments") and seawall.is_enabled("search")
    seawall.set_enabled(True, name="payments")
    assert policy(clock, name="payments").call(Flaky(ConnectionError())) == "ok"


@pytest.mark.parametrize("switch", ["global", "by name"])
@pytest.mark.parametrize("entry", ["decorator", "call with a hook"])
def test_kill_switch_applies_outside_isolated_only(
    clock: VirtualClock, switch: str, entry: str
) -> None:
    """The switch, off for all or for one name, makes one attempt; inside a simulated run
    (isolated) it is ignored and the call retries. Both retry loops: the one a decorated
    function hands over to (no hooks) and the general one (a hook)."""
    import contextvars

    from seawall._core.runtime import ISOLATED

    def attempt(errors: int) -> tuple[str, int]:
        f = Flaky(*[ConnectionError() for _ in range(errors)])
        if entry == "decorator":
            wrapped = policy(clock, name="payments")(f)
        else:
            p = policy(clock, name="payments", hooks=(lambda event: None,))
            wrapped = lambda: p.call(f)  # noqa: E731
        try:
            return wrapped(), f.calls
        except ConnectionError:
            return "raised", f.calls

    def inside_isolated() -> tuple[str, int]:
        ISOLATED.set(True)
        return attempt(2)

    seawall.set_enabled(False, name="payments" if switch == "by name" else None)
    try:
        assert attempt(2) == ("raised", 1)
        assert contextvars.Context().run(inside_isolated) == ("ok", 3)
    finally:
        seawall.set_enabled(True, name="payments" if switch == "by name" else None)
    assert attempt(2) == ("ok", 3)


def test_kill_switch_from_the_environment() -> None:
    code = (
        "import seawall\n"
        "calls = []\n"
        "def f():\n"
        "    calls.append(1)\n"
        "    raise ConnectionError\n"
        "try:\n"
        "    seawall.RetryPolicy(hooks=()).call(f)\n"
        "except ConnectionError:\n"
        "    pass\n"
        "print(seawall.is_enabled(), len(calls))\n"
    )
    env = {**os.environ, "SEAWALL_RETRIES": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "1"]


def test_hooks_receive_frozen_details(clock: VirtualClock) -> None:
    events: list[RetryEvent] = []
    p = policy(clock, hooks=[events.append], name="api", max_attempts=2)
    with pytest.raises(ConnectionError):
        p.call(Flaky(ConnectionError("1"), ConnectionError("2")))
    assert [e.kind for e in events] == ["retry", "give_up"]
    retry, give_up = events
    assert retry.policy == "api" and retry.attempt == 1 and retry.delay == clock.sleeps[0]
    assert give_up.reason == "attempts_exhausted" and give_up.attempt == 2
    assert give_up.elapsed == pytest.approx(retry.delay)
    with pytest.raises(AttributeError):
        retry.delay = 0  # type: ignore[misc]


def test_default_hook_logs_scheduled_retries(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    p = RetryPolicy(clock=clock, rng=random.Random(0), name="db")
    with caplog.at_level(logging.INFO, logger="seawall"):
        p.call(Flaky(ConnectionError("boom")))
    (record,) = caplog.records
    assert record.name == "seawall" and record.levelno == logging.INFO
    assert record.seawall_policy == "db"  # type: ignore[attr-defined]
    assert record.seawall_attempt == 1  # type: ignore[attr-defined]
    assert record.seawall_delay == clock.sleeps[0]  # type: ignore[attr-defined]
    assert "boom" in record.seawall_error  # type: ignore[attr-defined]


def test_decorator_preserves_the_function(clock: VirtualClock) -> None:
    p = policy(clock)
    calls = []

    @p
    def add(a: int, b: int = 2, *, scale: int = 1) -> int:
        """Adds."""
        calls.append(a)
        if len(calls) < 2:
            raise ConnectionError
        return (a + b) * scale

    assert add(1, scale=3) == 9
    assert add.__name__ == "add" and add.__doc__ == "Adds."
    assert str(inspect.signature(add)) == "(a: int, b: int = 2, *, scale: int = 1) -> int"
    decorated = seawall.retry(max_attempts=5, clock=clock, hooks=())(
        Flaky(*[ConnectionError() for _ in range(4)])
    )
    assert decorated() == "ok"


def test_decorating_a_generator_is_refused() -> None:
    def gen() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="generator"):
        RetryPolicy()(gen)


def test_block_api(clock: VirtualClock) -> None:
    f = Flaky(ConnectionError(), ConnectionError())
    numbers = []
    for attempt in policy(clock).attempts():
        with attempt:
            numbers.append(attempt.number)
            result = f()
    assert result == "ok" and numbers == [1, 2, 3] and len(clock.sleeps) == 2

    g = always(lambda: ConnectionError("down"))
    with pytest.raises(ConnectionError):
        for attempt in policy(clock, max_attempts=2).attempts():
            with attempt:
                g()
    assert g.calls == 2  # type: ignore[attr-defined]

    h = Flaky(ValueError("permanent here"))
    with pytest.raises(ValueError):
        for attempt in policy(clock).attempts():
            with attempt:
                h()
    assert h.calls == 1


def test_instant_makes_waits_zero(clock: VirtualClock) -> None:
    p = policy(clock, backoff=Backoff.constant(100.0))
    with seawall.testing.instant():
        assert p.call(Flaky(ConnectionError(), RetryAfter(30))) == "ok"
    assert clock.sleeps == [0.0, 0.0]
    p.call(Flaky(ConnectionError()))
    assert clock.sleeps[-1] == 100.0


def test_frozen_and_replace() -> None:
    p = RetryPolicy()
    with pytest.raises(AttributeError):
        p.max_attempts = 5  # type: ignore[misc]
    q = p.replace(max_attempts=5, name="x")
    assert (q.max_attempts, q.name, p.max_attempts) == (5, "x", 3)
    assert q.backoff is p.backoff
    with pytest.raises(ValueError, match="max_attempts"):
        p.replace(max_attempts=0)


def test_nested_policies_retry_at_one_layer(clock: VirtualClock) -> None:
    leaf = always(lambda: ConnectionError("leaf down"))
    inner = policy(clock)
    middle = policy(clock)
    outer = policy(clock)
    with pytest.raises(ConnectionError):
        outer.call(middle.call, inner.call, leaf)
    assert leaf.calls == 3  # type: ignore[attr-defined]
    naive = policy(clock, retry_nested=True)
    leaf.calls = 0  # type: ignore[attr-defined]
    with pytest.raises(ConnectionError):
        naive.call(naive.call, naive.call, leaf)
    assert leaf.calls == 27  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"max_attempts": 2.5}, TypeError, "max_attempts"),
        ({"max_attempts": True}, TypeError, "max_attempts"),
        ({"backoff": 0.1}, TypeError, "backoff"),
        ({"retry_on": "ConnectionError"}, TypeError, "retry_on"),
        ({"retry_on": (ValueError, int)}, TypeError, "retry_on"),
        ({"retry_on": int}, TypeError, "retry_on"),
        ({"retry_if_result": 3}, TypeError, "retry_if_result"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"timeout": "5"}, TypeError, "timeout"),
        ({"attempt_timeout": -0.1}, ValueError, "attempt_timeout"),
        ({"max_retry_after": -1}, ValueError, "max_retry_after"),
        ({"max_retry_after": None}, TypeError, "max_retry_after"),
        ({"min_attempt_time": -1}, ValueError, "min_attempt_time"),
        ({"budget": object()}, TypeError, "budget"),
        ({"clock": object()}, TypeError, "clock"),
        ({"rng": 42}, TypeError, "rng"),
        ({"name": 42}, TypeError, "name"),
        ({"hooks": print}, TypeError, "hooks"),
        ({"hooks": [1]}, TypeError, "hooks"),
        ({"retry_nested": "yes"}, TypeError, "retry_nested"),
    ],
)
def test_bad_input(kwargs: dict[str, object], exc: type[Exception], word: str) -> None:
    with pytest.raises(exc, match=word):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.volume
@settings(max_examples=200, deadline=None)
@given(
    max_attempts=st.integers(1, 8),
    failures=st.integers(0, 10),
    timeout=st.one_of(st.none(), st.floats(0.01, 30)),
    cost=st.floats(0, 3),
    jitter=st.sampled_from(["none", "full", "equal", "decorrelated"]),
    seed=st.integers(0, 1000),
)
def test_attempts_and_deadline_are_never_exceeded(
    max_attempts: int, failures: int, timeout: float | None, cost: float, jitter: str, seed: int
) -> None:
    clock = VirtualClock()
    f = Flaky(*[ConnectionError() for _ in range(failures)], clock=clock, cost=cost)
    p = RetryPolicy(
        max_attempts=max_attempts,
        backoff=Backoff(base=0.5, cap=4, jitter=jitter),  # type: ignore[arg-type]
        timeout=timeout,
        clock=clock,
        rng=random.Random(seed),
        hooks=(),
    )
    out = p.run(f)
    assert 1 <= out.attempts <= max_attempts
    assert f.calls == out.attempts
    if out.ok:
        assert out.attempts == failures + 1
    else:
        assert out.attempts <= failures
    if timeout is None:
        assert out.ok == (failures < max_attempts)
    if timeout is not None:
        # Waits never cross the deadline: every wait ends before it.
        t = 0.0
        for record in out.history:
            t = record.started + record.duration
            if record.delay is not None:
                assert t + record.delay < timeout
    assert out.total_delay == pytest.approx(sum(clock.sleeps))


@given(seed=st.integers(0, 2**32), jitter=st.sampled_from(["full", "equal", "decorrelated"]))
def test_same_seed_same_waits(seed: int, jitter: str) -> None:
    def waits() -> list[float]:
        clock = VirtualClock()
        p = RetryPolicy(
            max_attempts=6,
            backoff=Backoff(jitter=jitter),  # type: ignore[arg-type]
            clock=clock,
            rng=random.Random(seed),
            hooks=(),
        )
        p.run(always(ConnectionError))
        return clock.sleeps

    assert waits() == waits()


class CountingBudget:
    def __init__(self) -> None:
        self.successes = 0
        self.failures = 0

    def on_request(self) -> None:
        pass

    def allow_retry(self, error: BaseException) -> bool:
        return True

    def on_success(self) -> None:
        self.successes += 1

    def on_failure(self, error: BaseException) -> None:
        self.failures += 1


def test_driver_classification_overrides_retry_on(clock: VirtualClock) -> None:
    budget = CountingBudget()
    p = policy(clock, budget=budget, retry_on=())
    # retry=True: retried although retry_on matches nothing...
    state = p.new_state(0.0)
    state.begin_attempt(0.0)
    assert state.on_error(ValueError("503"), 0.0, retry=True) is not None
    # ...but never a permanent error.
    state.begin_attempt(1.0)
    assert state.on_error(Permanent("no"), 1.0, retry=True) is None
    # retry=False: not retried, yet a failure of the dependency for the budget.
    state = p.new_state(2.0)
    state.begin_attempt(2.0)
    assert state.on_error(ConnectionError("503 to a POST"), 2.0, retry=False) is None
    assert state.reason == "not_retryable"
    assert state.on_error(RetryAfter(1), 2.0, retry=False) is None
    assert (budget.failures, budget.successes) == (3, 1)


def test_deadline_exceeded_is_retried_only_while_the_calls_own_deadline_has_room(
    clock: VirtualClock,
) -> None:
    budget = CountingBudget()
    # A hop below ran out of an attempt-level deadline: one slow attempt, worth retrying.
    f = Flaky(DeadlineExceeded("a hop needed more than the attempt had"))
    assert policy(clock, timeout=10.0, budget=budget).call(f) == "ok"
    assert f.calls == 2
    # The call's own deadline is the one that passed: never retried.
    late = Flaky(DeadlineExceeded("late"), clock=clock, cost=2.0)
    with pytest.raises(DeadlineExceeded):
        policy(clock, timeout=2.0, budget=budget).call(late)
    assert late.calls == 1
    # The retried one was a failure (a slow attempt), the final answer a success; the one past
    # the call's own deadline is neither.
    assert (budget.successes, budget.failures) == (1, 1)


def test_a_single_attempt_policy_leaves_retrying_to_the_layer_above(clock: VirtualClock) -> None:
    leaf = always(lambda: ConnectionError("down"))
    inner = policy(clock, max_attempts=1)
    with pytest.raises(ConnectionError):
        policy(clock).call(inner.call, leaf)
    assert leaf.calls == 3  # type: ignore[attr-defined]


def test_a_failing_hook_never_changes_the_outcome(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: RetryEvent) -> None:
        raise RuntimeError("metrics backend down")

    broken.observes_attempts = True  # type: ignore[attr-defined]
    p = policy(clock, hooks=[broken])
    with caplog.at_level(logging.ERROR, logger="seawall"):
        assert p.call(Flaky(ConnectionError("x"))) == "ok"
        error = ConnectionError("y")
        with pytest.raises(ConnectionError) as info:
            p.call(Flaky(error, ConnectionError(), error))
    assert info.value is error
    assert any("hook" in r.getMessage() for r in caplog.records)


def test_later_errors_are_not_chained_to_the_first(clock: VirtualClock) -> None:
    first, second, third = ConnectionError(1), ConnectionError(2), ConnectionError(3)
    with pytest.raises(ConnectionError) as info:
        policy(clock).call(Flaky(first, second, third))
    assert info.value is third
    assert third.__context__ is None
    assert second.__context__ is None

    async def main() -> None:
        errors = [ConnectionError("a"), ConnectionError("b")]

        async def fn() -> None:
            raise errors.pop(0)

        with pytest.raises(ConnectionError, match="b") as ainfo:
            await policy(clock, max_attempts=2).acall(fn)
        assert ainfo.value.__context__ is None

    seawall.testing.run(main(), clock)


def test_policies_are_hashable_whatever_sequence_the_hooks_came_in() -> None:
    a = RetryPolicy(hooks=[print])
    b = RetryPolicy(hooks=(print,))
    assert a == b
    assert hash(a) == hash(b)
    assert a.hooks == (print,)


def test_giving_up_before_an_attempt_is_reported_to_hooks(clock: VirtualClock) -> None:
    events: list[RetryEvent] = []
    with seawall.deadline(0.1, clock=clock), pytest.raises(DeadlineExceeded):
        policy(clock, hooks=[events.append], min_attempt_time=0.5).call(Flaky())
    (event,) = events
    assert (event.kind, event.reason, event.attempt) == ("give_up", "deadline", 0)
    assert isinstance(event.error, DeadlineExceeded)


def test_block_api_sees_the_attempt_deadline_and_starts_the_call_on_first_iteration(
    clock: VirtualClock,
) -> None:
    budget = CountingBudget()
    requests = []
    budget.on_request = lambda: requests.append(clock.now())  # type: ignore[method-assign]
    seen = []
    attempts = policy(clock, attempt_timeout=0.5, budget=budget).attempts()
    clock.advance(5)
    for attempt in attempts:
        with attempt:
            seen.append(seawall.remaining())
            if attempt.number == 1:
                raise ConnectionError
    assert requests == [5.0]
    assert seen == [pytest.approx(0.5)] * 2
    assert seawall.remaining() == math.inf
