"""Success-path cost of a retry policy with a shared budget vs without one, in one run.

Contenders (a function that returns at once, decorated; hooks off):
  bare call; RetryPolicy without a budget; RetryPolicy with a shared RetryBudget, TokenBucket,
  RetryQuota.aws_standard() or AdaptiveThrottle; and the budget's own calls alone
  (on_request + on_success), to separate the budget from the engine around it.
A RetryBudget or AdaptiveThrottle reads the clock on every call until a slice (window/10) holds
2048 calls, then once every 1/1024 of the larger of the previous slice's calls and the current
one's so far. Every contender first runs for 1.2 s (more than one slice of the default window),
so "RetryBudget" shows a busy client's steady state; "RetryBudget(window=3600)" never leaves
its first slice here (a busy client's first six minutes). The "quiet" rows time the first 2,000
calls of a fresh budget, rebuilt for every round: the regime of a client with little traffic,
which reads the clock on every call so that its counts are exact.
Contenders are interleaved (A B C ... A B C ...) and the best of several timeit.repeat rounds is
kept, so a noisy neighbour slows every contender alike. Figures: ns per call, ratio to the bare
call, and ns added over the policy without a budget.

Usage: python benchmarks/budget_overhead.py [--repeat 9] [--number 20000] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import timeit
from collections.abc import Callable

import seawall

NO_BUDGET = "RetryPolicy, no budget"


def contenders() -> dict[str, Callable[[], object]]:
    def target() -> int:
        return 1

    def policy(budget: seawall.Budget | None) -> Callable[[], object]:
        return seawall.RetryPolicy(budget=budget, hooks=())(target)

    def alone(budget: seawall.Budget) -> Callable[[], object]:
        on_request, on_success = budget.on_request, budget.on_success

        def both() -> None:
            on_request()
            on_success()

        return both

    return {
        "bare call": target,
        NO_BUDGET: policy(None),
        "RetryPolicy + RetryBudget": policy(seawall.RetryBudget()),
        "RetryPolicy + RetryBudget(window=3600)": policy(seawall.RetryBudget(window=3600.0)),
        "RetryPolicy + TokenBucket": policy(seawall.TokenBucket()),
        "RetryPolicy + RetryQuota.aws_standard()": policy(seawall.RetryQuota.aws_standard()),
        "RetryPolicy + AdaptiveThrottle": policy(seawall.AdaptiveThrottle()),
        "RetryBudget alone (on_request + on_success)": alone(seawall.RetryBudget()),
        "time.monotonic() (one clock read)": time.monotonic,
    }


QUIET_CALLS = 2000  # below the 2048 calls a slice that switch a budget to strided clock reads


def quiet_contenders() -> dict[str, Callable[[], Callable[[], object]]]:
    """Factories: each round times the first QUIET_CALLS calls of a freshly built policy."""

    def target() -> int:
        return 1

    def fresh(make: Callable[[], seawall.Budget | None]) -> Callable[[], Callable[[], object]]:
        return lambda: seawall.RetryPolicy(budget=make(), hooks=())(target)

    return {
        "quiet: RetryPolicy, no budget": fresh(lambda: None),
        "quiet: RetryPolicy + RetryBudget": fresh(seawall.RetryBudget),
        "quiet: RetryPolicy + AdaptiveThrottle": fresh(seawall.AdaptiveThrottle),
    }


def warm(fn: Callable[[], object], seconds: float) -> None:
    """Run *fn* for *seconds*: budgets reach the state of a client that has been busy a while."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            fn()


def measure(repeat: int, number: int) -> dict[str, float]:
    fns = contenders()
    for fn in fns.values():
        warm(fn, 1.2)
    quiet = quiet_contenders()
    best = dict.fromkeys([*fns, *quiet], float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():  # interleaved: one round of every contender per repeat
            best[name] = min(best[name], min(timeit.repeat(fn, number=number, repeat=1)) / number)
        for name, make in quiet.items():
            for _ in range(max(1, number // QUIET_CALLS)):
                t = timeit.timeit(make(), number=QUIET_CALLS) / QUIET_CALLS
                best[name] = min(best[name], t)
    return best


def report(best: dict[str, float], markdown: bool) -> None:
    bare = best["bare call"]
    rows = []
    for name, t in best.items():
        plain = best["quiet: " + NO_BUDGET if name.startswith("quiet:") else NO_BUDGET]
        added = f"{(t - plain) * 1e9:+,.0f}" if "RetryPolicy +" in name else ""
        rows.append((name, f"{t * 1e9:,.0f}", f"{t / bare:.1f}x", added))
    if markdown:
        print("\n| success path | ns/call | ratio to bare call | ns added by the budget |")
        print("|---|---:|---:|---:|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        print(f"\n  {'success path':<50} {'ns/call':>9} {'ratio':>7} {'added':>7}")
        for name, ns, ratio, added in rows:
            print(f"  {name:<50} {ns:>9} {ratio:>7} {added:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    print(
        f"seawall {seawall.__version__}; Python {platform.python_version()} "
        f"({platform.python_implementation()}); {os.cpu_count()} cores; {sys.platform}; "
        f"best of {args.repeat} x {args.number} calls"
    )
    report(measure(args.repeat, args.number), args.markdown)


if __name__ == "__main__":
    main()
