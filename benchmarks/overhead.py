"""Per-call overhead of seawall vs tenacity, backoff and stamina, side by side in one run.

Two workloads, each a logical call of a function decorated by each library:
  (a) success: the function returns at once;
  (b) three failures then success, with all waits set to zero.
Baselines measured in the same run: a bare call and a hand-written try/except loop.
Logging/instrumentation hooks are off for every library (each logs differently).
Contenders are interleaved (A B C ... A B C ...) in several rounds. Each row gives the best time
per call over the rounds, and its ratio to the hand-written loop as the median of the ratios
measured within each round (the contender against the loop timed in the same round), which a
noisy neighbour disturbs least; seawall's ratio in every round follows each table. Run:
`make bench` (installs the pinned peers).

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
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

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


class Timings:
    """The time per call of each contender in every round of an interleaved run."""

    def __init__(self, names: list[str]) -> None:
        self.rounds: dict[str, list[float]] = {name: [] for name in names}

    def best(self, name: str) -> float:
        return min(self.rounds[name])

    def round_ratios(self, name: str, base: str) -> list[float]:
        """*name* against *base* in each round (both timed in that round)."""
        return [a / b for a, b in zip(self.rounds[name], self.rounds[base], strict=True)]

    def ratio(self, name: str, base: str) -> float:
        """*name* against *base*: the median of the ratios within each round."""
        return statistics.median(self.round_ratios(name, base))

    def rounds_line(self, name: str, base: str) -> str:
        """Every round's ratio of *name* against *base*, in the order the rounds ran."""
        ratios = " ".join(f"{r:.2f}" for r in self.round_ratios(name, base))
        return f"{name} against {base}, each round: {ratios}"


