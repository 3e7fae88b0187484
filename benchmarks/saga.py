"""Sagas with many callers: seawall.saga and DBOS as a web application uses them, on one database.

The application is one process with 8 caller threads (a web server's request threads) that
start runs of a 3-step saga (each step returns a small dict; optionally a share of the attempts
fail with a transient error and are retried at once). The contenders:

- ``seawall-1w``: the callers ``start`` runs (each with an orchestrator of its own: starts
  waiting at once share a commit); one worker process runs them (``Orchestrator(concurrency=8)``).
- ``seawall-4w``: the same with four worker processes (``concurrency=2`` each: 8 attempts in
  flight in all, as for DBOS).
- ``seawall-4w8``: four worker processes of ``concurrency=8`` each, as seawall-1w's one (32
  attempts in flight at most: each worker records up to eight outcomes a commit).
- ``dbos``: the callers call the workflow function (DBOS runs it in the caller's thread).
- ``dbos-queue``: the callers enqueue it on a DBOS queue (``worker_concurrency=8``) and the
  application's DBOS runs the queue.

Same database, same durability: SQLite with ``synchronous=FULL`` (seawall: WAL; DBOS: SQLite's
default rollback journal, also FULL) and PostgreSQL with ``fsync`` and ``synchronous_commit`` on.
A round measures every contender once, in turn (interleaved), with a fresh database each, and
the store's commit ceiling (a bare loop of small commits on the same store). Each contender
starts up before the measured time, and runs 16 runs from the callers' threads (warm-up, not
counted): seawall's workers have started their lease keepers, DBOS has launched and opened its
connections; the start-up is reported apart. The figure is runs / (time from the callers' go
to the last run's success), with the CPU time of the application's and workers' processes.
The application also reads the machine's CPU time at the go and at the end: the share in use
(every process, the database server's too) and the share the host took for other machines
(steal). Nothing of the harness runs in a contender's processes in the measured time but its wait for
the last run (a count every 5 ms, by seawall's application and DBOS's queued one): a worker
hears "go" and "stop" on its stdin, in a blocking read.
Commits per run: on PostgreSQL, the delta of ``pg_stat_database.xact_commit`` of the run's
database (minus the same contender's delta for zero runs: start-up, warm-up and shut-down, and
minus the harness's polls); on SQLite, the transactions seawall's stores committed, and for DBOS
the delta of the database file's change counter (header bytes 24-27, one per write transaction
in rollback-journal mode; the harness's polls write nothing). The median of the rounds is
reported with every round's figures; the results go to a JSON file.

    pip install -e '.[bench,postgres]'
    python benchmarks/saga.py --rounds 5 --runs 320 --json docs/figures/saga_callers.json
    python benchmarks/saga.py --recovery       # SIGKILL inside a step: time to its next attempt
    python benchmarks/saga.py --profile sqlite # one seawall-1w round under cProfile
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pathlib
import platform
import pstats
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _postgres import start_postgres

HERE = pathlib.Path(__file__).resolve().parent
CALLERS = 8
POLL = 0.01  # seawall's worker poll and the DBOS queue's polling interval
CONTENDERS = ("seawall-1w", "seawall-4w", "seawall-4w8", "dbos", "dbos-queue")
WORKERS = {"seawall-1w": (1, 8), "seawall-4w": (4, 2), "seawall-4w8": (4, 8)}  # processes, each
WARM = 2 * CALLERS  # runs of each contender before the measured time (not counted)


def wait_for(path: pathlib.Path) -> None:
    while not path.exists():
        time.sleep(0.001)


def cpu_times() -> list[int] | None:
    """The machine's CPU time so far, in clock ticks, from the first line of ``/proc/stat``
    (user, nice, system, idle, iowait, irq, softirq, steal); ``None`` where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None


