"""Deterministic simulation of the saga orchestrator under injected faults, one seed a schedule.

Each schedule runs the real :class:`seawall.saga.Orchestrator` against a real SQLite file, with
several simulated workers (each an orchestrator of its own on that file, as separate processes
would be), on one shared :class:`seawall.VirtualClock` that only the harness moves. Everything a
schedule does is drawn from ``random.Random(seed)``: the saga's steps and policies, the workers,
the order of their operations, how each step call ends, and the faults:

- ``crash``: a worker killed at a commit point (its store raises :class:`SimulatedCrash` just
  before or just after its N-th commit; before one, SQLite rolls the transaction back);
- ``side_crash``: a worker killed between a step's side effect and the commit of its outcome;
- ``skew``: workers whose clocks read the shared time plus an offset of up to 1.5 leases (where
  the orchestrator takes ``store_clock=``, leases and due times are judged on the shared clock,
  standing for the store's; elsewhere on each worker's own);
- ``slow``: a step that takes longer than the lease while another worker runs ``run_due``;
  its lease is renewed meanwhile (``slow_step``), or the step starves its worker's threads
  (``starved_lease``: it holds the GIL), when only the orchestrator's lease keeper process
  renews, or nothing does (``keeper_down``);
- ``deploy``: a new worker registers the saga with a step inserted, removed, renamed or moved
  (as version 2 beside version 1 in half of the deploys, where ``Saga`` takes ``version=``);
- ``failures``: transient and permanent errors of actions and compensations;
- ``outage``: the store lost at a worker's commit point inside ``run_due`` (its store raises
  :class:`SimulatedOutage`, an error the store takes for an outage, just before or just after
  its N-th commit: the commit is lost, or it landed and the worker cannot know); the worker
  lives on, as ``work`` would after an outage, and runs ``run_due`` again later;
- ``operator``: an operator's ``retry_now``, ``compensate`` or ``cancel`` of a run (with
  ``force`` in some schedules).

Apart from the faults, some schedules make some steps' functions ``async def`` (the worker
runs them on its virtual event loop: each worker's clock is a :class:`VirtualClock`), give
each run a deadline (``Saga(timeout=...)``), or put a step that waits among the others: a
durable timer (``saga.Sleep``) or a wait for a signal (``saga.WaitFor``), the signals sent to
started runs at random times, some twice.

Besides the faults, a step call lets another worker run ``run_due`` now and then (for up to a
third of the lease), as concurrent workers would. The orchestrator's lease-renewing heartbeat
and its thread pool are replaced by deterministic stand-ins (:class:`SimHeartbeat`,
:class:`InlineExecutor`): the harness decides when leases are renewed and in which order the
attempts of a group run, so that a seed replays exactly.

A killed worker's orchestrator is closed and never used again; later operations start new
workers with new ids. After the schedule's operations, the faults stop (crash plans disarmed,
clocks agree) and a fresh worker joins; time moves on until every run has settled.

The invariants are checked after every operation of the schedule and at every step call (see
:data:`sim_invariants.INVARIANTS`). A violation names the seed, the operation and a command
that replays it::

    python tests/saga/simulation.py --seed 1234 --trace

:data:`sim_invariants.KNOWN_OPEN` lists, per fault, the invariants the orchestrator is known to
break under it (open faults), and :data:`sim_invariants.NOT_GUARANTEED` those it does not
promise by design: such a violation is reported but does not fail the suite. Empty a
KNOWN_OPEN entry once its fix lands (``--strict`` ignores both lists; a sweep's summary names
the listed invariants that no schedule broke). Run many schedules with ``--schedules N
[--first SEED]``.

This module runs schedules and sums them up; the harness is in the modules beside it:
``sim_config`` (what a schedule is made of, drawn from its seed), ``sim_invariants`` (what is
checked, and the lists above), ``sim_workers`` (the simulated workers and the deterministic
stand-ins), ``sim_schedule`` (one schedule), ``sim_operations`` (what it does, one operation at
a time) and ``sim_checks`` (the checks).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

if __name__ == "__main__":  # replaying from a checkout: this tree's seawall, not an installed one
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "src"))

import sim_invariants
from sim_config import DEFAULT_SCHEDULES, Result, replay_command
from sim_schedule import Simulation


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    """A directory for the schedules' SQLite files: in memory where the system has such a file
    system (every commit syncs the log to disk otherwise), else the default temporary one."""
    shm = "/dev/shm"
    parent = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    directory = tempfile.mkdtemp(prefix="seawall-sim-", dir=parent)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _remove(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


def run_schedule(
    seed: int,
    directory: str,
    *,
    strict: bool = False,
    trace: bool = False,
    sabotage: str | None = None,
) -> Result:
    """Run the schedule of *seed* with its SQLite file in *directory*; an error escaping the
    harness becomes a violation of the schedule (``harness_error``), with its replay command."""
    sim = Simulation(seed, directory, strict=strict, trace=trace, sabotage=sabotage)
    try:
        return sim.run()
    except Exception as exc:
        sim.violate("harness_error", (), f"{type(exc).__name__}: {exc}")
        if trace:
            import traceback

            sim.trace.append(traceback.format_exc())
        return sim.result()
    finally:
        _remove(sim.path)


def sweep(
    count: int, first: int = 0, *, strict: bool = False, sabotage: str | None = None
) -> list[Result]:
    with scratch() as directory:
        return [
            run_schedule(seed, directory, strict=strict, sabotage=sabotage)
            for seed in range(first, first + count)
        ]


def schedule_count() -> int:
    """``SEAWALL_SIM_SCHEDULES`` (only to raise the count), else the default."""
    text = os.environ.get("SEAWALL_SIM_SCHEDULES", "")
    try:
        return max(DEFAULT_SCHEDULES, int(text)) if text else DEFAULT_SCHEDULES
    except ValueError:
        raise ValueError(f"SEAWALL_SIM_SCHEDULES must be a number, got {text!r}") from None


def summary(results: Sequence[Result]) -> str:
    """What broke, by invariant and by tag, with example seeds; and what the runs became."""
    lines = [f"{len(results)} schedules"]
    by: dict[str, list[int]] = collections.defaultdict(list)
    tags: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        for v in {v.invariant: v for v in r.violations}.values():
            by[v.invariant].append(r.seed)
            for t in r.tags:
                tags[v.invariant][t] += 1
    for invariant, seeds in sorted(by.items()):
        shown = ", ".join(map(str, seeds[:5]))
        common = ", ".join(f"{t} {n}" for t, n in tags[invariant].most_common(4))
        failing = sum(
            any(v.invariant == invariant and not v.known for v in r.violations) for r in results
        )
        lines.append(
            f"  {invariant}: broken in {len(seeds)} schedules, {failing} failing (seeds "
            f"{shown}); tags: {common}"
        )
    if not by:
        lines.append("  no invariant broken")
    stale = [
        f"{invariant} under {tag}"
        for tag, invariants in sorted(sim_invariants.KNOWN_OPEN.items())
        for invariant in sorted(invariants)
        if not any(
            tag in r.tags and any(v.invariant == invariant for v in r.violations) for r in results
        )
    ]
    if stale:
        lines.append("  known open, and broken in no schedule here: " + "; ".join(stale))
    total: collections.Counter[str] = collections.Counter()
    for r in results:
        total.update(r.stats)
    lines.append(
        "  totals: "
        + ", ".join(f"{k} {v}" for k, v in sorted(total.items()) if not k.startswith("status_"))
    )
    lines.append(
        "  runs: "
        + ", ".join(f"{k[7:]} {v}" for k, v in sorted(total.items()) if k.startswith("status_"))
    )
    for key in ("batch", "concurrency"):
        for value in sorted({getattr(r, key) for r in results}):
            picked = [r for r in results if getattr(r, key) == value and r.stats["crashes"]]
            crashes = sum(r.stats["crashes"] for r in picked)
            dupes = sum(r.stats["duplicates"] for r in picked)
            lines.append(
                f"  {key} {value}: {len(picked)} schedules with crashes, {crashes} crashes, "
                f"{dupes} duplicated side effects"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run (or replay) seeded schedules of the saga simulation."
    )
    parser.add_argument("--seed", type=int, help="replay this one schedule")
    parser.add_argument("--schedules", type=int, default=None, help="how many schedules")
    parser.add_argument("--first", type=int, default=0, help="the first seed of a sweep")
    parser.add_argument("--trace", action="store_true", help="print what the schedule did")
    parser.add_argument(
        "--strict", action="store_true", help="fail known-open invariants too (KNOWN_OPEN)"
    )
    args = parser.parse_args(argv)
    if args.seed is not None:
        with scratch() as directory:
            result = run_schedule(args.seed, directory, strict=args.strict, trace=True)
        if args.trace:
            print("\n".join(result.trace))
        print(f"seed {args.seed}: tags {sorted(result.tags)}; {dict(result.stats)}")
        for v in result.violations:
            print(v)
        return 1 if result.failures else 0
    count = args.schedules if args.schedules is not None else schedule_count()
    began = time.process_time()
    results = sweep(count, args.first, strict=args.strict)
    print(summary(results))
    print(f"  {time.process_time() - began:.1f} s of CPU")
    failed = [r for r in results if r.failures]
    for r in failed[:10]:
        print(f"{r.failures[0]}\n    replay: {replay_command(r.seed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
