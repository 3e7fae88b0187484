"""A RetryBudget at low traffic gives what its documentation says, in numbers.

The floor of a budget (``min_per_second``) is a reserve of retries that needs no requests. At
low traffic it is most of the budget: with a floor of 10 retries a second (the former default),
300 calls at 10 a second to a dependency that always fails made 630 attempts, where "10% more"
was what a reader expected. These tests drive that case on virtual time and check the bound
``ratio * requests + min_per_second * (T + window)`` and the figures docs/budgets.md and the
README print.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
from collections.abc import Callable

import pytest

import seawall
from seawall import RetryBudget, RetryPolicy, VirtualClock

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Unavailable(ConnectionError):
    """What an always-503 endpoint answers, as the HTTP integrations see it: retryable."""


def always_failing(
    budget: Callable[[VirtualClock], RetryBudget | None], requests: int, rate: float
) -> tuple[int, float]:
    """*requests* calls, one every ``1 / rate`` seconds of virtual time, each with up to 3
    attempts against a dependency that fails every one. Returns (attempts made, seconds)."""
    clock = VirtualClock()
    policy = RetryPolicy(
        max_attempts=3, budget=budget(clock), clock=clock, rng=random.Random(3), hooks=()
    )
    attempts = 0

    async def endpoint() -> None:
        nonlocal attempts
        attempts += 1
        raise Unavailable("503 Service Unavailable")

    async def call(at: float) -> None:
        await asyncio.sleep(at)
        with pytest.raises(Unavailable):
            await policy.acall(endpoint)

    async def main() -> None:
        await asyncio.gather(*(call(i / rate) for i in range(requests)))

    seawall.testing.run(main(), clock)
    return attempts, clock.now()


def bound(budget: RetryBudget, requests: int, seconds: float) -> float:
    """The documented ceiling on attempts: every call once, plus the budget's retries."""
    return requests + budget.ratio * requests + budget.min_per_second * (seconds + budget.window)


def test_the_defaults_are_a_small_floor() -> None:
    budget = RetryBudget()
    assert (budget.ratio, budget.min_per_second, budget.window) == (0.1, 1.0, 10.0)


def test_300_calls_at_10_a_second_stay_within_the_documented_bound() -> None:
    made: list[RetryBudget] = []

    def default(clock: VirtualClock) -> RetryBudget:
        made.append(RetryBudget(clock=clock))
        return made[0]

    attempts, seconds = always_failing(default, 300, 10.0)
    assert 29.5 < seconds < 31.0  # 30 s of arrivals, the last retries just after
    limit = bound(made[0], 300, 30.0)
    assert limit == 370  # 300 + 10% of 300 + 1/s x (30 s + a 10 s window)
    assert attempts <= limit
    # The budget binds: without it, 900; and it is not a ceiling the run stays far below.
    assert attempts >= 350
    assert always_failing(lambda clock: None, 300, 10.0)[0] == 900


def test_the_former_floor_is_what_made_630() -> None:
    attempts, _ = always_failing(
        lambda clock: RetryBudget(min_per_second=10.0, clock=clock), 300, 10.0
    )
    assert 600 <= attempts <= 300 + 30 + 10 * 40


def test_a_floor_of_zero_is_the_ratio_alone() -> None:
    attempts, _ = always_failing(
        lambda clock: RetryBudget(min_per_second=0, clock=clock), 300, 10.0
    )
    assert 300 < attempts <= 330


def figures() -> dict[str, int]:
    """The figures the documentation prints for this run."""
    made: list[RetryBudget] = []

    def default(clock: VirtualClock) -> RetryBudget:
        made.append(RetryBudget(clock=clock))
        return made[0]

    with_budget, _ = always_failing(default, 300, 10.0)
    former, _ = always_failing(
        lambda clock: RetryBudget(min_per_second=10.0, clock=clock), 300, 10.0
    )
    return {
        "none": always_failing(lambda clock: None, 300, 10.0)[0],
        "former": former,
        "default": with_budget,
        "bound": round(bound(made[0], 300, 30.0)),
    }


def test_docs_print_the_figures_of_this_run() -> None:
    f = figures()
    page = " ".join((ROOT / "docs" / "budgets.md").read_text(encoding="utf-8").split())
    expected_rows = [
        f"| no budget | {f['none']:,} |",
        f"| `RetryBudget(min_per_second=10)` (the former default floor) | {f['former']:,} |",
        f"| `RetryBudget()` (the defaults) | {f['default']:,} |",
        f"| bound: `requests + 0.1 * requests + 1 * (30 s + 10 s)` | {f['bound']:,} |",
    ]
    for row in expected_rows:
        assert row in page, f"docs/budgets.md should show {row!r}"
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = (
        f"300 calls at 10 a second to a dead endpoint: {f['none']:,} attempts without a budget, "
        f"{f['default']:,} with `RetryBudget()`"
    )
    assert said in readme, f"README.md should say {said!r}"


def test_the_demo_sweep_shows_the_budget_holding_the_load() -> None:
    # The simulator's sweep gives each client a RetryBudget() of its own, 10 requests a second
    # for 10 s: at most 10% of 100 requests plus 1/s over the 10 s window, a load of 1.2.
    from seawall.sim import sweep

    result = sweep(
        clients=10,
        rate=10.0,
        duration=10.0,
        failure_rates=(0.5, 0.75),
        strategies=("retries_3", "retry_budget"),
        splits=(),
    )
    for p in (0.5, 0.75):
        budget, plain = result.row("retry_budget", p), result.row("retries_3", p)
        assert budget.load <= 1.0 + 0.1 + 1.0 * 10.0 / (10.0 * 10.0) + 0.02
        assert plain.load > 1.8
