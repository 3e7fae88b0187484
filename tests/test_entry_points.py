"""Every entry point of a retry policy makes the same decisions.

A generated script (the policy's parameters, then for a few logical calls in a row what each
attempt does) runs through ``call``, ``acall``, the decorator on a ``def`` and on an ``async
def``, the sync and async block APIs, ``run``, ``arun``, a registry handle and a pipeline, the
async ones on asyncio and on trio. Each entry point gets its own policy, virtual clock, random
generators and budget, built from the same parameters, and must then make the same attempts,
return or raise the same thing (the same exception, with the same notes), emit the same events,
sleep the same delays, make the same budget calls and leave its budget in the same state.

Each script runs twice per entry point: once with the budget behind a proxy that records every
call (and offers no ``first_attempt()`` capability, so the policy uses ``on_request`` and
``on_success``), once with the bare budget (so the first-attempt path uses the budget's own
``first_attempt()`` callables). Both must end in the same budget state.

One documented difference is left out of the comparison, in one named function,
:func:`elapsed_differs`. No exception escapes ``run``/``arun``: a call the budget rejects
locally comes back as ``Outcome(error=Throttled(...), attempts=0)``. The block API is
left out of scripts whose policy checks results (``with attempt:`` sees no result).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import hypothesis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seawall
from backends import BACKENDS
from seawall import (
    AdaptiveThrottle,
    Backoff,
    Overloaded,
    Permanent,
    Pipeline,
    RetryAfter,
    RetryBudget,
    RetryEvent,
    RetryPolicy,
    RetryQuota,
    TokenBucket,
    VirtualClock,
)
from seawall.config import PolicyHandle, PolicyRegistry

# -- scripts ----------------------------------------------------------------------------------

Kind = Literal[
    "ok",  # return a value
    "bad",  # return BAD (rejected when the policy checks results)
    "connection",  # ConnectionError: transient
    "timeout",  # TimeoutError: transient (and a timeout for RetryQuota's cost)
    "retry_after",  # seawall.RetryAfter(wait): server pushback
    "permanent",  # a seawall.Permanent subclass
    "marked",  # a ConnectionError marked with seawall.permanent()
    "overloaded",  # seawall.Overloaded
    "value",  # ValueError: not in retry_on
]
KINDS: tuple[Kind, ...] = Kind.__args__  # type: ignore[attr-defined]
# Transient errors more often than the rest, so that calls retry, and budgets and deadlines refuse.
WEIGHTED_KINDS = (*KINDS, "ok", *["connection"] * 4, *["timeout"] * 2, "retry_after")
BAD = "bad result"

# Dyadic times keep virtual-time arithmetic exact, so that the deadline comparisons of the sync
# drivers (the clock adds each sleep) and of the async ones (the event loop jumps to a timer)
# cannot fall on different sides of a rounding error when jitter is "none".
TOOK = (0.0, 0.25, 1.0)  # seconds an attempt takes on the virtual clock
# Waits a server asks for: 0, below and above every max_retry_after, and untrusted values.
WAITS = (0.0, 0.5, 2.0, 16.0, -1.0, math.inf, math.nan)
MAX_RETRY_AFTER = (1.0, 4.0)
TIMEOUTS = (0.25, 1.0, 3.0, 8.0)  # or none


class Refused(Permanent):
    """The dependency refused for good."""


@dataclasses.dataclass(frozen=True)
class Step:
    """What one attempt does."""

    kind: Kind
    took: float = 0.0
    wait: float = 0.0  # retry_after only

    def act(self, label: str) -> str:
        kind = self.kind
        if kind == "ok":
            return f"ok: {label}"
        if kind == "bad":
            return BAD
        if kind == "connection":
            raise ConnectionError(label)
        if kind == "timeout":
            raise TimeoutError(label)
        if kind == "retry_after":
            raise RetryAfter(self.wait, label)
        if kind == "permanent":
            raise Refused(label)
        if kind == "marked":
            raise seawall.permanent(ConnectionError(label))
        if kind == "overloaded":
            raise Overloaded(label)
        raise ValueError(label)

    def __repr__(self) -> str:
        extra = [f"took={self.took}"] if self.took else []
        if self.kind == "retry_after":
            extra.insert(0, f"wait={self.wait}")
        return f"{self.kind}({', '.join(extra)})" if extra else self.kind


OK = Step("ok")
BudgetKind = Literal["RetryBudget", "TokenBucket", "RetryQuota", "AdaptiveThrottle"]


@dataclasses.dataclass(frozen=True)
class Params:
    """A policy's parameters (each entry point builds its own policy from them)."""

    max_attempts: int
    jitter: Literal["none", "full", "equal", "decorrelated"]
    base: float
    cap: float
    seed: int
    budget: BudgetKind | None
    tight: bool  # a budget that refuses (or throttles) after a few failures
    timeout: float | None
    min_attempt_time: float
    max_retry_after: float
    check_results: bool  # retry_if_result rejects BAD
    observe_attempts: bool  # a hook that also wants "success" events (no fast path)


