"""The generated first-attempt paths behave as the readable one, RetryPolicy.call()/acall().

The wrappers of decorated functions and the runners of pipelines and registry handles run the
first attempt from one text compiled at import (seawall._strategies.retry.first_attempt); the
methods ``call`` and ``acall`` are that path written out. Every scenario runs through the
readable method and through each generated variant, on virtual time, and what the caller, the
budget and the hooks see must be the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import seawall
from seawall import Overloaded, RetryEvent, RetryPolicy, Throttled, VirtualClock


class Recorder:
    """A budget that writes down what it is told (and refuses what it is told to)."""

    def __init__(self, *, refuse_call: bool = False, refuse_retry: bool = False) -> None:
        self.log: list[str] = []
        self.refuse_call = refuse_call
        self.refuse_retry = refuse_retry

    def on_request(self) -> None:
        self.log.append("request")
        if self.refuse_call:
            raise Throttled(1.0)

    def allow_retry(self, error: BaseException) -> bool:
        self.log.append(f"allow_retry {type(error).__name__}")
        return not self.refuse_retry

    def on_success(self) -> None:
        self.log.append("success")

    def on_answer(self, error: BaseException) -> None:
        self.log.append(f"answer {type(error).__name__}")

    def on_failure(self, error: BaseException) -> None:
        self.log.append(f"failure {type(error).__name__}")


class OfferingRecorder(Recorder):
    """The same, with the first_attempt() capability (its own callables, told apart)."""

    def first_attempt(self) -> tuple[Callable[[], None], Callable[[], None]]:
        def before() -> None:
            self.log.append("first request")
            if self.refuse_call:
                raise Throttled(1.0)

        def after() -> None:
            self.log.append("first success")

        return before, after


# name -> the outcomes of successive attempts: a value to return, or an exception to raise
# (made anew for each run: a policy marks the errors it gives up on).
SCENARIOS: dict[str, Callable[[], list[Any]]] = {
    "success": lambda: [1],
    "one failure": lambda: [ConnectionError("a"), 2],
    "permanent": lambda: [ValueError("bad input")],
    "exhausted": lambda: [TimeoutError("t1"), TimeoutError("t2"), TimeoutError("t3")],
    "overloaded": lambda: [Overloaded("busy")],
    "two failures": lambda: [ConnectionResetError("r"), ConnectionError("c"), 3],
}
BUDGETS: dict[str, Callable[[], Recorder | None]] = {
    "no budget": lambda: None,
    "budget": Recorder,
    "offering budget": OfferingRecorder,
    "refusing retries": lambda: Recorder(refuse_retry=True),
    "refusing calls": lambda: OfferingRecorder(refuse_call=True),
}


def make(scenario: str, budget: str) -> tuple[RetryPolicy, list[Any], Recorder | None]:
    """A fresh policy (virtual clock, seeded jitter, recording hook and budget) and its trace."""
    trace: list[Any] = []
    recorder = BUDGETS[budget]()

    def hook(event: RetryEvent) -> None:
        error = None if event.error is None else type(event.error).__name__
        trace.append(("event", event.kind, event.attempt, error, event.delay, event.reason))

    policy = RetryPolicy(
        name="op",
        clock=VirtualClock(),
        rng=random.Random(7),
        hooks=[hook],
        budget=recorder,
    )
    return policy, trace, recorder


def target(scenario: str) -> Callable[..., Any]:
    outcomes = iter(SCENARIOS[scenario]())

    def fn(x: int, *, y: int = 0) -> Any:
        outcome = next(outcomes)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome * 10 + x + y

    return fn


def ended(trace: list[Any], recorder: Recorder | None, result: Any, error: Any) -> list[Any]:
    if error is not None:
        notes = getattr(error, "__notes__", [])
        trace.append(("raised", type(error).__name__, str(error), notes))
    else:
        trace.append(("returned", result))
    return [*trace, ("budget", None if recorder is None else recorder.log)]


SYNC: dict[str, Callable[[RetryPolicy, Callable[..., Any]], Any]] = {
    "call() (readable)": lambda p, fn: p.call(fn, 1, y=2),
    "runner (generated)": lambda p, fn: p._first(fn, (1,), {"y": 2}),
    "decorator (generated)": lambda p, fn: p(fn)(1, y=2),
    "counting decorator (generated)": lambda p, fn: p.replace(statistics=True)(fn)(1, y=2),
}


def run_sync(way: str, scenario: str, budget: str, *, ambient: bool = False) -> list[Any]:
    policy, trace, recorder = make(scenario, budget)
    fn = target(scenario)
    result = error = None
    try:
        if ambient:
            with seawall.deadline(1e6, clock=policy._clock):
                result = SYNC[way](policy, fn)
        else:
            result = SYNC[way](policy, fn)
    except Exception as exc:
        error = exc
    return ended(trace, recorder, result, error)


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_sync_generated_paths_do_what_call_does(scenario: str, budget: str) -> None:
    reference = run_sync("call() (readable)", scenario, budget)
    assert reference[-2][0] in ("returned", "raised")
    for way in SYNC:
        assert run_sync(way, scenario, budget) == reference, way


@pytest.mark.parametrize("scenario", ["success", "one failure", "exhausted"])
def test_sync_paths_agree_under_an_ambient_deadline(scenario: str) -> None:
    reference = run_sync("call() (readable)", scenario, "budget", ambient=True)
    # Under a deadline the first attempt is the loop's: the budget hears on_request itself.
    assert ("budget", ["request", *reference[-1][1][1:]]) == reference[-1]
    for way in SYNC:
        assert run_sync(way, scenario, "budget", ambient=True) == reference, way


def atarget(scenario: str) -> Callable[..., Awaitable[Any]]:
    fn = target(scenario)

    async def afn(x: int, *, y: int = 0) -> Any:
        await asyncio.sleep(0)
        return fn(x, y=y)

    return afn


ASYNC: dict[str, Callable[[RetryPolicy, Callable[..., Any]], Awaitable[Any]]] = {
    "acall() (readable)": lambda p, fn: p.acall(fn, 1, y=2),
    "runner (generated)": lambda p, fn: p._afirst(fn, (1,), {"y": 2}),
    "decorator (generated)": lambda p, fn: p(fn)(1, y=2),
    "counting decorator (generated)": lambda p, fn: p.replace(statistics=True)(fn)(1, y=2),
}


def run_async(way: str, scenario: str, budget: str) -> list[Any]:
    policy, trace, recorder = make(scenario, budget)
    fn = atarget(scenario)

    async def main() -> list[Any]:
        result = error = None
        try:
            result = await ASYNC[way](policy, fn)
        except Exception as exc:
            error = exc
        return ended(trace, recorder, result, error)

    return asyncio.run(main())


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_async_generated_paths_do_what_acall_does(scenario: str, budget: str) -> None:
    reference = run_async("acall() (readable)", scenario, budget)
    for way in ASYNC:
        assert run_async(way, scenario, budget) == reference, way


def test_a_coroutine_from_a_sync_call_is_refused_alike() -> None:
    async def afn() -> int:
        return 1

    messages = set()
    for way in ("call", "runner"):
        policy = RetryPolicy(hooks=())
        with pytest.raises(TypeError) as caught:
            policy.call(afn) if way == "call" else policy._first(afn, (), {})
        messages.add(str(caught.value).replace(repr(afn), "fn"))
    assert len(messages) == 1
    assert "is async" in messages.pop()


def test_a_plain_function_given_to_acall_is_refused_alike() -> None:
    def fn() -> int:
        return 1

    async def main(way: str) -> str:
        policy = RetryPolicy(hooks=())
        with pytest.raises(TypeError) as caught:
            await (policy.acall(fn) if way == "acall" else policy._afirst(fn, (), {}))
        return str(caught.value)

    messages = {asyncio.run(main(way)) for way in ("acall", "runner")}
    assert len(messages) == 1
    assert "is not async" in messages.pop()


def test_the_methods_that_run_are_the_ones_in_the_source() -> None:
    # call() and acall() are not replaced at import by generated code: what one reads in
    # seawall/_strategies/retry/policy.py is what runs.
    for method in (RetryPolicy.call, RetryPolicy.acall):
        source = inspect.getsourcefile(method)
        assert source is not None
        assert source.replace("\\", "/").endswith("_strategies/retry/policy.py")
        assert method.__code__.co_filename == source
        assert not hasattr(method, "__wrapped__")


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_loop_without_hooks_decides_as_the_general_loop(scenario: str, budget: str) -> None:
    """A policy without hooks hands a failed first attempt to the loop that reads no clock (no
    decision of the call depends on the time); with a hook, the general loop runs. The caller,
    the budget, the clock's waits and the function's statistics see the same."""

    def run(hooks: tuple[Any, ...]) -> list[Any]:
        policy, _, recorder = make(scenario, budget)
        policy = policy.replace(hooks=hooks, statistics=True)
        assert isinstance(policy._clock, VirtualClock)
        wrapped = policy(target(scenario))
        result = error = None
        try:
            result = wrapped(1, y=2)
        except Exception as exc:
            error = exc
        assert wrapped.statistics is not None
        seen = ended([], recorder, result, error)
        return [*seen, policy._clock.sleeps, wrapped.statistics.as_dict()]

    general = run((lambda event: None,))
    assert run(()) == general
    if scenario == "two failures" and budget == "no budget":
        assert len(general[-2]) == 2 and general[-1]["attempts"] == 3


def test_a_spare_state_is_a_new_one_once_taken_again() -> None:
    """The loop without a clock keeps the state of a call that succeeded for the next call
    (drivers.call_retrying) and sets again what such a call changed: the attempts, the total
    wait and the previous delay, and the policy (a spare holds none: no cycle). Every other
    field must be as a new state has it."""
    from seawall._strategies.retry.state import RetryState

    taken_again = {"attempts", "total_delay", "_previous_delay", "policy"}
    for budget in BUDGETS:
        for scenario in ("one failure", "two failures"):
            policy, _, _ = make(scenario, budget)
            policy = policy.replace(hooks=())
            with contextlib.suppress(ConnectionError, Throttled):  # the refusing budgets
                policy.call(target(scenario), 1)
            spares = policy._spare_states
            if budget in ("refusing retries", "refusing calls"):
                assert spares == []  # a call that gave up (or never began) keeps nothing
                continue
            assert len(spares) == 1 and spares[0].policy is None
            new = RetryState(policy, 0.0)
            new._begin_at_once = True
            for name in RetryState.__slots__:
                if name not in taken_again:
                    assert getattr(spares[0], name) == getattr(new, name), (budget, name)
    counted = RetryPolicy(clock=VirtualClock(), hooks=(), statistics=True)
    assert counted(target("one failure"))(1) == 21
    assert counted._spare_states == []  # the statistics read the state as the call ends


def test_calls_that_take_a_spare_state_decide_as_the_general_loop() -> None:
    """One policy called again and again (successes, retries, give-ups, in turn):
    the calls that take a spare state wait, tell the budget and end as the general loop's."""
    order = ["two failures", "one failure", "exhausted", "two failures", "permanent"] * 3
    order.append("one failure")  # a give-up drops the state it took: end with a success

    def run(hooks: tuple[Any, ...]) -> list[Any]:
        policy, _, recorder = make("success", "budget")
        policy = policy.replace(hooks=hooks)
        seen: list[Any] = []
        for scenario in order:
            try:
                seen.append(("returned", policy.call(target(scenario), 1)))
            except Exception as exc:
                seen.append(("raised", type(exc).__name__, getattr(exc, "__notes__", [])))
        assert isinstance(policy._clock, VirtualClock)
        assert (policy._spare_states != []) is (hooks == ())
        return [*seen, policy._clock.sleeps, recorder.log if recorder else None]

    general = run((lambda event: None,))
    assert run(()) == general
    assert len(general[-2]) > 10  # jittered waits, drawn from one seeded rng in both runs


def test_threads_never_share_a_state() -> None:
    """Calls of one policy in many threads at once, each failing twice then succeeding: each
    takes a state of its own (a shared one would count another call's attempts and give up)."""
    import threading
    import time

    policy = RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(0.0), hooks=())
    errors: list[BaseException] = []
    done: list[int] = []
    start = threading.Barrier(8)

    def fail_twice(failures: list[ConnectionError]) -> int:
        time.sleep(0)  # let another thread run inside this call
        if failures:
            raise failures.pop()
        return 1

    def worker() -> None:
        start.wait()
        for _ in range(300):
            failures = [ConnectionError("a"), ConnectionError("b")]
            try:
                done.append(policy.call(fail_twice, failures))
            except Exception as exc:  # what a shared state would lead to
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(done) == 8 * 300
    assert 1 <= len(policy._spare_states) <= 4
