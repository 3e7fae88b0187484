"""What stamina's and tenacity's suites check, side by side with seawall.

Attempts, exception classes against predicates, what is raised at the end, backoff curves,
and ``def`` against ``async def``. Waits: tenacity takes a ``sleep`` function (the waits are
recorded, not slept), stamina's waits are kept to milliseconds, seawall runs on virtual time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import seawall

stamina = pytest.importorskip("stamina")
tenacity = pytest.importorskip("tenacity")


class Flaky(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"code {code}")
        self.code = code


def failing(times: int, error: Callable[[], Exception]) -> tuple[Callable[[], str], list[int]]:
    """A function that raises ``error()`` *times* times, then returns "ok"; and its call log."""
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error()
        return "ok"

    return fn, calls


def ours(**kw: Any) -> seawall.RetryPolicy:
    kw.setdefault("backoff", seawall.Backoff.constant(0.0))
    return seawall.RetryPolicy(clock=seawall.VirtualClock(), hooks=(), **kw)


@pytest.fixture
def stamina_quiet() -> Iterator[None]:
    stamina.instrumentation.set_on_retry_hooks([])
    yield
    stamina.instrumentation.set_on_retry_hooks(None)


def stamina_fast(on: Any, attempts: int) -> Any:
    return stamina.retry(
        on=on, attempts=attempts, timeout=None, wait_initial=0.0, wait_max=0.0, wait_jitter=0.0
    )


# -- attempts -------------------------------------------------------------------------------


@pytest.mark.usefixtures("stamina_quiet")
@pytest.mark.parametrize("attempts", [1, 3, 5])
def test_attempts_count_every_try_in_all_three(attempts: int) -> None:
    results = []
    for run in ("seawall", "stamina", "tenacity"):
        fn, calls = failing(100, lambda: ConnectionError("refused"))
        with pytest.raises(ConnectionError):
            if run == "seawall":
                ours(max_attempts=attempts).call(fn)
            elif run == "stamina":
                stamina_fast(ConnectionError, attempts)(fn)()
            else:
                tenacity.Retrying(
                    stop=tenacity.stop_after_attempt(attempts), reraise=True, sleep=lambda s: None
                )(fn)
        results.append(len(calls))
    assert results == [attempts] * 3


# -- classes and predicates -----------------------------------------------------------------


def only_503(exc: BaseException) -> bool:
    return isinstance(exc, Flaky) and exc.code == 503


@pytest.mark.usefixtures("stamina_quiet")
@pytest.mark.parametrize(("code", "retried"), [(503, True), (400, False)])
def test_a_predicate_decides_alike(code: int, retried: bool) -> None:
    counts = []
    for run in ("seawall", "stamina", "tenacity"):
        fn, calls = failing(100, lambda: Flaky(code))
        with pytest.raises(Flaky):
            if run == "seawall":
                ours(max_attempts=3, retry_on=only_503).call(fn)
            elif run == "stamina":
                stamina_fast(only_503, 3)(fn)()
            else:
                tenacity.Retrying(
                    stop=tenacity.stop_after_attempt(3),
                    retry=tenacity.retry_if_exception(only_503),
                    reraise=True,
                    sleep=lambda s: None,
                )(fn)
        counts.append(len(calls))
    assert counts == [3 if retried else 1] * 3


@pytest.mark.usefixtures("stamina_quiet")
def test_a_tuple_of_classes_decides_alike() -> None:
    counts = []
    for run in ("seawall", "stamina", "tenacity"):
        fn, calls = failing(2, lambda: TimeoutError("slow"))
        if run == "seawall":
            assert ours(max_attempts=3, retry_on=(KeyError, TimeoutError)).call(fn) == "ok"
        elif run == "stamina":
            assert stamina_fast((KeyError, TimeoutError), 3)(fn)() == "ok"
        else:
            retrying = tenacity.Retrying(
                stop=tenacity.stop_after_attempt(3),
                retry=tenacity.retry_if_exception_type((KeyError, TimeoutError)),
                sleep=lambda s: None,
            )
            assert retrying(fn) == "ok"
        counts.append(len(calls))
    assert counts == [3, 3, 3]


def test_default_retry_on_is_narrow_where_tenacity_retries_everything() -> None:
    # tenacity with no retry= retries every exception; stamina requires on=; seawall's default
    # retries ConnectionError and TimeoutError only, so a bug (ValueError) fails at once.
    fn, calls = failing(100, lambda: ValueError("bug"))
    with pytest.raises(ValueError):
        ours(max_attempts=3).call(fn)
    assert len(calls) == 1
    fn, calls = failing(100, lambda: ValueError("bug"))
    with pytest.raises(tenacity.RetryError):
        tenacity.Retrying(stop=tenacity.stop_after_attempt(3), sleep=lambda s: None)(fn)
    assert len(calls) == 3
    with pytest.raises(TypeError):
        stamina.retry()  # type: ignore[call-arg]


# -- what is raised at the end --------------------------------------------------------------


@pytest.mark.usefixtures("stamina_quiet")
def test_the_original_exception_is_raised_as_stamina_and_tenacity_reraise() -> None:
    fn, _ = failing(100, lambda: ConnectionError("refused"))
    with pytest.raises(ConnectionError) as ours_raised:
        ours(max_attempts=3).call(fn)
    # seawall says what happened in a note on the original exception.
    notes = getattr(ours_raised.value, "__notes__", [])
    assert any("gave up after 3 attempts" in note for note in notes)

    fn, _ = failing(100, lambda: ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        stamina_fast(ConnectionError, 3)(fn)()

    fn, _ = failing(100, lambda: ConnectionError("refused"))
    with pytest.raises(tenacity.RetryError) as wrapped:
        tenacity.Retrying(stop=tenacity.stop_after_attempt(3), sleep=lambda s: None)(fn)
    assert isinstance(wrapped.value.last_attempt.exception(), ConnectionError)
    fn, _ = failing(100, lambda: ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        tenacity.Retrying(stop=tenacity.stop_after_attempt(3), reraise=True, sleep=lambda s: None)(
            fn
        )


def test_run_returns_the_outcome_as_tenacity_statistics_would() -> None:
    fn, _ = failing(2, lambda: ConnectionError("refused"))
    outcome = ours(max_attempts=5, backoff=seawall.Backoff.constant(1.0)).run(fn)
    assert (outcome.value, outcome.attempts, outcome.total_delay) == ("ok", 3, 2.0)
    fn, _ = failing(2, lambda: ConnectionError("refused"))
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(5), wait=tenacity.wait_fixed(1.0), sleep=lambda s: None
    )
    assert retrying(fn) == "ok"
    assert retrying.statistics["attempt_number"] == 3
    assert retrying.statistics["idle_for"] == 2.0


# -- backoff curves -------------------------------------------------------------------------


def test_tenacity_wait_exponential_is_a_seawall_backoff_without_jitter() -> None:
    waits: list[float] = []
    fn, _ = failing(100, lambda: ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        tenacity.Retrying(
            stop=tenacity.stop_after_attempt(12),
            wait=tenacity.wait_exponential(multiplier=0.1, max=20.0),
            reraise=True,
            sleep=waits.append,
        )(fn)
    backoff = seawall.Backoff(base=0.1, cap=20.0, jitter="none")
    assert [backoff.raw(n) for n in range(11)] == pytest.approx(waits)


def test_tenacity_random_exponential_is_full_jitter_from_the_capped_value() -> None:
    # Both draw from [0, min(cap, base * 2**n)]: the same distribution.
    waits: list[float] = []
    fn, _ = failing(10_000, lambda: ConnectionError("refused"))
    with pytest.raises(ConnectionError):
        tenacity.Retrying(
            stop=tenacity.stop_after_attempt(401),
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=1.0),
            reraise=True,
            sleep=waits.append,
        )(fn)
    late = waits[20:]  # far past the cap
    backoff = seawall.Backoff(base=0.1, cap=1.0)
    rng = random.Random(2)
    our_late = [backoff.compute(n, rng) for n in range(20, 400)]
    for sample in (late, our_late):
        assert all(0.0 <= w <= 1.0 for w in sample)
        assert 0.4 < sum(sample) / len(sample) < 0.6  # uniform on [0, 1]: mean 0.5


@pytest.mark.usefixtures("stamina_quiet")
def test_stamina_waits_are_a_seawall_backoff_without_jitter() -> None:
    waited: list[float] = []

    def hook(details: Any) -> None:
        waited.append(details.wait_for)

    stamina.instrumentation.set_on_retry_hooks([hook])
    fn, _ = failing(100, lambda: ConnectionError("refused"))
    retried = stamina.retry(
        on=ConnectionError,
        attempts=7,
        timeout=None,
        wait_initial=0.0005,
        wait_max=0.004,
        wait_jitter=0.0,
    )(fn)
    with pytest.raises(ConnectionError):
        retried()
    backoff = seawall.Backoff(base=0.0005, cap=0.004, jitter="none")
    assert waited == pytest.approx([backoff.raw(n) for n in range(6)])


# -- def and async def ----------------------------------------------------------------------


@pytest.mark.usefixtures("stamina_quiet")
def test_async_functions_are_retried_alike() -> None:
    def make() -> tuple[Callable[[], Any], list[int]]:
        calls: list[int] = []

        async def fn() -> str:
            calls.append(1)
            await asyncio.sleep(0)
            if len(calls) < 3:
                raise ConnectionError("refused")
            return "ok"

        return fn, calls

    ours_fn, ours_calls = make()
    stamina_fn, stamina_calls = make()
    tenacity_fn, tenacity_calls = make()

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    async def main() -> list[str]:
        return [
            await ours(max_attempts=3)(ours_fn)(),
            await stamina_fast(ConnectionError, 3)(stamina_fn)(),
            await tenacity.AsyncRetrying(stop=tenacity.stop_after_attempt(3), sleep=sleep)(
                tenacity_fn
            ),
        ]

    assert asyncio.run(main()) == ["ok", "ok", "ok"]
    assert len(ours_calls) == len(stamina_calls) == len(tenacity_calls) == 3


# -- stop on time ---------------------------------------------------------------------------


def test_a_timeout_gives_up_before_a_wait_that_would_cross_it() -> None:
    # tenacity's stop_after_delay looks after the attempt, so its last wait may cross the
    # limit; stop_before_delay, like seawall's timeout, does not sleep past it. seawall gives
    # up at once, with the last error, instead of sleeping and then failing.
    clock = seawall.VirtualClock()
    fn, calls = failing(100, lambda: ConnectionError("refused"))
    policy = seawall.RetryPolicy(
        max_attempts=10,
        backoff=seawall.Backoff.constant(1.0),
        timeout=3.5,
        clock=clock,
        hooks=(),
    )
    outcome = policy.run(fn)
    assert isinstance(outcome.error, ConnectionError)
    assert (outcome.attempts, outcome.reason, clock.now()) == (4, "deadline", 3.0)
    assert len(calls) == 4


# -- per-call changes -------------------------------------------------------------------------


def test_retry_with_changes_one_call_as_in_tenacity() -> None:
    ours_fn, ours_calls = failing(100, lambda: ConnectionError("refused"))
    decorated = ours(max_attempts=2)(ours_fn)
    with pytest.raises(ConnectionError):
        decorated.retry_with(max_attempts=4)()  # type: ignore[attr-defined]
    with pytest.raises(ConnectionError):
        decorated()  # the decorated function keeps its own policy
    assert len(ours_calls) == 4 + 2

    theirs_fn, theirs_calls = failing(100, lambda: ConnectionError("refused"))
    wrapped = tenacity.retry(
        stop=tenacity.stop_after_attempt(2), reraise=True, sleep=lambda s: None
    )(theirs_fn)
    with pytest.raises(ConnectionError):
        wrapped.retry_with(stop=tenacity.stop_after_attempt(4))()
    with pytest.raises(ConnectionError):
        wrapped()
    assert len(theirs_calls) == 4 + 2
