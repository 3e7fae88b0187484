"""Retry at one layer: nested policies multiply nothing; the per-name kill switch."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import seawall
from seawall import (
    Backoff,
    Overloaded,
    RetryBudget,
    RetryEvent,
    RetryPolicy,
    VirtualClock,
    set_enabled,
)

FAST = Backoff(base=0.01, multiplier=2.0, cap=0.1)


class Leaf:
    """A dependency that always fails with a new retryable error, and counts its calls."""

    def __init__(self, error: Callable[[], Exception] = lambda: ConnectionError("down")) -> None:
        self.calls = 0
        self.errors: list[Exception] = []
        self._error = error

    def __call__(self) -> None:
        self.calls += 1
        self.errors.append(self._error())
        raise self.errors[-1]

    async def acall(self) -> None:
        self()


def layers(
    clock: VirtualClock, nested: tuple[bool, bool, bool] = (False, False, False)
) -> tuple[RetryPolicy, RetryPolicy, RetryPolicy]:
    """Outer, middle and inner policies, 3 attempts each."""
    outer, middle, inner = (
        RetryPolicy(
            max_attempts=3,
            backoff=FAST,
            clock=clock,
            hooks=(),
            retry_nested=flag,
            name=name,
        )
        for flag, name in zip(nested, ("outer", "middle", "inner"), strict=True)
    )
    return outer, middle, inner


def call_three_layers(policies: tuple[RetryPolicy, ...], leaf: Leaf) -> None:
    outer, middle, inner = policies

    def service_c() -> None:
        inner.call(leaf)

    def service_b() -> None:
        middle.call(service_c)

    outer.call(service_b)


@pytest.mark.parametrize(
    ("nested", "leaf_calls"),
    [
        ((False, False, False), 3),  # the default: only the innermost layer retries
        ((True, True, True), 27),  # every layer retries what the one below gave up on: 3**3
        ((True, False, False), 9),  # outer re-runs middle (which passes through) 3 times x 3
        ((False, True, False), 9),  # middle re-runs inner 3 times; outer passes through
        ((False, False, True), 3),  # inner is the first to see the error anyway
    ],
)
def test_three_layers_of_three_attempts(nested: tuple[bool, bool, bool], leaf_calls: int) -> None:
    clock = VirtualClock()
    leaf = Leaf()
    with pytest.raises(ConnectionError) as info:
        call_three_layers(layers(clock, nested), leaf)
    assert leaf.calls == leaf_calls
    assert info.value is leaf.errors[-1]  # the original exception, not a wrapper


def test_naive_nesting_in_tenacity_gives_27() -> None:
    tenacity = pytest.importorskip("tenacity")
    leaf = Leaf()

    def layer(fn: Callable[[], None]) -> Callable[[], None]:
        return tenacity.retry(  # type: ignore[no-any-return]
            stop=tenacity.stop_after_attempt(3),
            retry=tenacity.retry_if_exception_type(ConnectionError),
            reraise=True,
        )(fn)

    with pytest.raises(ConnectionError):
        layer(layer(layer(leaf)))()
    assert leaf.calls == 27


def test_default_one_layer_rule_per_request_over_many_requests() -> None:
    clock = VirtualClock()
    policies = layers(clock)
    leaf = Leaf()
    for _ in range(100):
        with pytest.raises(ConnectionError):
            call_three_layers(policies, leaf)
    assert leaf.calls == 3 * 100


def test_outer_layer_events_say_exhausted_below() -> None:
    clock = VirtualClock()
    seen: list[RetryEvent] = []
    outer = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=(seen.append,))
    inner = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    leaf = Leaf()
    outcome = outer.run(inner.call, leaf)
    assert outcome.reason == "exhausted_below"
    assert outcome.attempts == 1
    assert [(e.kind, e.reason) for e in seen] == [("give_up", "exhausted_below")]
    assert leaf.calls == 3


async def test_three_async_layers() -> None:
    clock = VirtualClock()
    for nested, expected in (((False, False, False), 3), ((True, True, True), 27)):
        outer, middle, inner = layers(clock, nested)
        leaf = Leaf()

        async def service_c(inner: RetryPolicy = inner, leaf: Leaf = leaf) -> None:
            await inner.acall(leaf.acall)

        async def service_b(
            middle: RetryPolicy = middle, fn: Callable[[], Awaitable[None]] = service_c
        ) -> None:
            await middle.acall(fn)

        with pytest.raises(ConnectionError):
            await outer.acall(service_b)
        assert leaf.calls == expected


def test_three_layers_as_decorators_and_blocks() -> None:
    clock = VirtualClock()
    outer, middle, inner = layers(clock)
    leaf = Leaf()

    @inner
    def service_c() -> None:
        leaf()

    def service_b() -> None:
        for attempt in middle.attempts():
            with attempt:
                service_c()

    @outer
    def service_a() -> None:
        service_b()

    with pytest.raises(ConnectionError):
        service_a()
    assert leaf.calls == 3


def test_layer_that_does_not_retry_leaves_the_error_to_the_next_one() -> None:
    # The inner layer does not retry ConnectionError at all, so it marks nothing: the middle
    # layer is the one that retries, and still only one layer does.
    clock = VirtualClock()
    outer = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    middle = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    inner = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=(), retry_on=KeyError)
    leaf = Leaf()
    with pytest.raises(ConnectionError):
        call_three_layers((outer, middle, inner), leaf)
    assert leaf.calls == 3


def test_error_given_up_by_a_budget_is_not_retried_above() -> None:
    clock = VirtualClock()
    empty = RetryBudget(ratio=0.1, min_per_second=0, clock=clock)
    outer = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    inner = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=(), budget=empty)
    leaf = Leaf()
    with pytest.raises(ConnectionError):
        outer.call(inner.call, leaf)
    # The budget refused the inner retry; the outer layer must not retry around the budget.
    assert leaf.calls == 1


def test_error_given_up_at_the_deadline_is_not_retried_above() -> None:
    clock = VirtualClock()
    outer = RetryPolicy(max_attempts=3, backoff=Backoff.constant(1.0), clock=clock, hooks=())
    inner = RetryPolicy(
        max_attempts=3, backoff=Backoff.constant(1.0), clock=clock, hooks=(), timeout=1.5
    )
    leaf = Leaf()
    with pytest.raises(ConnectionError):
        outer.call(inner.call, leaf)
    assert leaf.calls == 2  # t=0, t=1; a wait to t=2 would cross the inner deadline


def test_overloaded_propagates_through_every_layer_untouched() -> None:
    clock = VirtualClock()
    leaf = Leaf(lambda: Overloaded("shed"))
    with pytest.raises(Overloaded) as info:
        call_three_layers(layers(clock, (True, True, True)), leaf)
    assert leaf.calls == 1  # not even retry_nested retries an overload signal
    assert info.value is leaf.errors[0]


def test_a_fresh_error_above_an_exhausted_one_is_retried() -> None:
    # Translating the error (raise ... from) makes it a new failure of the outer layer's own.
    clock = VirtualClock()
    outer = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    inner = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=())
    leaf = Leaf()

    def translate() -> None:
        try:
            inner.call(leaf)
        except ConnectionError as err:
            raise TimeoutError("backend unavailable") from err

    with pytest.raises(TimeoutError):
        outer.call(translate)
    assert leaf.calls == 9


# -- kill switch -----------------------------------------------------------------------------


def test_kill_switch_per_name_at_runtime() -> None:
    clock = VirtualClock()
    db = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=(), name="db")
    cache = RetryPolicy(max_attempts=3, backoff=FAST, clock=clock, hooks=(), name="cache")

    def calls_with(policy: RetryPolicy) -> int:
        leaf = Leaf()
        with pytest.raises(ConnectionError):
            policy.call(leaf)
        return leaf.calls

    assert (calls_with(db), calls_with(cache)) == (3, 3)
    set_enabled(False, name="db")
    assert not seawall.is_enabled("db")
    assert seawall.is_enabled("cache")
    assert seawall.is_enabled()
    assert (calls_with(db), calls_with(cache)) == (1, 3)
    outcome = db.run(Leaf())
    assert (outcome.attempts, outcome.reason) == (1, "disabled")
    set_enabled(False, name="cache")
    assert (calls_with(db), calls_with(cache)) == (1, 1)
    set_enabled(True, name="db")
    assert (calls_with(db), calls_with(cache)) == (3, 1)
    set_enabled(True, name="cache")
    assert (calls_with(db), calls_with(cache)) == (3, 3)


def test_kill_switch_global_overrides_names_and_nesting() -> None:
    clock = VirtualClock()
    leaf = Leaf()
    set_enabled(False)
    assert not seawall.is_enabled() and not seawall.is_enabled("db")
    with pytest.raises(ConnectionError):
        call_three_layers(layers(clock, (True, True, True)), leaf)
    assert leaf.calls == 1  # 27 with every layer retrying, 1 with retries off
    assert clock.sleeps == []
    set_enabled(True)
    leaf = Leaf()
    with pytest.raises(ConnectionError):
        call_three_layers(layers(clock, (True, True, True)), leaf)
    assert leaf.calls == 27


def test_kill_switch_for_one_layer_of_three() -> None:
    clock = VirtualClock()
    leaf = Leaf()
    set_enabled(False, name="inner")
    with pytest.raises(ConnectionError):
        call_three_layers(layers(clock), leaf)
    # The inner layer made one attempt and did not mark the error: the middle layer retries it.
    assert leaf.calls == 3


def test_kill_switch_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="enabled"):
        set_enabled("off")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        set_enabled(False, name=3)  # type: ignore[arg-type]
