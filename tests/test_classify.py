"""One classification for every strategy (seawall.lowlevel.classify), and what budgets hear."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
import trio

import seawall
from backends import Run
from seawall.lowlevel import Verdict, classify, compile_errors

RETRY_ON = compile_errors((ConnectionError, TimeoutError), "retry_on")


def _exhausted(exc: BaseException) -> BaseException:
    """*exc* as an inner policy leaves it after retrying it and giving up."""
    inner = seawall.RetryPolicy(max_attempts=2, hooks=(), backoff=seawall.Backoff.constant(0.0))

    def fail() -> None:
        raise exc

    with pytest.raises(type(exc)):
        inner.call(fail)
    return exc


@pytest.mark.parametrize(
    ("error", "kwargs", "verdict"),
    [
        (ConnectionError("reset"), {}, Verdict.RETRY),
        (TimeoutError("slow"), {}, Verdict.RETRY),
        (ValueError("bad input"), {}, Verdict.ANSWERED),
        (seawall.Permanent("404"), {}, Verdict.ANSWERED),
        (seawall.permanent(ConnectionError("refused for good")), {}, Verdict.ANSWERED),
        (seawall.Overloaded(), {}, Verdict.OVERLOADED),
        # Overload wins over a permanent mark: the callee shed it, that is what matters above.
        (seawall.permanent(seawall.Overloaded()), {}, Verdict.OVERLOADED),
        (seawall.Throttled(0.5), {}, Verdict.OVERLOADED),
        (seawall.RetryAfter(1.0), {}, Verdict.RETRY),
        (seawall.RetryAfter(1.0), {"retry": False}, Verdict.FAILED),
        (seawall.DeadlineExceeded("attempt"), {}, Verdict.RETRY),
        (seawall.DeadlineExceeded("call"), {"deadline_room": False}, Verdict.NEUTRAL),
        (seawall.permanent(seawall.DeadlineExceeded("gone")), {}, Verdict.ANSWERED),
        (asyncio.CancelledError(), {}, Verdict.NEUTRAL),
        (trio.Cancelled._create(), {}, Verdict.NEUTRAL),  # trio builds it only for itself
        (KeyboardInterrupt(), {}, Verdict.NEUTRAL),
        (ValueError("503 to a POST"), {"retry": False}, Verdict.FAILED),
        (ValueError("the driver says retry"), {"retry": True}, Verdict.RETRY),
        (seawall.Permanent("never"), {"retry": True}, Verdict.ANSWERED),
    ],
)
def test_verdicts(error: BaseException, kwargs: dict[str, Any], verdict: Verdict) -> None:
    assert classify(error, RETRY_ON, **kwargs) is verdict


def test_an_error_an_inner_policy_gave_up_on_is_not_retried_again_unless_asked() -> None:
    error = _exhausted(ConnectionError("down"))
    assert classify(error, RETRY_ON) is Verdict.EXHAUSTED
    assert classify(error, RETRY_ON, retry_nested=True) is Verdict.RETRY


def test_what_a_budget_hears() -> None:
    assert [v.hears for v in Verdict] == [
        "failure",  # RETRY
        "failure",  # FAILED
        "answer",  # ANSWERED
        "failure",  # OVERLOADED
        "failure",  # EXHAUSTED
        None,  # NEUTRAL
    ]
    assert [v.retry for v in Verdict] == [True, False, False, False, False, False]


def test_predicates_and_classes_compile_to_the_same_matcher_shape() -> None:
    by_class = compile_errors(OSError, "retry_on")
    by_predicate = compile_errors(lambda e: isinstance(e, OSError), "retry_on")
    for error in (ConnectionError(), FileNotFoundError(), ValueError()):
        assert by_class(error) == by_predicate(error) == isinstance(error, OSError)
    with pytest.raises(TypeError, match="failure_on must be exception classes or a predicate"):
        compile_errors((OSError, "x"), "failure_on")
    with pytest.raises(TypeError, match="retry_on must be exception classes, got"):
        compile_errors(lambda e: True, "retry_on", predicate=False)


class Recorder:
    """A budget that records what it hears (and predates nothing: it has on_answer)."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    def on_request(self) -> None:
        self.heard.append("request")

    def allow_retry(self, error: BaseException) -> bool:
        self.heard.append("allow_retry")
        return True

    def on_success(self) -> None:
        self.heard.append("success")

    def on_answer(self, error: BaseException) -> None:
        self.heard.append("answer")

    def on_failure(self, error: BaseException) -> None:
        self.heard.append("failure")


