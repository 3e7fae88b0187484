"""Success-path cost of a Pipeline against a single policy and a bare call, in one run.

Sync contenders (a function that returns at once, decorated):
  bare call; RetryPolicy; RetryPolicy(timeout); RetryPolicy(timeout, attempt_timeout);
  CircuitBreaker; Pipeline(retry); Pipeline(retry, breaker);
  Pipeline(timeout, retry, breaker, attempt_timeout).
Async contenders (a coroutine that returns at once, awaited in a loop inside one task):
  bare await; RetryPolicy; Pipeline(retry, breaker); Pipeline(retry, breaker, attempt_timeout);
  Hedge (answer before the delay); Pipeline(retry, breaker, hedge).
Hooks are off. Contenders are interleaved (A B C ... A B C ...) and the best of several repeats
is kept, so a noisy neighbour slows every contender alike; figures are ratios to the bare call.

Usage: python benchmarks/pipeline_overhead.py [--repeat 7] [--number 20000] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import timeit
from collections.abc import Awaitable, Callable

import seawall


def sync_contenders() -> dict[str, Callable[[], object]]:
    def target() -> int:
        return 1

    retry = seawall.RetryPolicy(hooks=())
    breaker = seawall.CircuitBreaker()
    return {
        "bare call": target,
        "RetryPolicy": retry(target),
        "RetryPolicy(timeout)": retry.replace(timeout=30.0)(target),
        "RetryPolicy(timeout, attempt_timeout)": retry.replace(timeout=30.0, attempt_timeout=5.0)(
            target
        ),
        "CircuitBreaker": seawall.CircuitBreaker()(target),
        "Pipeline(retry)": seawall.Pipeline(retry=retry)(target),
        "Pipeline(retry, breaker)": seawall.Pipeline(retry=retry, breaker=breaker)(target),
        "Pipeline(timeout, retry, breaker, attempt_timeout)": seawall.Pipeline(
            timeout=30.0, retry=retry, breaker=seawall.CircuitBreaker(), attempt_timeout=5.0
        )(target),
    }


def async_contenders() -> dict[str, Callable[[], Awaitable[object]]]:
    async def target() -> int:
        return 1

    retry = seawall.RetryPolicy(hooks=())
    return {
        "bare await": target,
        "RetryPolicy": retry(target),
        "Pipeline(retry, breaker)": seawall.Pipeline(retry=retry, breaker=seawall.CircuitBreaker())(
            target
        ),
        "Pipeline(retry, breaker, attempt_timeout)": seawall.Pipeline(
            retry=retry, breaker=seawall.CircuitBreaker(), attempt_timeout=5.0
        )(target),
        "Hedge (no hedge needed)": seawall.Hedge(1.0)(target),
        "Pipeline(retry, breaker, hedge)": seawall.Pipeline(
            retry=retry, breaker=seawall.CircuitBreaker(), hedge=seawall.Hedge(1.0)
        )(target),
    }


def measure_sync(repeat: int, number: int) -> dict[str, float]:
    fns = sync_contenders()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():  # interleaved: one round of every contender per repeat
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number)
    return best


def measure_async(repeat: int, number: int) -> dict[str, float]:
    fns = async_contenders()
    best = dict.fromkeys(fns, float("inf"))

    async def timed(fn: Callable[[], Awaitable[object]]) -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(number):
            await fn()
        return (loop.time() - start) / number

    async def main() -> None:
        for _ in range(repeat):
            for name, fn in fns.items():
                best[name] = min(best[name], await timed(fn))

    asyncio.run(main())
    return best


def report(title: str, best: dict[str, float], markdown: bool) -> None:
    base = next(iter(best.values()))
    if markdown:
        print(f"\n| {title} | ns/call | ratio to bare |\n|---|---:|---:|")
        for name, t in best.items():
            print(f"| {name} | {t * 1e9:,.0f} | {t / base:.1f}x |")
    else:
        print(f"\n{title}")
        for name, t in best.items():
            print(f"  {name:<52} {t * 1e9:>9,.0f} ns  {t / base:>6.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    print(
        f"seawall {seawall.__version__}; Python {platform.python_version()} "
        f"({platform.python_implementation()}); {os.cpu_count()} cores; {sys.platform}"
    )
    report("sync success path", measure_sync(args.repeat, args.number), args.markdown)
    report("async success path", measure_async(args.repeat, args.number // 4), args.markdown)


if __name__ == "__main__":
    main()
