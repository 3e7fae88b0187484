"""The simulator's bugs that were: arrivals past the run, unbounded runs, unwritable paths, error
reporting, isolation from the process's real state, and workers that outlived the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import seawall
from seawall.cli import main
from seawall.sim import _sweep as sweep_module
from seawall.sim import metastable, sweep


def test_sweep_first_arrivals_fall_inside_the_duration() -> None:
    # 1000 clients at 0.01/s for 10 s: about 100 requests (Poisson), not one per client.
    r = sweep(
        1000,
        rate=0.01,
        duration=10.0,
        failure_rates=(0.0,),
        strategies=("no_retries",),
        splits=(),
    )
    assert 60 <= r.rows[0].requests <= 140


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "sweep", "--duration", "1e308"], "duration must be <="),
        (["sim", "sweep", "--duration", "1e8"], "duration must be <= 1e+06"),
        (["sim", "metastable", "--duration", "1e308"], "duration must be <="),
        (["sim", "metastable", "--duration", "1e8"], "duration must be <= 1e+06"),
        (["sim", "sweep", "--duration", "100000", "--rate", "1000"], "limit is 5e+07"),
        (["sim", "amplify", "--layers", "6", "--attempts", "10"], "attempts**layers"),
    ],
)
def test_runs_too_large_are_refused_at_once(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert time.monotonic() - started < 5.0  # refused, not run


def test_plot_into_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[object] = []
    real = sweep_module._run
    monkeypatch.setattr(sweep_module, "_run", lambda job: ran.append(job) or real(job))
    target = tmp_path / "missing" / "sweep.png"
    with pytest.raises(SystemExit) as exc:
        main(["sim", "sweep", "--duration", "1", "--splits", "--plot", str(target)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "does not exist" in err and "Traceback" not in err
    assert ran == []
    with pytest.raises(SystemExit) as exc:
        main(["sim", "sweep", "--duration", "1", "--splits", "--plot", str(tmp_path)])
    assert exc.value.code == 2
    assert "is a directory" in capsys.readouterr().err


def test_demo_out_that_cannot_be_created_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--out", str(blocker / "report")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot create" in err and "Traceback" not in err


def test_an_error_inside_the_simulation_is_an_internal_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(job: object) -> object:
        raise ValueError("a bug in a model")

    monkeypatch.setattr(sweep_module, "_run", broken)
    code = main(["sim", "sweep", "--duration", "1", "--splits", "--workers", "1"])
    assert code == 1
    err = capsys.readouterr().err
    assert "internal error" in err and "a bug in a model" in err and "Traceback" not in err
    assert "test_sim_robustness.py" in err  # where it failed


def _small_sweep() -> object:
    return sweep(
        20,
        rate=5.0,
        duration=2.0,
        failure_rates=(0.5,),
        strategies=("retries_3", "retry_budget"),
        splits=(),
    )


def test_simulated_runs_ignore_the_callers_real_deadline_and_kill_switch() -> None:
    expected = _small_sweep()
    meta = metastable(strategies=("naive",), duration=30.0, spike_start=10.0, spike_end=12.0)
    with seawall.deadline(0.000001):
        assert _small_sweep() == expected
    seawall.set_enabled(False)
    assert _small_sweep() == expected
    seawall.set_enabled(True)
    seawall.set_enabled(False, name="sweep-retries_3")
    seawall.set_enabled(False, name="metastable-naive")
    assert _small_sweep() == expected
    assert (
        metastable(strategies=("naive",), duration=30.0, spike_start=10.0, spike_end=12.0) == meta
    )
    # The switch still governs this process's real calls.
    assert not seawall.is_enabled("sweep-retries_3")


def test_worker_processes_ignore_seawall_retries_off(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _small_sweep()
    monkeypatch.setenv("SEAWALL_RETRIES", "off")  # read by the spawned workers at import
    got = sweep(
        20,
        rate=5.0,
        duration=2.0,
        failure_rates=(0.5,),
        strategies=("retries_3", "retry_budget"),
        splits=(),
        workers=2,
    )
    assert got == expected


def _workers_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(status.split("PPid:")[1].split()[0])
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has stopped running; only its exit status is left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_command_stops_its_worker_processes(sig: int) -> None:
    # A long occ run on two workers (two cells), killed once both workers are busy.
    argv = [sys.executable, "-m", "seawall.cli", "sim", "occ", "--clients", "150", "160"]
    argv += ["--algorithms", "no_backoff", "--trials", "50000", "--workers", "2", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            workers = _workers_of(proc.pid)
        assert len(workers) == 2, "the workers never started"
        time.sleep(0.5)  # let them take their cells
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers)
        if sig == signal.SIGTERM:
            assert proc.returncode == 143
            assert proc.stderr is not None
            err = proc.stderr.read().decode()
            assert "terminated" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