@dataclasses.dataclass(frozen=True)
class Scenario:
    params: Params
    calls: tuple[tuple[Step, ...], ...]  # per logical call: its attempts (then success)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    base = draw(st.sampled_from([0.25, 0.5, 1.0]))
    params = Params(
        max_attempts=draw(st.integers(1, 5)),
        jitter=draw(st.sampled_from(["none", "full", "equal", "decorrelated"])),
        base=base,
        cap=draw(st.sampled_from([base, 1.0, 4.0])),
        seed=draw(st.integers(0, 2**16)),
        budget=draw(
            st.sampled_from([None, "RetryBudget", "TokenBucket", "RetryQuota", "AdaptiveThrottle"])
        ),
        tight=draw(st.booleans()),
        timeout=draw(st.one_of(st.none(), st.sampled_from(TIMEOUTS))),
        min_attempt_time=draw(st.sampled_from([0.0, 0.5])),
        max_retry_after=draw(st.sampled_from(MAX_RETRY_AFTER)),
        check_results=draw(st.booleans()),
        observe_attempts=draw(st.booleans()),
    )
    step = st.builds(
        Step,
        kind=st.sampled_from(WEIGHTED_KINDS),
        took=st.sampled_from(TOOK),
        wait=st.sampled_from(WAITS),
    ).map(lambda s: s if s.kind == "retry_after" else dataclasses.replace(s, wait=0.0))
    calls = draw(st.lists(st.lists(step, max_size=5).map(tuple), min_size=1, max_size=4))
    return Scenario(params, tuple(calls))


# -- one entry point's world: its policy, clock, budget and recordings -------------------------


