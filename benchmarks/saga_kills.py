"""Sagas under kills: duplicate side effects with the default batch against ``batch=1``.

A worker process runs a 3-step saga over many runs on SQLite (``synchronous=FULL``) and on
PostgreSQL (``fsync`` and ``synchronous_commit`` on, a throwaway cluster); each step does a side
effect (one line appended to a side log, after 2 ms of "I/O") and returns. The
worker is killed with SIGKILL at a random moment, again and again; then a last worker finishes
every run. A duplicate is a step whose side effect happened more than once for one run: the
attempt finished but the worker died before its outcome was committed, and the retry did it
again (at-least-once; the step's idempotency key is what keeps it single downstream).

Rounds alternate the two batch sizes (A B A B ...), each with the same seeded kill times. The
figure compared is duplicates per 1,000 side effects: a worker that does more work per second
has more finished-but-unrecorded work at a random instant, so the fair question is whether
batching widens the window of each attempt. Every round's figures are shown, and checked: no run
lost, every run SUCCEEDED; the attempts charged whose function never began are counted (a kill
between the commit of an attempt's start and the step's thread entering it).

    python benchmarks/saga_kills.py            # --rounds 3 --kills 12 --runs 600
    python benchmarks/saga_kills.py --stores sqlite --json docs/figures/saga_kills.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _postgres import start_postgres


def worker(url: str, sidelog: str, batch: int, ready: str) -> None:
    """One worker process: run the saga's due work until every run is settled."""
    import seawall
    from seawall import saga

    def act(ctx: saga.StepContext) -> str:
        line = json.dumps({"run": ctx.run_id, "step": ctx.step, "attempt": ctx.attempt})
        fd = os.open(sidelog + ".begin", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (line + "\n").encode())
        os.close(fd)
        time.sleep(0.002)  # the step's I/O
        fd = os.open(sidelog, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (line + "\n").encode())  # the side effect
        os.close(fd)
        return ctx.step

    policy = seawall.RetryPolicy(max_attempts=50, backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("k", [saga.Step(n, act, policy=policy) for n in ("a", "b", "c")])
    with saga.Orchestrator(url, [flow], lease=0.5, batch=batch, poll=0.01, hooks=()) as orch:
        pathlib.Path(ready).touch()
        stop = threading.Event()

        def watch() -> None:
            # An orchestrator of its own: one is used from one thread at a time, and this one's
            # worker loop runs in the main thread.
            with saga.Orchestrator(url, [flow], hooks=()) as counter:
                while True:
                    counts = counter.counts()
                    if sum(n for s, n in counts.items() if s.final) >= int(os.environ["RUNS"]):
                        stop.set()
                        return
                    time.sleep(0.2)

        threading.Thread(target=watch, daemon=True).start()
        orch.work(stop)


def spawn(url: str, sidelog: pathlib.Path, batch: int, runs: int) -> tuple[Any, pathlib.Path]:
    ready = sidelog.with_suffix(f".ready{time.monotonic_ns()}")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", url, str(sidelog), str(batch), str(ready)],
        env={**os.environ, "RUNS": str(runs)},
    )
    return proc, ready


def fresh_url(base: str | None, tmp: pathlib.Path) -> str:
    """A new SQLite file in *tmp*, or a new database on the PostgreSQL server of *base*."""
    if base is None:
        return f"sqlite:///{tmp}/k.db"
    import psycopg

    name = f"kills_{os.getpid()}_{time.monotonic_ns() % 10**12}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