def cpu_shares(before: list[int] | None, after: list[int] | None) -> dict[str, float] | None:
    """The shares of the machine's CPU time between two :func:`cpu_times`: ``busy`` (in use
    by any process of this machine, the database's too) and ``steal`` (taken by the host for
    other machines)."""
    if before is None or after is None:
        return None
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta)
    if total <= 0:
        return None
    idle = delta[3] + delta[4]
    return {"busy": (total - idle - delta[7]) / total, "steal": delta[7] / total}


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def count_done(url: str, contender: str) -> int:
    """Runs that succeeded, by a query of the harness's own (one transaction)."""
    if contender.startswith("seawall"):
        sql = "SELECT count(*) FROM seawall_saga_runs WHERE status = 'SUCCEEDED'"
    elif url.startswith("sqlite"):
        sql = "SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'"
    else:
        sql = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url), timeout=60)
        try:
            return int(conn.execute(sql).fetchone()[0])
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])


def wait_done(url: str, contender: str, total: int) -> int:
    """Poll until *total* runs succeeded; return the number of polls (each one transaction)."""
    polls = 0
    if url.startswith("sqlite"):
        while True:
            polls += 1
            if count_done(url, contender) >= total:
                return polls
            time.sleep(0.005)
    import psycopg

    sql = (
        "SELECT count(*) FROM seawall_saga_runs WHERE status = 'SUCCEEDED'"
        if contender.startswith("seawall")
        else "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            polls += 1
            row = conn.execute(sql).fetchone()
            if row is not None and row[0] >= total:
                return polls
            time.sleep(0.005)


# -- the application and the workers (each in a process of its own) ----------------------------


def seawall_flow(rate: float) -> Any:
    import seawall
    from seawall import saga

    rng = random.Random(os.getpid())

    def step(ctx: saga.StepContext) -> dict[str, Any]:
        if rate and rng.random() < rate:
            raise ConnectionError("transient")
        return {"step": ctx.step, "i": ctx.input["i"]}

    policy = seawall.RetryPolicy(max_attempts=10, backoff=seawall.Backoff.constant(0.0), hooks=())
    return saga.Saga("bench", [saga.Step(n, step, policy=policy) for n in ("a", "b", "c")])


def stamp(work: pathlib.Path, name: str, begun: float, first_round: float | None = None) -> None:
    """Say when this process began importing the library and when the library's start-up
    ended (seconds since the epoch), and how long a worker's first round took: start-up is
    reported apart from the measured time."""
    data = {"begun": begun, "started": time.time(), "first_round": first_round}
    (work / f"started-{name}").write_text(json.dumps(data))


def warm_up(run: Any) -> None:
    """WARM runs from the callers' threads, each waited for, before the measured time: both
    systems have their connections open, their statements prepared and their threads made."""

    def caller(k: int) -> None:
        for i in range(k, WARM, CALLERS):
            run(i)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def seawall_app(url: str, total: int, rate: float, work: pathlib.Path, workers: int) -> None:
    begun = time.time()
    from seawall import saga

    flow = seawall_flow(rate)
    orchs = [saga.Orchestrator(url, [flow], hooks=()) for _ in range(CALLERS)]
    stamp(work, "app", begun)
    for k in range(workers):  # every worker is warmed up too
        wait_for(work / f"started-w{k}")
    warm_up(lambda i: orchs[i % CALLERS].start("bench", {"i": -1 - i}, run_id=f"w{i}"))
    warm_polls = wait_done(url, "seawall", WARM)
    (work / "ready-app").touch()
    wait_for(work / "go")
    t0, cpu0, machine0 = time.time(), time.process_time(), cpu_times()
    base = [o.store.commits for o in orchs]
    held = [o.store.write_seconds for o in orchs]

    def caller(k: int) -> None:
        for i in range(k, total, CALLERS):
            orchs[k].start("bench", {"i": i}, run_id=f"r{i}")

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submitted = time.time()
    polls = wait_done(url, "seawall", WARM + total) if total else 0
    t1, machine = time.time(), cpu_shares(machine0, cpu_times())
    cpu = time.process_time() - cpu0
    commits = sum(o.store.commits - b for o, b in zip(orchs, base, strict=True))
    write = sum(o.store.write_seconds - h for o, h in zip(orchs, held, strict=True))
    out = {
        "cpu": cpu,
        "t0": t0,
        "t1": t1,
        "submitted": submitted,
        "commits": commits,
        "write_seconds": write,
        "polls": polls,
        "warm_polls": warm_polls,
        "machine": machine,
    }
    (work / "out-app.json").write_text(json.dumps(out))
    for o in orchs:
        o.close()


def seawall_worker(url: str, rate: float, concurrency: int, work: pathlib.Path, k: int) -> None:
    begun = time.time()
    from seawall import saga

    orch = saga.Orchestrator(
        url, [seawall_flow(rate)], concurrency=concurrency, poll=POLL, hooks=()
    )
    first = time.time()
    orch.run_due()  # a worker's start-up: its first round starts its lease keeper
    stamp(work, f"w{k}", begun, time.time() - first)
    stop = threading.Event()
    base: list[float] = []

    def watch() -> None:
        # The harness's "go" and "stop" come on stdin: a blocking read, where polling for a
        # file would wake this thread (and take the GIL) through the measured time.
        sys.stdin.readline()
        base[:] = [orch.store.commits, orch.store.write_seconds, time.process_time()]
        sys.stdin.readline()
        base.append(time.process_time())
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    (work / f"ready-w{k}").touch()
    profile = os.environ.get("SAGA_BENCH_PROFILE")
    if profile and k == 0:
        cProfile.runctx("orch.work(stop)", globals(), {"orch": orch, "stop": stop}, profile)
    else:
        orch.work(stop)
    out = {
        "commits": orch.store.commits - base[0],
        "write_seconds": orch.store.write_seconds - base[1],
        "cpu": base[3] - base[2],
    }
    (work / f"out-w{k}.json").write_text(json.dumps(out))
    orch.close()


def dbos_app(url: str, total: int, rate: float, work: pathlib.Path, queued: bool) -> None:
    begun = time.time()
    from dbos import DBOS

    rng = random.Random(os.getpid())
    lock = threading.Lock()
    DBOS(config={"name": "bench", "system_database_url": url, "console_log_level": "ERROR"})

    @DBOS.step(retries_allowed=True, max_attempts=10, interval_seconds=0.0, backoff_rate=1.0)
    def step(i: int, name: str) -> dict[str, Any]:
        if rate:
            with lock:
                fail = rng.random() < rate
            if fail:
                raise ConnectionError("transient")
        return {"step": name, "i": i}

    @DBOS.workflow()
    def flow(i: int) -> list[dict[str, Any]]:
        return [step(i, "a"), step(i, "b"), step(i, "c")]

    DBOS.launch()
    queue = (
        DBOS.register_queue("bench", worker_concurrency=CALLERS, polling_interval_sec=POLL)
        if queued
        else None
    )
    stamp(work, "app", begun)
    if queue is None:
        warm_up(lambda i: flow(-1 - i))
    else:
        warm_up(lambda i: queue.enqueue(flow, -1 - i).get_result())
    (work / "ready-app").touch()
    wait_for(work / "go")
    t0, cpu0, machine0 = time.time(), time.process_time(), cpu_times()

    def caller(k: int) -> None:
        for i in range(k, total, CALLERS):
            if queue is None:
                flow(i)
            else:
                queue.enqueue(flow, i)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    submitted = time.time()
    polls = wait_done(url, "dbos", WARM + total) if queue is not None and total else 0
    t1, machine = time.time(), cpu_shares(machine0, cpu_times())
    out = {
        "cpu": time.process_time() - cpu0,
        "t0": t0,
        "t1": t1,
        "submitted": submitted,
        "commits": None,
        "polls": polls,
        "warm_polls": 0,
        "machine": machine,
    }
    (work / "out-app.json").write_text(json.dumps(out))
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


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env or os.environ.copy(),
    )


