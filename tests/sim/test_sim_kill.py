"""Crash tests: a `seawall sim` command killed in the middle of a many-seed run leaves no process
behind, on local worker processes and on a local Dask cluster.

Each test starts the real command in a session of its own, waits until its workers are busy
with trials, then sends it SIGTERM (a `kill`, a CI time-out), SIGINT to its whole process group
(Ctrl-C in a terminal) or SIGKILL (no chance to clean up), and checks that every process it
started is gone within a bounded time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc for the signal masks"
)

# Long enough that it is still running when it is killed (about a minute of trials on two
# workers), bounded all the same.
SWEEP = ["sim", "sweep", "--clients", "200", "--duration", "200", "--seeds", "40"]
SWEEP += ["--workers", "2", "--json"]
EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGKILL: -signal.SIGKILL}


def _ignores_sigint(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(status.split("SigIgn:")[1].split()[0], 16)
    return bool(mask & (1 << (signal.SIGINT - 1)))


def _busy_workers(parent: psutil.Process) -> list[psutil.Process]:
    """The parent's worker processes (spawned interpreters), once two have run trials."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workers = []
        try:
            for child in parent.children(recursive=True):
                if "spawn_main" in " ".join(child.cmdline()):
                    workers.append(child)
            if len(workers) >= 2 and all(w.cpu_times().user > 2.0 for w in workers):
                return workers
        except psutil.NoSuchProcess:
            pass
        if not parent.is_running():
            break
        time.sleep(0.2)
    raise AssertionError("the command's workers never got busy")


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_mid_run(engine: list[str], sig: signal.Signals, *, group: bool) -> None:
    argv = [sys.executable, "-m", "seawall.cli", *SWEEP, *engine]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    parent = psutil.Process(proc.pid)
    started: list[psutil.Process] = []
    try:
        workers = _busy_workers(parent)
        started = parent.children(recursive=True)  # the workers and their helpers
        if sig == signal.SIGINT:
            # The workers leave Ctrl-C to the command, which stops them in order (each sets
            # that up as it starts: on a loaded machine, a moment after it has begun to run).
            deadline = time.monotonic() + 30
            while not all(_ignores_sigint(w.pid) for w in workers):
                assert time.monotonic() < deadline, "the workers do not ignore Ctrl-C"
                time.sleep(0.2)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=180)  # a bound for a failure: at load 18, over 60 s
        assert proc.returncode == EXIT[sig]
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = [p.pid for p in started if _alive(p)]
        assert not survivors, f"still running after the command ended: {survivors}"
        if sig != signal.SIGKILL:
            text = err.decode()
            assert ("interrupted" if sig == signal.SIGINT else "terminated") in text
            assert "Traceback" not in text
    finally:
        for p in [parent, *started]:
            if _alive(p):
                p.kill()
        if proc.poll() is None:
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_ctrl_c_on_the_process_group_stops_the_local_workers() -> None:
    # SIGTERM and SIGKILL of the parent: test_sim_robustness.py.
    _kill_mid_run([], signal.SIGINT, group=True)


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGKILL, False)],
    ids=["sigterm", "ctrl-c-group", "sigkill"],
)
def test_killing_a_dask_sweep_leaves_no_worker_running(sig: signal.Signals, group: bool) -> None:
    pytest.importorskip("distributed")
    _kill_mid_run(["--engine", "dask"], sig, group=group)
