"""Simulator speed: events per second and wall time of the occ and metastable scenarios.

Run: python benchmarks/sim_speed.py [--no-grid] [--workers N] [--repeats N] [--hedge-only]

- occ, N=100, 100 trials, each algorithm, one process: wall time, write attempts and
  events per second (in occ one event is one write attempt: the read, the write and the answer
  are merged into it).
- metastable, 80 s, 10 runs of each strategy, one process.
- hedge (2000 requests x 10 leaves, three strategies, the real Hedge.acall driver), one process,
  on three loops side by side, interleaved, best of --repeats: asyncio's selector loop on
  virtual time (VirtualEventLoop) with each attempt a task (the configuration before
  SimEventLoop), SimEventLoop with each attempt a task, and SimEventLoop with each attempt a
  future (the default).
- the whole occ grid (N = 10..190 step 10, five algorithms, 100 trials) over --workers
  processes; the target is under 60 s on a 2-core machine.

Every decision in these runs is made by the real RetryPolicy/RetryState/Backoff/budget code.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from seawall._core.aio import VirtualEventLoop
from seawall.sim import OCC_ALGORITHMS, _hedge, hedge, metastable, occ
from seawall.sim._loop import SimEventLoop

HEDGE_CONFIGS = (
    ("VirtualEventLoop, attempts as tasks", VirtualEventLoop, False),
    ("SimEventLoop, attempts as tasks", SimEventLoop, False),
    ("SimEventLoop, attempts as futures", SimEventLoop, True),
)


def bench_hedge(repeats: int) -> None:
    best = {name: float("inf") for name, _, _ in HEDGE_CONFIGS}
    events = {}
    for _ in range(repeats):
        for name, loop, futures in HEDGE_CONFIGS:  # interleaved: A B C A B C ...
            _hedge._LOOP, _hedge._FUTURE_ATTEMPTS = loop, futures
            # CPU time of this process: the machine is shared, and a single-process run's CPU
            # time is what the loop costs, without the waits for a busy core.
            t0 = time.process_time()
            r = hedge(seed=0)
            best[name] = min(best[name], time.process_time() - t0)
            events[name] = r.events
    _hedge._LOOP, _hedge._FUTURE_ATTEMPTS = SimEventLoop, True
    base = best[HEDGE_CONFIGS[0][0]]
    print(f"{'loop':<38}{'CPU (s)':>10}{'events/s':>12}{'speed-up':>10}")
    for name, _, _ in HEDGE_CONFIGS:
        print(
            f"{name:<38}{best[name]:>10.2f}{events[name] / best[name]:>12,.0f}"
            f"{base / best[name]:>9.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-grid", action="store_true", help="skip the whole occ grid")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3, help="hedge: best of (3)")
    parser.add_argument("--hedge-only", action="store_true", help="only the hedge comparison")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}"
    )
    if args.hedge_only:
        print(f"hedge, 2000 requests x 10 leaves, 3 strategies, 1 process, best of {args.repeats}")
        bench_hedge(args.repeats)
        return
    print()
    print("occ, N=100, 100 trials, 1 process")
    print(f"{'algorithm':<14}{'wall (s)':>10}{'events':>12}{'events/s':>12}{'calls/trial':>13}")
    for algorithm in OCC_ALGORITHMS:
        t0 = time.perf_counter()
        r = occ((100,), algorithms=(algorithm,), trials=100, seed=0)
        wall = time.perf_counter() - t0
        row = r.rows[0]
        print(
            f"{algorithm:<14}{wall:>10.2f}{row.events:>12,}{row.events / wall:>12,.0f}"
            f"{row.calls:>13,.0f}"
        )
    print()
    print("metastable, 80 s simulated, 10 runs per strategy, 1 process")
    t0 = time.perf_counter()
    m = metastable(runs=10, seed=0)
    wall = time.perf_counter() - t0
    print(f"wall {wall:.2f} s, events {m.events:,}, {m.events / wall:,.0f} events/s")
    for s in m.series:
        rec = [t for t in s.recovered_at if t is not None]
        print(
            f"  {s.strategy:<16} success {s.success:6.1%}  load {s.load:4.2f}  "
            f"recovered in {len(rec)}/{len(s.recovered_at)} runs"
        )
    print()
    print(f"hedge, 2000 requests x 10 leaves, 3 strategies, 1 process, best of {args.repeats}")
    bench_hedge(args.repeats)
    if not args.no_grid:
        print()
        print(f"occ grid: N=10..190 step 10, 5 algorithms, 100 trials, {args.workers} processes")
        t0 = time.perf_counter()
        g = occ(trials=100, seed=0, workers=args.workers)
        wall = time.perf_counter() - t0
        print(f"wall {wall:.1f} s, events {g.events:,}, {g.events / wall:,.0f} events/s overall")


if __name__ == "__main__":
    main()