ERRORS: list[BaseException] = [
    ConnectionError("reset"),
    ValueError("not in retry_on"),
    seawall.Permanent("404"),
    seawall.Overloaded(),
    seawall.DeadlineExceeded("slow attempt"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_retry_hedge_and_breaker_hear_the_same_thing(error: BaseException) -> None:
    # The retry policy's budget.
    retried = Recorder()
    state = seawall.RetryPolicy(max_attempts=1, hooks=(), budget=retried).new_state(0.0)
    state.begin_attempt(0.0)
    state.on_error(error, 0.0)
    # The hedge's budget: the same error in one of its attempts.
    hedged = Recorder()
    hedge = seawall.Hedge(0.1, budget=hedged)
    hedge.start_call()
    hedge.on_error(error)
    assert retried.heard == hedged.heard == ["request", _heard(error)]
    # With the same rules, the breaker counts as failures exactly what budgets hear as failures.
    breaker = seawall.CircuitBreaker(
        minimum_calls=1,
        window_calls=1,
        failure_ratio=1.0,
        failure_on=(ConnectionError, TimeoutError),
    )
    breaker.record(breaker.acquire(), error)
    assert (breaker.state == "open") == (_heard(error) == "failure")


def _heard(error: BaseException) -> str:
    return classify(error, RETRY_ON).hears or "nothing"


class Legacy:
    """A budget written against the first protocol: no on_answer."""

    def __init__(self) -> None:
        self.successes = 0

    def on_request(self) -> None: ...

    def allow_retry(self, error: BaseException) -> bool:
        return True

    def on_success(self) -> None:
        self.successes += 1

    def on_failure(self, error: BaseException) -> None: ...


def test_a_budget_without_on_answer_hears_an_answer_as_a_success() -> None:
    legacy = Legacy()
    policy = seawall.RetryPolicy(hooks=(), budget=legacy)
    with pytest.raises(ValueError):
        policy.call(_raise, ValueError("404-like"))
    assert legacy.successes == 1


def _raise(error: BaseException) -> None:
    raise error


def test_fatal_answers_do_not_refill_a_token_bucket() -> None:
    # gRPC A6 throttling: only successful RPCs refill. Drain the bucket to the threshold, then
    # answer 20 times with a fatal error: retries stay throttled.
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    policy = seawall.RetryPolicy(
        max_attempts=1, hooks=(), budget=bucket, retry_on=(ConnectionError,)
    )
    for _ in range(5):
        with pytest.raises(ConnectionError):
            policy.call(_raise, ConnectionError("unavailable"))
    assert not bucket.allow_retry(ConnectionError())
    for _ in range(20):
        with pytest.raises(ValueError):
            policy.call(_raise, ValueError("invalid argument"))
    assert bucket.tokens == 5.0
    assert not bucket.allow_retry(ConnectionError())
    policy.call(lambda: None)  # a real success refills
    assert bucket.allow_retry(ConnectionError())


def test_a_503_then_404_outage_drains_a_retry_quota() -> None:
    # The AWS SDKs refund a retry's cost only after a successful response: a retry answered by
    # a 404 keeps its cost spent, so a long "503, then 404" outage stops retries.
    quota = seawall.RetryQuota(capacity=50, retry_cost=5, timeout_cost=10, success_reward=1)
    policy = seawall.RetryPolicy(
        max_attempts=2, hooks=(), budget=quota, backoff=seawall.Backoff.constant(0.0)
    )
    for _ in range(10):
        answers = iter([ConnectionError("503"), seawall.Permanent("404")])
        with pytest.raises((ConnectionError, seawall.Permanent)):
            policy.call(lambda a=answers: _raise(next(a)))
    assert quota.available == 0


def test_an_answer_is_an_accept_for_adaptive_throttling() -> None:
    clock = seawall.VirtualClock()
    throttle = seawall.AdaptiveThrottle(clock=clock, min_requests=0)
    policy = seawall.RetryPolicy(max_attempts=1, hooks=(), budget=throttle)
    for _ in range(50):
        with pytest.raises(seawall.Permanent):
            policy.call(_raise, seawall.Permanent("404"))
    assert throttle.accepts == 50
    assert throttle.rejection_probability() == 0.0


def test_a_failing_hedge_hook_is_logged_and_the_answer_is_kept(
    caplog: pytest.LogCaptureFixture, run: Run
) -> None:
    def broken(event: object) -> None:
        raise RuntimeError("metrics down")

    clock = seawall.VirtualClock()
    hedge = seawall.Hedge(0.05, clock=clock, hooks=[broken])
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        await anyio.sleep(1.0 if calls == 1 else 0.01)
        return f"answer {calls}"

    # The second attempt wins: its "hedge" and "win" hooks both raise; the answer arrives.
    assert run(hedge.acall(fetch), clock) == "answer 2"
    assert clock.now() == pytest.approx(0.06)
    assert "failed on a win event" in caplog.text
    assert "failed on a hedge event" in caplog.text


def _hedge_handle() -> Any:
    registry = seawall.config.PolicyRegistry()
    registry.register("users", seawall.RetryPolicy())
    return registry.hedge("users")


def _generator() -> Any:
    yield 1


async def _async_generator() -> Any:
    yield 1


@pytest.mark.parametrize(
    "decorator",
    [
        seawall.RetryPolicy(),
        seawall.CircuitBreaker(),
        seawall.Pipeline(retry=seawall.RetryPolicy()),
        seawall.Hedge(0.1),
        seawall.config.PolicyRegistry().register("users", seawall.RetryPolicy()),
        _hedge_handle(),
    ],
    ids=lambda d: type(d).__name__,
)
@pytest.mark.parametrize("fn", [_generator, _async_generator], ids=["gen", "async-gen"])
def test_every_decorator_refuses_generator_functions(decorator: Any, fn: Any) -> None:
    with pytest.raises(TypeError, match="generator function"):
        decorator(fn)


def test_every_decorator_keeps_the_signature_and_the_kind_of_function() -> None:
    import inspect

    async def fetch(user: int, *, fresh: bool = False) -> str:
        return f"{user} {fresh}"

    for decorator in (
        seawall.RetryPolicy(),
        seawall.CircuitBreaker(),
        seawall.Pipeline(retry=seawall.RetryPolicy()),
        seawall.Hedge(0.1),
        seawall.config.PolicyRegistry().register("users", seawall.RetryPolicy()),
    ):
        wrapped = decorator(fetch)
        assert inspect.signature(wrapped) == inspect.signature(fetch)
        assert inspect.iscoroutinefunction(wrapped)
        assert wrapped.__name__ == "fetch"


def test_overloaded_carries_its_pushback_as_retry_after() -> None:
    shed = seawall.Overloaded("shed", retry_after=2.5)
    assert shed.retry_after == 2.5
    assert shed.retry_after_hint == 2.5  # the former name


def test_one_argument_order_for_every_kill_switch() -> None:
    registry = seawall.config.PolicyRegistry()
    registry.register("users", seawall.RetryPolicy())
    registry.set_enabled(False, name="users")
    assert not seawall.is_enabled("users")
    with pytest.warns(DeprecationWarning, match="set_enabled"):
        registry.set_enabled("users", True)  # type: ignore[arg-type]
    assert seawall.is_enabled("users")


def test_the_route_hedge_settings_have_one_name() -> None:
    registry = seawall.config.PolicyRegistry(
        {"routes": {"users": {"retry_policy": {"num_retries": 1}, "hedge": {"delay": 0.05}}}}
    )
    handle = registry.policy("users")
    assert handle.hedge_config is not None
    assert handle.hedge_config.delay == 0.05
    with pytest.warns(DeprecationWarning, match="hedge_config"):
        assert handle.hedge == handle.hedge_config


def test_a_losing_hedge_whose_cleanup_raises_is_logged_not_left_unretrieved(
    caplog: pytest.LogCaptureFixture, run: Run
) -> None:
    clock = seawall.VirtualClock()
    hedge = seawall.Hedge(0.05, clock=clock)
    calls = 0

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        mine = calls
        try:
            await anyio.sleep(1.0 if mine == 1 else 0.01)
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("connection close failed") from None
        return f"answer {mine}"

    assert run(hedge.acall(fetch), clock) == "answer 2"
    assert "failed while unwinding" in caplog.text
    assert "connection close failed" in caplog.text