def tell(procs: list[subprocess.Popen[bytes]], word: str) -> None:
    """Say *word* to each of *procs* on its stdin (a worker's watcher waits for it)."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{word}\n".encode())
        proc.stdin.flush()


def fresh_url(kind: str, base: str | None, tag: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp(prefix='saga-bench-')}/{tag}.db"
    import psycopg

    assert base is not None
    name = f"b_{tag.replace('-', '_')}_{os.getpid()}_{int(time.time() * 1e6) % 10**9}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


def prepare(contender: str, url: str) -> None:
    """Create the tables once, before the timed processes start."""
    kind = "seawall" if contender.startswith("seawall") else "dbos"
    subprocess.run([sys.executable, __file__, "--prepare", kind, url], check=True)


def xact_commits(base: str, url: str) -> int:
    """Transactions committed in *url*'s database so far (read from another database)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def change_counter(url: str) -> int:
    with open(sqlite_path(url), "rb") as f:
        return int.from_bytes(f.read(28)[24:28], "big")


def measure(
    contender: str,
    kind: str,
    base: str | None,
    runs: int,
    rate: float,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    url = fresh_url(kind, base, contender)
    prepare(contender, url)
    work = pathlib.Path(tempfile.mkdtemp(prefix="saga-bench-"))
    before = xact_commits(base, url) if base else change_counter(url)
    spawned = time.time()
    app = spawn("--app", contender, url, str(runs), str(rate), str(work), env=env)
    workers = []
    if contender.startswith("seawall"):
        procs, conc = WORKERS[contender]
        workers = [
            spawn("--worker", url, str(rate), str(conc), str(work), str(k), env=env)
            for k in range(procs)
        ]
    names = ["app"] + [f"w{k}" for k in range(len(workers))]
    for name in names:
        while not (work / f"ready-{name}").exists():
            for proc in [app, *workers]:
                if proc.poll() not in (None, 0):
                    raise RuntimeError(proc.stderr.read().decode(errors="replace")[-2000:])  # type: ignore[union-attr]
            time.sleep(0.01)
    (work / "go").touch()
    tell(workers, "go")
    _, err = app.communicate(timeout=1200)
    if app.returncode != 0:
        raise RuntimeError(f"{contender} app failed: {err.decode(errors='replace')[-2000:]}")
    tell(workers, "stop")
    for proc in workers:
        _, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{contender} worker failed: {err.decode(errors='replace')[-2000:]}")
    out = json.loads((work / "out-app.json").read_text())
    seconds = out["t1"] - out["t0"]
    started = [json.loads((work / f"started-{name}").read_text()) for name in names]
    outs = [json.loads((work / f"out-w{k}.json").read_text()) for k in range(len(workers))]
    # CPU seconds of the application's and the workers' processes in the measured time (a
    # worker's until the harness tells it to stop; its lease keeper is not counted).
    cpu = out["cpu"] + sum(w["cpu"] for w in outs)
    after = xact_commits(base, url) if base else change_counter(url)
    write = None
    if contender.startswith("seawall") and not base:
        # WAL mode does not count transactions in the header: the stores count them.
        commits = out["commits"] + sum(w["commits"] for w in outs)
        overhead = False
        # The file has one writer at a time: the share of the measured time its write lock was
        # held by the contender's transactions (the workers' until they hear "stop").
        write = out["write_seconds"] + sum(w["write_seconds"] for w in outs)
    else:
        # The harness's polls are transactions on PostgreSQL; on SQLite they write nothing.
        commits = after - before - (out["polls"] + out["warm_polls"] if base else 0)
        overhead = True
    return {
        "runs": runs,
        "seconds": seconds,
        "write_lock_seconds": write,
        "runs_per_s": runs / seconds if runs else None,
        "submit_seconds": out["submitted"] - out["t0"],
        "cpu_seconds": cpu,
        "commits": commits,
        "commits_include_startup": overhead,
        # The machine's CPU in the measured time: the share in use (every process, the
        # database's too) and the share the host took for other machines.
        "machine": out.get("machine"),
        # Start-up, apart from the measured time: from the processes' spawn until every one of
        # them could run (interpreter, imports, the library's start-up), and the longest time
        # one process spent importing the library and starting it (seawall: its orchestrators,
        # and a worker's first round, which starts its lease keeper; DBOS: DBOS(), launch()).
        "startup_seconds": max(x["started"] for x in started) - spawned,
        "library_startup_seconds": max(x["started"] - x["begun"] for x in started),
        "first_round_seconds": max((x["first_round"] or 0.0 for x in started), default=0.0),
    }


def commit_ceiling(kind: str, base: str | None, threads: int = 1, seconds: float = 1.0) -> float:
    """Commits/s of a bare loop of one-row INSERT commits on the store (*threads* loops)."""
    if kind == "sqlite-wal" or kind == "sqlite-delete":
        path = pathlib.Path(tempfile.mkdtemp(prefix="saga-bench-")) / "ceiling.db"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"PRAGMA journal_mode = {'WAL' if kind == 'sqlite-wal' else 'DELETE'}")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.close()

        def loop(counts: list[int], k: int, t_end: float) -> None:
            c = sqlite3.connect(path, isolation_level=None, timeout=60)
            c.execute("PRAGMA synchronous = FULL")
            while time.perf_counter() < t_end:
                c.execute("BEGIN IMMEDIATE")
                c.execute("INSERT INTO t VALUES (1)")
                c.execute("COMMIT")
                counts[k] += 1
            c.close()

    else:
        import psycopg

        assert base is not None
        url = fresh_url("postgresql", base, "ceiling")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x INTEGER)")

        def loop(counts: list[int], k: int, t_end: float) -> None:
            with psycopg.connect(url, autocommit=True) as c:
                while time.perf_counter() < t_end:
                    c.execute("INSERT INTO t VALUES (1)")
                    counts[k] += 1

    counts = [0] * threads
    t0 = time.perf_counter()
    ts = [threading.Thread(target=loop, args=(counts, k, t0 + seconds)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


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


def versions() -> dict[str, str]:
    from importlib.metadata import version

    found = {p: version(p) for p in ("seawall", "dbos", "psycopg")}
    found["sqlite"] = sqlite3.sqlite_version
    found["python"] = platform.python_version()
    found["postgresql"] = "-"
    return found


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "platform": platform.platform()}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summarise(data: dict[str, Any]) -> None:
    """Print the tables of the docs from the JSON (the contenders it has)."""
    measured = set.intersection(*(set(r["contenders"]) for r in data["results"]))
    contenders = [c for c in CONTENDERS if c in measured]
    print(
        f"\n{data['runs']} runs of a 3-step saga, {CALLERS} caller threads; median of "
        f"{data['rounds']} interleaved rounds (each round's figure in brackets)"
    )
    print(
        "| store | contender | runs/s | each round | commits/run | commits/s "
        "| of the ceiling, 1 loop | 8 loops | CPU ms/run | machine busy | steal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kind in data["stores"]:
        rounds = [r for r in data["results"] if r["store"] == kind]
        for contender in contenders:
            rps = [r["contenders"][contender]["runs_per_s"] for r in rounds]
            cpr = [r["contenders"][contender]["commits_per_run"] for r in rounds]
            cps = [a * b for a, b in zip(rps, cpr, strict=True)]
            if kind == "sqlite":  # each contender's journal mode; one writer at a time
                keys = ["sqlite-delete" if contender.startswith("dbos") else "sqlite-wal"]
            else:
                keys = ["postgresql-1", "postgresql-8"]
            shares = [
                f"{statistics.median(c / r['ceilings'][k] for c, r in zip(cps, rounds, strict=True)):.0%}"
                for k in keys
            ]
            shares += ["-"] * (2 - len(shares))
            cpus = [r["contenders"][contender].get("cpu_seconds") for r in rounds]
            cpu = "-" if None in cpus else f"{1000 * statistics.median(cpus) / data['runs']:.1f}"
            machines = [r["contenders"][contender].get("machine") for r in rounds]
            use = ["-", "-"]
            if None not in machines:  # saved before this was measured, or no /proc/stat
                use = [
                    f"{statistics.median(m[k] for m in machines):.0%}" for k in ("busy", "steal")
                ]
            print(
                f"| {kind} | {contender} | {statistics.median(rps):.0f} | "
                f"{' / '.join(f'{x:.0f}' for x in rps)} | {statistics.median(cpr):.2f} | "
                f"{statistics.median(cps):.0f} | {' | '.join(shares)} | {cpu} | {' | '.join(use)} |"
            )
    lock = [
        (contender, [r["contenders"][contender] for r in data["results"] if r["store"] == "sqlite"])
        for contender in contenders
    ]
    lock = [(c, rs) for c, rs in lock if rs and all(r.get("write_lock_seconds") for r in rs)]
    if lock:  # (figures saved before this was measured have none)
        print(
            "\nSQLite's write lock (one writer at a time): the share of the measured time "
            "seawall's transactions held it (every process's), and per transaction"
        )
        print("| store | contender | write lock held | each round | ms per transaction |")
        print("|---|---|---|---|---|")
        for contender, rs in lock:
            shares = [r["write_lock_seconds"] / r["seconds"] for r in rs]
            per = [1000 * r["write_lock_seconds"] / r["commits"] for r in rs]
            print(
                f"| sqlite | {contender} | {statistics.median(shares):.0%} | "
                f"{' / '.join(f'{x:.0%}' for x in shares)} | {statistics.median(per):.2f} |"
            )
    print("\nratios (seawall / DBOS), median and each round")
    print("| store | seawall | DBOS | median | rounds |")
    print("|---|---|---|---|---|")
    for kind in data["stores"]:
        rounds = [r for r in data["results"] if r["store"] == kind]
        for s in (c for c in contenders if c.startswith("seawall")):
            for d in ("dbos", "dbos-queue"):
                ratios = [
                    r["contenders"][s]["runs_per_s"] / r["contenders"][d]["runs_per_s"]
                    for r in rounds
                ]
                print(
                    f"| {kind} | {s} | {d} | {statistics.median(ratios):.2f}x | "
                    f"{' / '.join(f'{x:.2f}' for x in ratios)} |"
                )
    print(
        "\nstart-up, before the measured time (s): every process ready; the longest import and "
        "start of the library in one process; of which a worker's first round (its keeper)"
    )
    print("| store | contender | ready | each round | library | each round | first round |")
    print("|---|---|---|---|---|---|---|")
    for kind in data["stores"]:
        rounds = [r for r in data["results"] if r["store"] == kind]
        for contender in contenders:
            cols = []
            for key in ("startup_seconds", "library_startup_seconds", "first_round_seconds"):
                xs = [r["contenders"][contender].get(key) for r in rounds]
                if None in xs:  # a file saved before start-up was measured
                    cols += ["-"] if key == "first_round_seconds" else ["-", "-"]
                    continue
                if key == "first_round_seconds":
                    cols.append(f"{statistics.median(xs):.2f}" if xs[0] else "-")
                    continue
                cols += [f"{statistics.median(xs):.2f}", " / ".join(f"{x:.2f}" for x in xs)]
            print(f"| {kind} | {contender} | {' | '.join(cols)} |")
    print("\ncommit ceilings (commits/s, bare loop of one-row commits), median and each round")
    for kind in data["stores"]:
        rounds = [r for r in data["results"] if r["store"] == kind]
        for key in rounds[0]["ceilings"]:
            xs = [r["ceilings"][key] for r in rounds]
            print(f"- {key}: {statistics.median(xs):.0f} ({' / '.join(f'{x:.0f}' for x in xs)})")


def throughput(args: argparse.Namespace) -> None:
    server = None if args.no_postgres else start_postgres()
    kinds: list[tuple[str, str | None]] = [("sqlite", None)]
    if server:
        kinds.append(("postgresql", server[1]))
    data: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(),
        "runs": args.runs,
        "rounds": args.rounds,
        "failure_rate": args.failures,
        "callers": CALLERS,
        "workers": {k: {"processes": p, "concurrency": c} for k, (p, c) in WORKERS.items()},
        "poll": POLL,
        "stores": [k for k, _ in kinds],
        "load_before": load(),
        "baselines": {},
        "results": [],
    }
    try:
        if server:
            import psycopg

            with psycopg.connect(server[1]) as conn:
                row = conn.execute("SHOW server_version").fetchone()
                data["versions"]["postgresql"] = row[0] if row else "?"
                data["postgresql_settings"] = {
                    k: conn.execute(f"SHOW {k}").fetchone()[0]  # type: ignore[index]
                    for k in ("fsync", "synchronous_commit", "wal_sync_method")
                }
        else:
            data["versions"].pop("postgresql")
        # Start-up and shut-down commits of each contender (zero runs), subtracted below.
        for kind, base in kinds:
            for contender in CONTENDERS:
                r = measure(contender, kind, base, 0, args.failures)
                if r["commits_include_startup"]:
                    data["baselines"][f"{kind}/{contender}"] = r["commits"]
        print(f"baselines (commits for zero runs): {data['baselines']}", flush=True)
        for n in range(args.rounds):
            for kind, base in kinds:
                ceilings = (
                    {
                        "sqlite-wal": commit_ceiling("sqlite-wal", None),
                        "sqlite-delete": commit_ceiling("sqlite-delete", None),
                    }
                    if kind == "sqlite"
                    else {
                        "postgresql-1": commit_ceiling("postgresql", base),
                        "postgresql-8": commit_ceiling("postgresql", base, threads=CALLERS),
                    }
                )
                order = list(CONTENDERS) if n % 2 == 0 else list(reversed(CONTENDERS))
                found: dict[str, Any] = {}
                for contender in order:
                    r = measure(contender, kind, base, args.runs, args.failures)
                    if r["commits_include_startup"]:
                        r["commits"] -= data["baselines"][f"{kind}/{contender}"]
                    r["commits_per_run"] = r["commits"] / args.runs
                    found[contender] = r
                rec = {
                    "store": kind,
                    "round": n,
                    "load": load(),
                    "ceilings": ceilings,
                    "contenders": found,
                }
                data["results"].append(rec)
                print(
                    f"round {n} {kind} load {rec['load']}: "
                    + ", ".join(
                        f"{c} {found[c]['runs_per_s']:.0f}/s {found[c]['commits_per_run']:.2f}c/run"
                        for c in CONTENDERS
                    )
                    + f"; ceilings {', '.join(f'{k} {v:.0f}' for k, v in ceilings.items())}",
                    flush=True,
                )
        data["load_after"] = load()
    finally:
        if server:
            server[0].stop()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    summarise(data)


def crashes(args: argparse.Namespace) -> None:
    server = None if args.no_postgres else start_postgres()
    kinds: list[tuple[str, str | None]] = [("sqlite", None)]
    if server:
        kinds.append(("postgresql", server[1]))
    try:
        print("time from SIGKILL inside a step to its next attempt in a restarted process (s)")
        print("| store | seawall (lease 1 s) | DBOS |")
        print("|---|---|---|")
        for kind, base in kinds:
            s = [crash("seawall", kind, base) for _ in range(args.rounds)]
            d = [crash("dbos", kind, base) for _ in range(args.rounds)]
            print(
                f"| {kind} | {statistics.median(s):.2f} | {statistics.median(d):.2f} |", flush=True
            )
    finally:
        if server:
            server[0].stop()


def profile(args: argparse.Namespace) -> None:
    server = None if args.profile == "sqlite" else start_postgres()
    base = server[1] if server else None
    out = pathlib.Path(tempfile.mkdtemp(prefix="saga-bench-")) / "worker.prof"
    env = os.environ.copy()
    env["SAGA_BENCH_PROFILE"] = str(out)
    try:
        r = measure("seawall-1w", args.profile, base, args.runs, args.failures, env=env)
        print(f"seawall-1w on {args.profile}: {r['runs_per_s']:.0f} runs/s (under the profiler)")
        stats = pstats.Stats(str(out))
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(20)
    finally:
        if server:
            server[0].stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--failures", type=float, default=0.0, help="share of attempts that fail")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", help="write every round's figures to this file")
    parser.add_argument(
        "--recovery", action="store_true", help="measure the recovery time after a SIGKILL instead"
    )
    parser.add_argument("--profile", choices=("sqlite", "postgresql"))
    parser.add_argument("--summarise", metavar="JSON", help="print the tables of a saved run")
    args = parser.parse_args()
    if args.summarise:
        summarise(json.loads(pathlib.Path(args.summarise).read_text()))
        return
    print(f"machine: {machine()}, load {load()}")
    if args.recovery:
        crashes(args)
    elif args.profile:
        profile(args)
    else:
        throughput(args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--app":
        contender, url, total, rate, work = sys.argv[2:]
        if contender.startswith("seawall"):
            seawall_app(url, int(total), float(rate), pathlib.Path(work), WORKERS[contender][0])
        else:
            dbos_app(url, int(total), float(rate), pathlib.Path(work), contender == "dbos-queue")
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, rate, conc, work, k = sys.argv[2:]
        seawall_worker(url, float(rate), int(conc), pathlib.Path(work), int(k))
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
