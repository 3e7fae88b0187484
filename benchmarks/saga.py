"""Sagas: runs per second of a 3-step saga, seawall.saga side by side with DBOS on one database.

Each contender runs the same workflow (three steps that return a small dict; optionally 10% of
attempts fail with a transient error and are retried at once) on the same kind of database with
the same durability: SQLite with ``synchronous=FULL`` (seawall: WAL; DBOS: SQLite's default
rollback journal, also FULL), and PostgreSQL with ``fsync`` and ``synchronous_commit`` on.

Every worker process is also a caller: it starts (or calls) its share of the runs, then runs
them; the figure is runs / (last finish - first start) over all processes, best of the repeats,
contenders interleaved. It also measures the time from a worker's SIGKILL inside a step to the
step's next attempt starting in a restarted process, and the commits one run costs.

    pip install -e '.[bench,postgres]'
    python benchmarks/saga.py              # --runs 400 --repeats 3; PostgreSQL if installed
"""

from __future__ import annotations

import argparse
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

HERE = pathlib.Path(__file__).resolve().parent


# -- the workflow, for each contender (run inside worker processes) ------------------------------


def seawall_worker(
    url: str, share: range, total: int, rate: float, go: str, out: str, batched: bool = False
) -> None:
    import seawall
    from seawall import saga

    rng = random.Random(os.getpid())

    def step(ctx: saga.StepContext) -> dict[str, Any]:
        if rng.random() < rate:
            raise ConnectionError("transient")
        return {"step": ctx.step, "i": ctx.input["i"]}

    policy = seawall.RetryPolicy(max_attempts=10, backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("bench", [saga.Step(n, step, policy=policy) for n in ("a", "b", "c")])
    orch = saga.Orchestrator(url, [flow], batch=64, concurrency=8, poll=0.005, hooks=())
    watcher = saga.Orchestrator(url, [flow], hooks=())
    stop = threading.Event()
    while not os.path.exists(go):
        time.sleep(0.001)
    t0 = time.time()
    if batched:  # 64 starts per commit
        for lo in range(share.start, share.stop, 64):
            chunk = range(lo, min(lo + 64, share.stop))
            orch.start_many("bench", [{"i": i} for i in chunk], [f"r{i}" for i in chunk])
    else:  # one commit per start
        for i in share:
            orch.start("bench", {"i": i}, run_id=f"r{i}")

    def watch() -> None:
        while watcher.counts().get(saga.Status.SUCCEEDED, 0) < total:
            time.sleep(0.01)
        stop.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    orch.work(stop)
    t1 = time.time()
    pathlib.Path(out).write_text(json.dumps({"t0": t0, "t1": t1, "commits": orch.store.commits}))
    orch.close()
    watcher.close()


def dbos_worker(url: str, share: range, total: int, rate: float, go: str, out: str) -> None:
    from dbos import DBOS

    rng = random.Random(os.getpid())
    DBOS(config={"name": "bench", "system_database_url": url, "console_log_level": "ERROR"})

    @DBOS.step(retries_allowed=True, max_attempts=10, interval_seconds=0.0, backoff_rate=1.0)
    def step(i: int, name: str) -> dict[str, Any]:
        if rng.random() < rate:
            raise ConnectionError("transient")
        return {"step": name, "i": i}

    @DBOS.workflow()
    def flow(i: int) -> list[dict[str, Any]]:
        return [step(i, "a"), step(i, "b"), step(i, "c")]

    DBOS.launch()
    while not os.path.exists(go):
        time.sleep(0.001)
    t0 = time.time()
    for i in share:
        flow(i)
    t1 = time.time()
    pathlib.Path(out).write_text(json.dumps({"t0": t0, "t1": t1, "commits": None}))
    DBOS.destroy()


# -- the crash: SIGKILL inside step b, restart, time until b's next attempt starts ----------------


def seawall_crash(url: str, marker: str) -> None:
    import seawall
    from seawall import saga

    def a(ctx: saga.StepContext) -> None:
        return None

    def b(ctx: saga.StepContext) -> None:
        with open(marker, "a") as f:
            f.write(f"{time.time()}\n")
        if ctx.attempt == 1:
            time.sleep(600)

    policy = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(0.0), hooks=())
    flow = saga.Saga("crash", [saga.Step("a", a, policy=policy), saga.Step("b", b, policy=policy)])
    with saga.Orchestrator(url, [flow], lease=1.0, poll=0.01, hooks=()) as orch:
        orch.start("crash", {}, run_id="c")
        orch.run_until_settled("c")