def interleave(fns: dict[str, Callable[[], object]], repeat: int, number: int) -> Timings:
    """Time each of *fns* over *number* calls, in *repeat* rounds of A B C ..., after a warm-up."""
    for fn in fns.values():
        timeit.timeit(fn, number=max(1, number // 10))
    timings = Timings(list(fns))
    for _ in range(repeat):
        for name, fn in fns.items():
            timings.rounds[name].append(timeit.timeit(fn, number=number) / number)
    return timings


def measure(failures: int, repeat: int, number: int) -> Timings:
    fns = contenders(failures)
    if failures:
        fns.pop("bare call")  # a bare call cannot survive a failure
    return interleave(fns, repeat, number)


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


def hand_loops(
    budget: seawall.Budget | None,
) -> tuple[Callable[[], object], Callable[[Callable[[], int]], object]]:
    """What a careful programmer writes: three attempts, the budget told by hand. Twice: with
    the function built in (as a decorator's wrapper has it) and taking it as an argument (as
    ``policy.call(fn)`` does)."""
    on_request = budget.on_request if budget is not None else None
    on_success = budget.on_success if budget is not None else None

    def loop_fn(fn: Callable[[], int]) -> object:
        if on_request is not None:
            on_request()
        for i in range(3):
            try:
                result = fn()
            except (ConnectionError, TimeoutError):
                if i == 2:
                    raise
                continue
            if on_success is not None:
                on_success()
            return result
        raise AssertionError("unreachable")

    def loop() -> object:
        if on_request is not None:
            on_request()
        for i in range(3):
            try:
                result = target()
            except (ConnectionError, TimeoutError):
                if i == 2:
                    raise
                continue
            if on_success is not None:
                on_success()
            return result
        raise AssertionError("unreachable")

    return loop, loop_fn


BUDGETS: dict[str, Callable[[], seawall.Budget]] = {
    "RetryBudget": seawall.RetryBudget,
    "TokenBucket": seawall.TokenBucket,
    "RetryQuota": seawall.RetryQuota.aws_standard,
    "AdaptiveThrottle": seawall.AdaptiveThrottle,
}


def entry_points(repeat: int, number: int) -> list[tuple[str, Timings]]:
    """(c): each seawall contender beside its hand-written twin, interleaved in one run.

    The decorator is timed against the loop with its function built in; ``policy.call(fn)``
    (called from a lambda) against the loop taking the function as an argument, called from a
    lambda too: each pair does the same calls.
    """
    groups = [(name, entry_point_group(name)) for name in ("plain policy", *BUDGETS)]
    return [(title, interleave(fns, repeat, number)) for title, fns in groups]


def entry_point_group(name: str) -> dict[str, Callable[[], object]]:
    """(c)'s four contenders for one budget (*name*: "plain policy" or a key of BUDGETS)."""
    make = BUDGETS.get(name)
    policy = seawall.RetryPolicy(hooks=(), budget=None if make is None else make())
    loop, loop_fn = hand_loops(None if make is None else make())
    return {
        "hand-written loop": loop,
        "seawall decorator": policy(target),
        "hand-written loop(fn)": lambda: loop_fn(target),
        "seawall policy.call(fn)": lambda: policy.call(target),
    }


def pairs_table(results: list[tuple[str, Timings]], markdown: bool) -> str:
    """(c) as one table: each seawall entry point against its hand-written twin."""
    head = ["", "loop", "decorator", "ratio", "loop(fn)", "call(fn)", "ratio"]
    rows = []
    for title, r in results:
        a, b = "hand-written loop", "seawall decorator"
        c, d = "hand-written loop(fn)", "seawall policy.call(fn)"
        rows.append(
            [
                title,
                f"{r.best(a) * 1e9:,.0f}",
                f"{r.best(b) * 1e9:,.0f}",
                f"{r.ratio(b, a):.2f}x",
                f"{r.best(c) * 1e9:,.0f}",
                f"{r.best(d) * 1e9:,.0f}",
                f"{r.ratio(d, c):.2f}x",
            ]
        )
    if markdown:
        out = [
            "**(c) success path: each entry point against its hand-written twin (ns per call)**",
            "",
            "| " + " | ".join(head) + " |",
            "|---|" + "---:|" * (len(head) - 1),
        ]
        out += ["| " + " | ".join(row) + " |" for row in rows]
    else:
        out = ["(c) success path: each entry point against its hand-written twin (ns per call)"]
        out += ["  ".join(f"{cell:>18}" for cell in head)]
        out += ["  ".join(f"{cell:>18}" for cell in row) for row in rows]
    out.append("")
    for title, r in results:
        out.append(f"{title}: {r.rounds_line('seawall decorator', 'hand-written loop')}")
        out.append(f"{title}: {r.rounds_line('seawall policy.call(fn)', 'hand-written loop(fn)')}")
    return "\n".join([*out, ""])


def async_path(repeat: int, number: int) -> Timings:
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

    async def aloop_fn(fn: Callable[[], Any]) -> object:
        for i in range(3):
            try:
                return await fn()
            except (ConnectionError, TimeoutError):
                if i == 2:
                    raise
        raise AssertionError("unreachable")

    policy = seawall.RetryPolicy(hooks=())
    fns = {
        "bare await": atarget,
        "hand-written loop": aloop,
        "seawall decorator": policy(atarget),
        "hand-written loop(fn), from a lambda": lambda: aloop_fn(atarget),
        "seawall policy.acall(fn), from a lambda": lambda: policy.acall(atarget),
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

    async def run() -> Timings:
        for fn in fns.values():
            await timed(fn, max(1, number // 10))
        timings = Timings(list(fns))
        for _ in range(repeat):
            for name, fn in fns.items():
                timings.rounds[name].append(await timed(fn, number))
        return timings

    return asyncio.run(run())


def table(title: str, results: Timings, markdown: bool) -> str:
    base = "hand-written loop"
    rows = [(name, results.best(name) * 1e9, results.ratio(name, base)) for name in results.rounds]
    if markdown:
        out = [f"**{title}**", "", "| | ns per call | vs hand-written loop |", "|---|---:|---:|"]
        out += [f"| {n} | {t:,.0f} | {r:.2f}x |" for n, t, r in rows]
    else:
        out = [title, f"{'':20} {'ns/call':>10} {'vs loop':>9}"]
        out += [f"{n:20} {t:10,.0f} {r:8.2f}x" for n, t, r in rows]
    ours = "seawall" if "seawall" in results.rounds else "seawall decorator"
    peers = [p for p in PEERS if p in results.rounds]
    if peers and ours in results.rounds:
        faster = ", ".join(f"{p} {results.ratio(p, ours):.1f}x" for p in peers)
        out += ["", f"seawall is faster than: {faster}"]
    if ours in results.rounds:
        out += ["", results.rounds_line(ours, base)]
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
    print(
        f"{args.repeat} interleaved rounds of {args.number:,} calls each (b: a quarter of that);"
        " best time per call, ratio: the median of the ratios within each round\n"
    )
    success = measure(0, args.repeat, args.number)
    print(table("(a) success path", success, args.markdown))
    failing = measure(3, args.repeat, max(1, args.number // 4))
    print(table("(b) three failures, then success (zero waits)", failing, args.markdown))
    print(pairs_table(entry_points(args.repeat, args.number), args.markdown))
    print(table("(d) success path, async def", async_path(args.repeat, args.number), args.markdown))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