class RecordingBudget:
    """Forwards to a budget and records each call. No ``first_attempt()``: the policy must use
    ``on_request`` and ``on_success``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, ...]] = []

    def on_request(self) -> None:
        self.calls.append(("on_request",))
        try:
            self.inner.on_request()
        except Exception as exc:
            self.calls[-1] += (f"raised {type(exc).__name__}",)
            raise

    def allow_retry(self, error: BaseException) -> bool:
        allowed: bool = self.inner.allow_retry(error)
        self.calls.append(("allow_retry", type(error).__name__, str(allowed)))
        return allowed

    def on_success(self) -> None:
        self.calls.append(("on_success",))
        self.inner.on_success()

    def on_failure(self, error: BaseException) -> None:
        self.calls.append(("on_failure", type(error).__name__))
        self.inner.on_failure(error)

    def on_answer(self, error: BaseException) -> None:
        self.calls.append(("on_answer", type(error).__name__))
        self.inner.on_answer(error)


def make_budget(params: Params, clock: VirtualClock) -> Any:
    tight = params.tight
    if params.budget == "RetryBudget":
        window = 2.0 if tight else 10.0
        return RetryBudget(
            ratio=0.5, min_per_second=0.0 if tight else 0.1, window=window, clock=clock
        )
    if params.budget == "TokenBucket":
        return TokenBucket(max_tokens=2.0 if tight else 4.0, token_ratio=0.5)
    if params.budget == "RetryQuota":
        return RetryQuota(capacity=12 if tight else 40, retry_cost=5, timeout_cost=10)
    if params.budget == "AdaptiveThrottle":
        return AdaptiveThrottle(
            k=1.5,
            window=30.0,
            clock=clock,
            rng=random.Random(params.seed + 1),
            min_requests=0 if tight else 3,
        )
    return None


def budget_state(budget: Any) -> tuple[object, ...]:
    if isinstance(budget, RetryBudget):
        return (budget.requests, budget.retries, budget.available())
    if isinstance(budget, TokenBucket):
        return (budget.tokens,)
    if isinstance(budget, RetryQuota):
        return (budget.available,)
    if isinstance(budget, AdaptiveThrottle):
        return (budget.requests, budget.accepts, budget.rejection_probability())
    return ()


class Recorder:
    """A hook: keeps what every entry point must agree on, from each event."""

    def __init__(self, observe_attempts: bool) -> None:
        self.observes_attempts = observe_attempts
        self.events: list[tuple[object, ...]] = []

    def __call__(self, event: RetryEvent) -> None:
        error = event.error
        self.events.append(
            (
                event.kind,
                event.attempt,
                event.delay,
                event.reason,
                None if error is None else f"{type(error).__name__}({error})",
                event.elapsed,
            )
        )


@dataclasses.dataclass
class CallTrace:
    """What one logical call did, through one entry point."""

    attempts: int
    result: tuple[object, ...]
    events: list[tuple[object, ...]] | None  # None: a policy without hooks (nothing recorded)
    sleeps: list[float]
    budget_calls: list[tuple[str, ...]] | None  # None: a bare budget (nothing recorded)
    budget_state: tuple[object, ...]


class World:
    """One entry point's fresh policy, clock, generators and budget, and what they recorded."""

    def __init__(self, params: Params, proxied: bool, hooks: bool = True) -> None:
        self.clock = VirtualClock()
        self.hooked = hooks
        self.budget = make_budget(params, self.clock)
        self.proxy = RecordingBudget(self.budget) if proxied and self.budget is not None else None
        self.recorder = Recorder(params.observe_attempts)
        self.policy = RetryPolicy(
            max_attempts=params.max_attempts,
            backoff=Backoff(base=params.base, multiplier=2.0, cap=params.cap, jitter=params.jitter),
            retry_on=(ConnectionError, TimeoutError),
            retry_if_result=(lambda r: r == BAD) if params.check_results else None,
            timeout=params.timeout,
            budget=self.proxy if self.proxy is not None else self.budget,
            clock=self.clock,
            rng=random.Random(params.seed),
            name="svc",
            # Without hooks, a retried call reads no clock and each retry decision begins the
            # next attempt itself: another path through the loop, compared on all but events.
            hooks=(self.recorder,) if hooks else (),
            max_retry_after=params.max_retry_after,
            min_attempt_time=params.min_attempt_time,
        )
        self.call = 0
        self.steps: tuple[Step, ...] = ()
        self.attempts = 0
        self.traces: list[CallTrace] = []

    def begin(self, call: int, steps: tuple[Step, ...]) -> None:
        self.call, self.steps, self.attempts = call, steps, 0
        self._events, self._sleeps = len(self.recorder.events), len(self.clock.sleeps)
        self._budget_calls = 0 if self.proxy is None else len(self.proxy.calls)

    def end(self, result: tuple[object, ...]) -> None:
        self.traces.append(
            CallTrace(
                attempts=self.attempts,
                result=result,
                events=self.recorder.events[self._events :] if self.hooked else None,
                sleeps=self.clock.sleeps[self._sleeps :],
                budget_calls=None if self.proxy is None else self.proxy.calls[self._budget_calls :],
                budget_state=budget_state(self.budget),
            )
        )

    def attempt(self) -> str:
        """The function under retry: what the script says this attempt does."""
        self.attempts += 1
        number = self.attempts
        step = self.steps[number - 1] if number <= len(self.steps) else OK
        # Time passes inside the attempt without a suspension point, so an async attempt is
        # never cancelled where a sync one runs on (cancellation is async-only by design).
        self.clock.advance(step.took)
        return step.act(f"call {self.call} attempt {number}")

    async def aattempt(self) -> str:
        await anyio.sleep(0)  # a real suspension, before the attempt's time passes
        return self.attempt()


def outcome(error: BaseException | None, value: object = None) -> tuple[object, ...]:
    if error is None:
        return ("returned", value)
    if isinstance(error, Escaped):
        return ("run()/arun() raised instead of returning an Outcome", str(error))
    notes = tuple(getattr(error, "__notes__", ()))
    return ("raised", type(error).__name__, str(error), notes)


# -- the entry points ---------------------------------------------------------------------------

SyncCall = Callable[[], object]
AsyncCall = Callable[[], Awaitable[object]]


