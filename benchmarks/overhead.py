"""Per-call overhead of seawall vs tenacity, backoff and stamina, side by side in one run.

Two workloads, each a logical call of a function decorated by each library:
  (a) success: the function returns at once;
  (b) three failures then success, with all waits set to zero.
Baselines measured in the same run: a bare call and a hand-written try/except loop.
Logging/instrumentation hooks are off for every library (each logs differently).
Contenders are interleaved (A B C ... A B C ...) and the best of several repeats is kept, so a
noisy neighbour slows every contender alike. Run: `make bench` (installs the pinned peers).

Then seawall's own entry points and budgets, each against the hand-written loop that does the
same work: (c) `policy.call(fn)` and the decorator; each built-in budget, against a loop that
calls the budget's `on_request` and `on_success` itself; (d) an `async def`, against a
hand-written async loop (awaited in one event loop, interleaved the same way).

Usage: python benchmarks/overhead.py [--repeat 7] [--number 20000] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
import sys
import timeit
from collections.abc import Callable

import backoff
import stamina
import tenacity

import seawall

PEERS = ("tenacity", "backoff", "stamina")


def flaky(failures: int) -> Callable[[], int]:
    """A function that fails with ConnectionError `failures` times, then succeeds; cyclically."""
    cycle = failures + 1
    calls = [0]

    def target() -> int:
        calls[0] += 1
        if calls[0] % cycle:
            raise ConnectionError("transient")
        return 1

    return target


def contenders(failures: int) -> dict[str, Callable[[], object]]:
    attempts = failures + 1
    target = flaky(failures)

    def loop() -> object:
        for i in range(attempts):
            try:
                return target()
            except (ConnectionError, TimeoutError):
                if i == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    t = tenacity.retry(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_none(),
        retry=tenacity.retry_if_exception_type((ConnectionError, TimeoutError)),
        reraise=True,
    )(target)
    b = backoff.on_exception(
        backoff.constant,
        (ConnectionError, TimeoutError),
        max_tries=attempts,
        interval=0,
        jitter=None,
        logger=None,
    )(target)
    s = stamina.retry(
        on=(ConnectionError, TimeoutError),
        attempts=attempts,
        wait_initial=0.0,
        wait_max=0.0,
        wait_jitter=0.0,
    )(target)
    w = seawall.RetryPolicy(max_attempts=attempts, backoff=seawall.Backoff.constant(0.0), hooks=())(
        target
    )
    return {
        "bare call": target,
        "hand-written loop": loop,
        "tenacity": t,
        "backoff": b,
        "stamina": s,
        "seawall": w,
    }


def silence_instrumentation() -> None:
    """Measure the retry machinery, not logging: every library runs without its hooks."""
    stamina.instrumentation.set_on_retry_hooks([])


def measure(failures: int, repeat: int, number: int) -> dict[str, float]:
    fns = contenders(failures)
    if failures:
        fns.pop("bare call")  # a bare call cannot survive a failure
    best = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():  # warm up
        timeit.timeit(fn, number=max(1, number // 10))
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number)
    return best


def machine() -> str:
    return (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.system()}"
    )


def versions() -> str:
    parts = [f"seawall {seawall.__version__}"]
    parts += [f"{p} {importlib.metadata.version(p)}" for p in PEERS]
    return ", ".join(parts)


def target() -> int:
    return 1


def hand_loop(budget: seawall.Budget | None) -> Callable[[], object]:
    """What a careful programmer writes: three attempts, and the budget told by hand."""
    if budget is None:

        def loop() -> object:
            for i in range(3):
                try:
                    return target()
                except (ConnectionError, TimeoutError):
                    if i == 2:
                        raise
            raise AssertionError("unreachable")

        return loop
    on_request, on_success = budget.on_request, budget.on_success

    def budget_loop() -> object:
        on_request()
        for i in range(3):
            try:
                result = target()
            except (ConnectionError, TimeoutError):
                if i == 2:
                    raise
                continue
            on_success()
            return result
        raise AssertionError("unreachable")

    return budget_loop


BUDGETS: dict[str, Callable[[], seawall.Budget]] = {
    "RetryBudget": seawall.RetryBudget,
    "TokenBucket": seawall.TokenBucket,
    "RetryQuota": seawall.RetryQuota.aws_standard,
    "AdaptiveThrottle": seawall.AdaptiveThrottle,
}


def entry_points(repeat: int, number: int) -> list[tuple[str, dict[str, float]]]:
    """(c): each seawall contender beside its hand-written twin, interleaved in one run."""
    groups: list[tuple[str, dict[str, Callable[[], object]]]] = []
    policy = seawall.RetryPolicy(hooks=())
    groups.append(
        (
            "plain policy",
            {
                "hand-written loop": hand_loop(None),
                "seawall decorator": policy(target),
                "seawall policy.call(fn)": lambda: policy.call(target),
            },
        )
    )
    for name, make in BUDGETS.items():
        shared = make()
        with_budget = seawall.RetryPolicy(hooks=(), budget=shared)
        groups.append(
            (
                name,
                {
                    "hand-written loop": hand_loop(make()),
                    "seawall decorator": with_budget(target),
                    "seawall policy.call(fn)": lambda p=with_budget: p.call(target),
                },
            )
        )
    results = []
    for title, fns in groups:
        best = dict.fromkeys(fns, float("inf"))
        for fn in fns.values():
            timeit.timeit(fn, number=max(1, number // 10))
        for _ in range(repeat):
            for name, fn in fns.items():
                best[name] = min(best[name], timeit.timeit(fn, number=number) / number)
        results.append((title, best))
    return results


def async_path(repeat: int, number: int) -> dict[str, float]:
    """(d): an async def decorated by seawall vs a hand-written async loop, in one event loop."""

    async def atarget() -> int:
        return 1

    async def aloop() -> object:
        for i in range(3):
            try:
                return await atarget()
            except (ConnectionError, TimeoutError):
                if i == 2:
                    raise
        raise AssertionError("unreachable")

    policy = seawall.RetryPolicy(hooks=())
    fns = {
        "bare await": atarget,
        "hand-written loop": aloop,
        "seawall decorator": policy(atarget),
        "seawall policy.acall(fn)": lambda: policy.acall(atarget),
        "stamina": stamina.retry(on=(ConnectionError, TimeoutError), attempts=3)(atarget),
        "tenacity": tenacity.retry(
            stop=tenacity.stop_after_attempt(3),
            retry=tenacity.retry_if_exception_type((ConnectionError, TimeoutError)),
            reraise=True,
        )(atarget),
    }

    async def timed(fn: Callable[[], object], n: int) -> float:
        clock = timeit.default_timer
        start = clock()
        for _ in range(n):
            await fn()  # type: ignore[misc]
        return (clock() - start) / n

    async def run() -> dict[str, float]:
        best = dict.fromkeys(fns, float("inf"))
        for fn in fns.values():
            await timed(fn, max(1, number // 10))
        for _ in range(repeat):
            for name, fn in fns.items():
                best[name] = min(best[name], await timed(fn, number))
        return best

    return asyncio.run(run())


def table(title: str, results: dict[str, float], markdown: bool) -> str:
    base = results["hand-written loop"]
    rows = [(name, ns * 1e9, ns / base) for name, ns in results.items()]
    if markdown:
        out = [f"**{title}**", "", "| | ns per call | vs hand-written loop |", "|---|---:|---:|"]
        out += [f"| {n} | {t:,.0f} | {r:.2f}x |" for n, t, r in rows]
    else:
        out = [title, f"{'':20} {'ns/call':>10} {'vs loop':>9}"]
        out += [f"{n:20} {t:10,.0f} {r:8.2f}x" for n, t, r in rows]
    seawall_ns = results.get("seawall", results.get("seawall decorator"))
    peers = [p for p in PEERS if p in results]
    if peers and seawall_ns:
        faster = ", ".join(f"{p} {results[p] / seawall_ns:.1f}x" for p in peers)
        out += ["", f"seawall is faster than: {faster}"]
    out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    silence_instrumentation()
    print(f"machine: {machine()}")
    print(f"versions: {versions()}")
    print(f"best of {args.repeat} interleaved repeats of {args.number:,} calls each\n")
    success = measure(0, args.repeat, args.number)
    print(table("(a) success path", success, args.markdown))
    failing = measure(3, args.repeat, max(1, args.number // 4))
    print(table("(b) three failures, then success (zero waits)", failing, args.markdown))
    for title, results in entry_points(args.repeat, args.number):
        print(table(f"(c) success path, {title}", results, args.markdown))
    print(table("(d) success path, async def", async_path(args.repeat, args.number), args.markdown))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