def dbos_crash(url: str, marker: str) -> None:
    from dbos import DBOS

    DBOS(config={"name": "crash", "system_database_url": url, "console_log_level": "ERROR"})

    @DBOS.step()
    def a() -> None:
        return None

    @DBOS.step()
    def b() -> None:
        with open(marker, "a") as f:
            f.write(f"{time.time()}\n")
        if len(pathlib.Path(marker).read_text().splitlines()) == 1:
            time.sleep(600)

    @DBOS.workflow()
    def flow() -> None:
        a()
        b()

    DBOS.launch()  # recovers this executor's pending workflows at once
    if not DBOS.list_workflows():
        flow()
    while len(pathlib.Path(marker).read_text().splitlines()) < 2:
        time.sleep(0.01)
    DBOS.destroy()


# -- the harness ----------------------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args], stderr=subprocess.PIPE)


def fresh_url(kind: str, base: str | None, tag: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp(prefix='saga-bench-')}/{tag}.db"
    import psycopg

    assert base is not None
    name = f"b_{tag}_{os.getpid()}_{int(time.time() * 1e6) % 10**9}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


def prepare(contender: str, url: str) -> None:
    """Create the tables once, before the timed processes start."""
    subprocess.run([sys.executable, __file__, "--prepare", contender, url], check=True)


def measure(
    contender: str, kind: str, base: str | None, workers: int, runs: int, rate: float
) -> dict[str, Any]:
    url = fresh_url(kind, base, contender)
    prepare("dbos" if contender == "dbos" else "seawall", url)
    work = pathlib.Path(tempfile.mkdtemp(prefix="saga-bench-"))
    go = str(work / "go")
    per = runs // workers
    procs = []
    for k in range(workers):
        procs.append(
            spawn(
                "--worker",
                contender,
                url,
                str(k * per),
                str((k + 1) * per),
                str(runs),
                str(rate),
                go,
                str(work / f"out{k}"),
            )
        )
    time.sleep(2.5 if contender == "dbos" else 1.5)  # imports and launch, outside the timing
    pathlib.Path(go).touch()
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{contender} worker failed: {err.decode(errors='replace')[-2000:]}")
    outs = [json.loads((work / f"out{k}").read_text()) for k in range(workers)]
    seconds = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    commits = [o["commits"] for o in outs]
    return {
        "runs_per_s": runs / seconds,
        "commits_per_run": None if None in commits else sum(commits) / runs,
    }


def crash(contender: str, kind: str, base: str | None) -> float:
    url = fresh_url(kind, base, f"crash_{contender}")
    prepare(contender, url)
    marker = str(pathlib.Path(tempfile.mkdtemp(prefix="saga-bench-")) / "marker")
    pathlib.Path(marker).touch()
    first = spawn("--crash", contender, url, marker)
    while not pathlib.Path(marker).read_text():
        time.sleep(0.005)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    killed = time.time()
    second = spawn("--crash", contender, url, marker)
    _, err = second.communicate(timeout=120)
    if second.returncode != 0:
        raise RuntimeError(err.decode(errors="replace")[-2000:])
    resumed = float(pathlib.Path(marker).read_text().splitlines()[1])
    return resumed - killed