def one_round(
    batch: int, kills: int, runs: int, seed: int, base: str | None = None
) -> dict[str, Any]:
    from seawall import saga

    rng = random.Random(seed)
    tmp = pathlib.Path(tempfile.mkdtemp())
    url = fresh_url(base, tmp)
    sidelog = tmp / "side.log"
    sidelog.touch()
    flow = saga.Saga("k", [saga.Step(n, lambda ctx: None) for n in ("a", "b", "c")])
    with saga.Orchestrator(url, [flow], hooks=()) as orch:
        orch.start_many("k", [{"i": i} for i in range(runs)], [f"r{i}" for i in range(runs)])
    for _ in range(kills):
        proc, _ = spawn(url, sidelog, batch, runs)
        size = sidelog.stat().st_size
        while sidelog.stat().st_size == size and proc.poll() is None:
            time.sleep(0.002)  # until this worker's first side effect
        time.sleep(rng.uniform(0.1, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)  # the lease lapses
    proc, _ = spawn(url, sidelog, batch, runs)
    proc.wait(timeout=600)
    done = [json.loads(x) for x in sidelog.read_text().splitlines()]
    began = [json.loads(x) for x in (tmp / "side.log.begin").read_text().splitlines()]
    effects = collections.Counter((d["run"], d["step"]) for d in done)
    starts = collections.Counter((d["run"], d["step"]) for d in began)
    with saga.Orchestrator(url, [flow], hooks=()) as orch:
        found = orch.runs(limit=runs + 10)
    assert len(found) == runs, f"runs lost: {runs - len(found)}"
    unbegun = 0
    for run in found:
        assert run.status is saga.Status.SUCCEEDED, run
        for step in run.steps:
            unbegun += max(0, step.attempt_count - starts[(run.run_id, step.name)])
    duplicates = sum(n - 1 for n in effects.values() if n > 1)
    return {
        "batch": batch,
        "kills": kills,
        "side_effects": len(done),
        "duplicates": duplicates,
        "per_1000": 1000.0 * duplicates / len(done),
        # Attempts charged whose function never began: the kill fell between the commit of
        # the attempt's start and its thread entering the function.
        "charged_not_begun": unbegun,
    }


def one_store(kind: str, base: str | None, args: argparse.Namespace) -> dict[str, Any]:
    print(f"## {kind}")
    rows = []
    for r in range(args.rounds):
        pair = [one_round(b, args.kills, args.runs, seed=r, base=base) for b in (32, 1)]
        ratio = pair[0]["per_1000"] / pair[1]["per_1000"] if pair[1]["per_1000"] else None
        rows.append({"round": r + 1, "batch32": pair[0], "batch1": pair[1], "ratio": ratio})
        print(
            f"round {r + 1}: batch=32 {pair[0]['duplicates']} duplicates in "
            f"{pair[0]['side_effects']} side effects ({pair[0]['per_1000']:.2f}/1000); "
            f"batch=1 {pair[1]['duplicates']} in {pair[1]['side_effects']} "
            f"({pair[1]['per_1000']:.2f}/1000); ratio "
            + ("n/a" if ratio is None else f"{ratio:.2f}")
            + f"; charged, never begun: {pair[0]['charged_not_begun']} and "
            f"{pair[1]['charged_not_begun']}",
            flush=True,
        )
    total = {
        b: (
            sum(row[f"batch{b}"]["duplicates"] for row in rows),
            sum(row[f"batch{b}"]["side_effects"] for row in rows),
        )
        for b in (32, 1)
    }
    rates = {b: 1000.0 * d / n for b, (d, n) in total.items()}
    print(
        f"all rounds: batch=32 {total[32][0]} duplicates ({rates[32]:.2f}/1000 side effects, "
        f"{total[32][0] / (args.kills * args.rounds):.2f} a kill); batch=1 {total[1][0]} "
        f"({rates[1]:.2f}/1000, {total[1][0] / (args.kills * args.rounds):.2f} a kill)",
        flush=True,
    )
    return {"rounds": rows, "rates": rates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    if not kinds or set(kinds) - {"sqlite", "postgresql"}:
        parser.error(f"--stores must name sqlite and/or postgresql, got {args.stores!r}")
    print(
        f"# {os.cpu_count()} CPUs, Python {platform.python_version()}, {args.kills} kills a "
        f"round, {args.runs} runs of 3 steps; SQLite synchronous=FULL, PostgreSQL fsync on; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    server = start_postgres() if "postgresql" in kinds else None
    data: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "kills": args.kills,
        "runs": args.runs,
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "stores": {},
    }
    try:
        for kind in kinds:
            if kind == "postgresql" and server is None:
                continue
            base = server[1] if kind == "postgresql" and server is not None else None
            data["stores"][kind] = one_store(kind, base, args)
    finally:
        if server is not None:
            server[0].stop()
    data["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:4], int(sys.argv[4]), sys.argv[5])
    else:
        main()
