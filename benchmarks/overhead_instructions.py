"""Instructions per call of seawall's entry points and of their hand-written twins, counted under
valgrind's cachegrind: sections (b) and (c) of ``overhead.py``, without the load's noise.

On a shared machine a timing ratio moves by several percent from run to run; the instructions a
call executes do not depend on the neighbours. For each contender this script runs itself under
``valgrind --tool=cachegrind`` twice (a warm-up of ``--warmup`` calls, then that plus
``--calls`` more) and gives the difference per call, with the ratio to the hand-written twin.

``--against SRC`` counts a second copy of seawall too (the ``src`` directory of another
checkout, such as the previous commit's, ``git archive HEAD~1 src | tar -x -C /tmp/old``):
each seawall row then shows both counts side by side, from the same run.

Instructions are not time (an instruction of the interpreter's loop costs more than one of a C
routine, and raising an exception is cheap in instructions for what it costs): the two
benchmarks are read together.

Usage: python benchmarks/overhead_instructions.py [--calls 2000] [--warmup 200] [--against SRC]
(needs ``valgrind`` on the PATH).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gc
import os
import sys

import _cachegrind as cachegrind

#: (b) three failures then success, and (c) each entry point's success path, per budget.
SECTIONS = {
    "(b) three failures, then success (zero waits)": [
        ("hand-written loop", "b:hand-written loop"),
        ("seawall decorator", "b:seawall"),
    ],
    **{
        f"(c) success path, {group}": [
            ("hand-written loop", f"c:{group}:hand-written loop"),
            ("seawall decorator", f"c:{group}:seawall decorator"),
            ("hand-written loop(fn)", f"c:{group}:hand-written loop(fn)"),
            ("seawall policy.call(fn)", f"c:{group}:seawall policy.call(fn)"),
        ]
        for group in (
            "plain policy",
            "RetryBudget",
            "TokenBucket",
            "RetryQuota",
            "AdaptiveThrottle",
        )
    },
}


def child(kind: str, number: int) -> None:
    """Make *number* calls of the contender *kind*."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overhead

    overhead.silence_instrumentation()
    if kind.startswith("b:"):
        fn = overhead.contenders(3)[kind[2:]]
    else:
        _, group, name = kind.split(":", 2)
        fn = overhead.entry_point_group(group)[name]
    gc.disable()
    for _ in range(number):
        fn()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--against", metavar="SRC", help="another copy of seawall to count too")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    cachegrind.require_valgrind()
    against = os.path.abspath(args.against) if args.against else None
    kinds = [kind for rows in SECTIONS.values() for _, kind in rows]
    cachegrind.warm(__file__, kinds, (None, against) if against else (None,))
    jobs: dict[tuple[str, str | None], concurrent.futures.Future[float]] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for rows in SECTIONS.values():
            for _, kind in rows:
                for src in (None, against) if against and ":seawall" in kind else (None,):
                    jobs[kind, src] = pool.submit(
                        cachegrind.per_call, __file__, kind, args.calls, args.warmup, src
                    )
    print(f"instructions per call, {args.calls} calls after {args.warmup}")
    for title, rows in SECTIONS.items():
        print()
        head = "| instructions/call | vs its hand-written twin |"
        extra = " against | vs its twin |" if against else ""
        print(f"**{title}**\n\n| {head}{extra}")
        print("|---|---:|---:|" + ("---:|---:|" if against else ""))
        twin = 0.0
        for name, kind in rows:
            count = jobs[kind, None].result()
            if name.startswith("hand-written"):
                twin = count
            line = f"| {name} | {count:,.0f} | {count / twin:.2f}x |"
            if against and (kind, against) in jobs:
                old = jobs[kind, against].result()
                line += f" {old:,.0f} | {old / twin:.2f}x |"
            elif against:
                line += " | |"
            print(line)


if __name__ == "__main__":
    main()