def sync_block(w: World) -> SyncCall:
    def call() -> object:
        result: object = None
        for attempt in w.policy.attempts():
            with attempt:
                result = w.attempt()
        return result

    return call


def async_block(w: World) -> AsyncCall:
    async def call() -> object:
        result: object = None
        async for attempt in w.policy.attempts():
            async with attempt:
                result = await w.aattempt()
        return result

    return call


def sync_run(w: World) -> SyncCall:
    def call() -> object:
        marks = len(w.clock.sleeps), len(w.recorder.events)
        try:
            out = w.policy.run(w.attempt)
        except Exception as exc:
            raise Escaped(exc) from exc
        check_outcome(w, out, *marks)
        return out.unwrap()

    return call


def async_run(w: World) -> AsyncCall:
    async def call() -> object:
        marks = len(w.clock.sleeps), len(w.recorder.events)
        try:
            out = await w.policy.arun(w.aattempt)
        except Exception as exc:
            raise Escaped(exc) from exc
        check_outcome(w, out, *marks)
        return out.unwrap()

    return call


class Escaped(Exception):
    """``run``/``arun`` raised an ``Exception`` where it must return an ``Outcome``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}({error})")
        self.error = error


def check_outcome(w: World, out: seawall.Outcome[Any], sleeps: int, events: int) -> None:
    """An Outcome tells what the call did: its attempts, waits and why it gave up."""
    assert out.attempts == w.attempts == len(out.history), out
    assert out.total_delay == sum(w.clock.sleeps[sleeps:]), out
    give_ups = [e for e in w.recorder.events[events:] if e[0] == "give_up"]
    assert out.reason == (give_ups[-1][3] if give_ups else None), out


def handle(w: World) -> PolicyHandle:
    registry = PolicyRegistry()
    registry.register("svc", w.policy)
    return registry.policy("svc")


def via_handle(w: World) -> SyncCall:
    h = handle(w)
    return lambda: h.call(w.attempt)


def via_ahandle(w: World) -> AsyncCall:
    h = handle(w)
    return lambda: h.acall(w.aattempt)


def via_pipeline(w: World) -> SyncCall:
    p = Pipeline(retry=w.policy)
    return lambda: p.call(w.attempt)


def via_apipeline(w: World) -> AsyncCall:
    p = Pipeline(retry=w.policy)
    return lambda: p.acall(w.aattempt)


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    is_async: bool
    setup: Callable[[World], Any]  # the world -> one logical call (a callable, maybe async)
    block: bool = False  # the block API (no result check)
    hooks: bool = True  # the policy has a hook (the recorder); without, no events to compare


ENTRY_POINTS: dict[str, EntryPoint] = {
    "policy.call(fn)": EntryPoint(False, lambda w: lambda: w.policy.call(w.attempt)),
    "@policy def": EntryPoint(False, lambda w: w.policy(w.attempt)),
    "@policy def, no hooks": EntryPoint(False, lambda w: w.policy(w.attempt), hooks=False),
    "for attempt in policy.attempts()": EntryPoint(False, sync_block, block=True),
    "policy.run(fn)": EntryPoint(False, sync_run),
    "registry handle.call(fn)": EntryPoint(False, via_handle),
    "@registry handle def": EntryPoint(False, lambda w: handle(w)(w.attempt)),
    "Pipeline(retry=policy).call(fn)": EntryPoint(False, via_pipeline),
    "await policy.acall(afn)": EntryPoint(True, lambda w: lambda: w.policy.acall(w.aattempt)),
    "@policy async def": EntryPoint(True, lambda w: w.policy(w.aattempt)),
    "@policy async def, no hooks": EntryPoint(True, lambda w: w.policy(w.aattempt), hooks=False),
    "async for attempt in policy.attempts()": EntryPoint(True, async_block, block=True),
    "await policy.arun(afn)": EntryPoint(True, async_run),
    "await registry handle.acall(afn)": EntryPoint(True, via_ahandle),
    "@registry handle async def": EntryPoint(True, lambda w: handle(w)(w.aattempt)),
    "await Pipeline(retry=policy).acall(afn)": EntryPoint(True, via_apipeline),
}


def execute(
    name: str, scenario: Scenario, proxied: bool, backend: str = "asyncio"
) -> list[CallTrace]:
    """Run every logical call of *scenario*, in order, through one entry point (an async one
    on *backend*)."""
    entry = ENTRY_POINTS[name]
    w = World(scenario.params, proxied, entry.hooks)
    if entry.is_async:

        async def main() -> None:
            call = entry.setup(w)
            for i, steps in enumerate(scenario.calls):
                w.begin(i, steps)
                try:
                    value = await call()
                except AssertionError:
                    raise
                except Exception as exc:
                    w.end(outcome(exc))
                else:
                    w.end(outcome(None, value))

        seawall.testing.run(main(), w.clock, backend=backend)
    else:
        call = entry.setup(w)
        for i, steps in enumerate(scenario.calls):
            w.begin(i, steps)
            try:
                value = call()
            except AssertionError:
                raise
            except Exception as exc:
                w.end(outcome(exc))
            else:
                w.end(outcome(None, value))
    return w.traces


def elapsed_differs(params: Params, steps: tuple[Step, ...]) -> bool:
    """The one documented difference, left out of the comparison.

    On the first-attempt fast path (no timeout, no result check, no attempt-observing hook),
    the first attempt is made without reading the clock, so every event's ``elapsed`` counts
    from its end (``policy.call``, ``acall``, both decorators, registry handles and
    pipelines), while the block API, ``run`` and ``arun`` measure from the start of the call.
    ``RetryEvent.elapsed`` says so.
    """
    fast = params.timeout is None and not params.check_results and not params.observe_attempts
    return fast and bool(steps) and steps[0].took > 0


def difference(
    scenario: Scenario, ref: tuple[str, list[CallTrace]], other: tuple[str, list[CallTrace]]
) -> str | None:
    """A readable account of the first way *other* differs from *ref*, or None."""
    (ref_name, ref_traces), (name, traces) = ref, other
    for i, (a, b) in enumerate(zip(ref_traces, traces, strict=True)):
        for field in dataclasses.fields(CallTrace):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if field.name in ("budget_calls", "events") and (x is None or y is None):
                continue  # only proxied budgets record their calls, only hooks events
            if field.name == "events" and elapsed_differs(scenario.params, scenario.calls[i]):
                x, y = [e[:-1] for e in x], [e[:-1] for e in y]
            if x != y:
                width = max(len(ref_name), len(name))
                return (
                    f"{name} differs from {ref_name} in {field.name} on logical call {i} "
                    f"(attempts {list(scenario.calls[i])}):\n"
                    f"  {ref_name:<{width}} : {x!r}\n"
                    f"  {name:<{width}} : {y!r}"
                )
    return None


def label_coverage(traces: list[CallTrace]) -> None:
    """What the scripts reached (``pytest --hypothesis-show-statistics`` lists it)."""
    for trace in traces:
        for e in trace.events:
            hypothesis.event(f"event {e[0]} {e[3] or ''}")  # kind, reason
        how = trace.result[0]
        hypothesis.event(f"outcome {how} {trace.result[1] if how == 'raised' else ''}")
        for call in trace.budget_calls or ():
            if call[0] == "allow_retry" or call[-1].startswith("raised"):
                hypothesis.event(f"budget {' '.join(call)}")


# -- the property -------------------------------------------------------------------------------


# The heaviest test of the suite: some 25 s of CPU on a quiet machine, twice that under coverage,
# and ten times as long at load 18 on two cores, where the default guard (300 s) stopped it.
@pytest.mark.timeout(1200)
@settings(max_examples=400, deadline=None, derandomize=True)
@given(scenario=scenarios())
def test_every_entry_point_makes_the_same_decisions(scenario: Scenario) -> None:
    runs: list[tuple[str, list[CallTrace]]] = []
    modes = [True, False] if scenario.params.budget is not None else [True]
    for proxied in modes:
        for name, entry in ENTRY_POINTS.items():
            if entry.block and scenario.params.check_results:
                # The block API has no result to check: `with attempt:` sees only errors.
                continue
            budget = "recorded" if proxied else "bare"
            for backend in BACKENDS if entry.is_async else ("",):
                label = f"{name} [{budget} budget{', ' if backend else ''}{backend}]"
                runs.append((label, execute(name, scenario, proxied, backend or "asyncio")))
    reference = runs[0]
    label_coverage(reference[1])
    problems = [d for run in runs[1:] if (d := difference(scenario, reference, run)) is not None]
    assert not problems, "\n".join(problems)