def sqlite_commit_rate() -> float:
    import sqlite3

    path = pathlib.Path(tempfile.mkdtemp()) / "rate.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("COMMIT")
        n += 1
    return n / (time.perf_counter() - t0)


def start_postgres() -> tuple[Any, str] | None:
    sys.path.insert(0, str(HERE.parent / "tests" / "saga"))
    try:
        from postgres_cluster import Cluster  # the test suite's throwaway cluster, fsync on

        cluster = Cluster(durable=True)
    except Exception as err:
        print(f"PostgreSQL not measured: {err}")
        return None
    return cluster, cluster.url


def versions() -> str:
    from importlib.metadata import version

    return f"seawall {version('seawall')}, dbos {version('dbos')}, psycopg {version('psycopg')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}"
    )
    print(versions())
    print(
        f"SQLite {__import__('sqlite3').sqlite_version}: {sqlite_commit_rate():.0f} commits/s (WAL, synchronous=FULL)"
    )
    server = None if args.no_postgres else start_postgres()
    kinds = [("sqlite", None)] + ([("postgresql", server[1])] if server else [])
    try:
        print(f"\n{args.runs} runs of a 3-step saga; runs/s, best of {args.repeats}")
        print(
            "| store | workers | failures | seawall runs/s: start | start_many | DBOS runs/s "
            "| ratio: start | start_many | seawall commits/run: start | start_many |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for kind, base in kinds:
            for workers in (1, 4):
                for rate in (0.0, 0.1):
                    best: dict[str, dict[str, Any]] = {}
                    for _ in range(args.repeats):
                        for contender in ("seawall", "seawall_many", "dbos"):  # interleaved
                            r = measure(contender, kind, base, workers, args.runs, rate)
                            if (
                                contender not in best
                                or r["runs_per_s"] > best[contender]["runs_per_s"]
                            ):
                                best[contender] = r
                    s, m, d = best["seawall"], best["seawall_many"], best["dbos"]
                    print(
                        f"| {kind} | {workers} | {rate:.0%} | {s['runs_per_s']:.0f} | {m['runs_per_s']:.0f} "
                        f"| {d['runs_per_s']:.0f} | {s['runs_per_s'] / d['runs_per_s']:.1f}x "
                        f"| {m['runs_per_s'] / d['runs_per_s']:.1f}x | {s['commits_per_run']:.2f} "
                        f"| {m['commits_per_run']:.2f} |",
                        flush=True,
                    )
        print("\ntime from SIGKILL inside a step to its next attempt in a restarted process (s)")
        print("| store | seawall (lease 1 s) | DBOS |")
        print("|---|---|---|")
        for kind, base in kinds:
            s = min(crash("seawall", kind, base) for _ in range(args.repeats))
            d = min(crash("dbos", kind, base) for _ in range(args.repeats))
            print(f"| {kind} | {s:.2f} | {d:.2f} |", flush=True)
    finally:
        if server:
            server[0].stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        contender, url, lo, hi, total, rate, go, out = sys.argv[2:]
        share = range(int(lo), int(hi))
        if contender == "dbos":
            dbos_worker(url, share, int(total), float(rate), go, out)
        else:
            seawall_worker(
                url, share, int(total), float(rate), go, out, contender == "seawall_many"
            )
    elif len(sys.argv) > 1 and sys.argv[1] == "--crash":
        contender, url, marker = sys.argv[2:]
        (seawall_crash if contender == "seawall" else dbos_crash)(url, marker)
    elif len(sys.argv) > 1 and sys.argv[1] == "--prepare":
        contender, url = sys.argv[2:]
        if contender == "seawall":
            from seawall import saga

            saga.Orchestrator(url, [saga.Saga("x", [saga.Step("x", lambda ctx: None)])]).close()
        else:
            from dbos import DBOS

            DBOS(config={"name": "bench", "system_database_url": url, "console_log_level": "ERROR"})
            DBOS.launch()
            DBOS.destroy()
    else:
        main()
