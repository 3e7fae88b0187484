"""Per-call overhead of seawall vs tenacity, backoff and stamina, side by side in one run.

Two workloads, each a logical call of a function decorated by each library:
  (a) success: the function returns at once;
  (b) three failures then success, with all waits set to zero.
Baselines measured in the same run: a bare call and a hand-written try/except loop.
Logging/instrumentation hooks are off for every library (each logs differently).
Contenders are interleaved (A B C ... A B C ...) and the best of several repeats is kept, so a
noisy neighbour slows every contender alike. Run: `make bench` (installs the pinned peers).

Usage: python benchmarks/overhead.py [--repeat 7] [--number 20000] [--markdown]
"""

from __future__ import annotations

import argparse
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


def table(title: str, results: dict[str, float], markdown: bool) -> str:
    base = results["hand-written loop"]
    rows = [(name, ns * 1e9, ns / base) for name, ns in results.items()]
    if markdown:
        out = [f"**{title}**", "", "| | ns per call | vs hand-written loop |", "|---|---:|---:|"]
        out += [f"| {n} | {t:,.0f} | {r:.2f}x |" for n, t, r in rows]
    else:
        out = [title, f"{'':20} {'ns/call':>10} {'vs loop':>9}"]
        out += [f"{n:20} {t:10,.0f} {r:8.2f}x" for n, t, r in rows]
    seawall_ns = results["seawall"]
    faster = ", ".join(f"{p} {results[p] / seawall_ns:.1f}x" for p in PEERS)
    out += ["", f"seawall is faster than: {faster}", ""]
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
    sys.stdout.flush()


if __name__ == "__main__":
    main()
