"""Success-path cost of a retry policy with a shared budget vs without one, in one run.

Contenders (a function that returns at once, decorated; hooks off):
  bare call; RetryPolicy without a budget; RetryPolicy with a shared RetryBudget, TokenBucket,
  RetryQuota.aws_standard() or AdaptiveThrottle; and the budget's own calls alone
  (on_request + on_success), to separate the budget from the engine around it.
A RetryBudget reads the clock on every deposit until a slice (window/10) holds 2048 deposits,
then once every 1/1024 of the previous slice's deposits. Every contender first runs for 1.2 s
(more than one slice of the default window), so "RetryBudget" shows a busy client's steady
state; "RetryBudget(window=3600)" never leaves its first slice here and reads the clock on
every call, like a client with little traffic.
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
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():  # interleaved: one round of every contender per repeat
            best[name] = min(best[name], min(timeit.repeat(fn, number=number, repeat=1)) / number)
    return best


def report(best: dict[str, float], markdown: bool) -> None:
    bare = best["bare call"]
    plain = best[NO_BUDGET]
    rows = []
    for name, t in best.items():
        added = f"{(t - plain) * 1e9:+,.0f}" if name.startswith("RetryPolicy +") else ""
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
