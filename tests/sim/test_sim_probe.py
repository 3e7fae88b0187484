"""`seawall probe`: a scenario file's load against real HTTP servers on 127.0.0.1 started here
(tests/sim/metastable_server.py, a deliberately metastable one, and the same one behind
seawall's load shedder); and its bounds."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from seawall.cli import main
from seawall.sim._probe import check_target, probe

# 2 slots of 100 ms: 20 requests/s at most. 10/s, then 40/s for 2 s: a backlog of about 2 s
# builds, longer than the clients' 1 s timeout. The scale suits a machine at load 10 on two
# cores: a few dozen requests a second (the probe's clients and the server are not short of
# CPU), and a timeout far above a loaded machine's usual delays.
SCENARIO: dict[str, Any] = {
    "run": {"duration": 10.0, "bin_width": 0.5},
    "arrivals": {"shape": "step", "rate": 10.0, "steps": [[3.0, 40.0], [5.0, 10.0]]},
    "clients": {"strategies": ["naive"], "timeout": 1.0, "attempts": 3},
}
RATE = 10.0
CAPACITY = 20.0


@contextlib.contextmanager
def server(*flags: str) -> Iterator[str]:
    """tests/sim/metastable_server.py in a process of its own; yields its URL."""
    script = Path(__file__).with_name("metastable_server.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), *flags], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}/"
        # Until it has answered ten requests: started, and warmed up (its first answers cost
        # it imports, which on a loaded machine would eat into the probe's healthy baseline).
        limit = time.monotonic() + 60
        answered = 0
        while answered < 10:
            assert time.monotonic() < limit, "the server did not start"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()
                answered += 1
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck shutdown
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.slow  # 10 s of real load per run
def test_the_metastable_server_stays_down_and_the_shedder_saves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The stuck server through the command: its verdict, its exit status 3, and its figures.
    scenario = tmp_path / "spike.json"
    scenario.write_text(json.dumps(SCENARIO))
    with server() as url:
        code = main(["probe", url, "--scenario", str(scenario), "--json"])
    (stuck,) = json.loads(capsys.readouterr().out)["series"]
    said = {k: stuck[k] for k in ("baseline", "goodput", "offered", "verdict", "recovered_at")}
    assert code == 3, said
    assert stuck["baseline"] >= 0.6 * RATE, said  # healthy before the trigger
    assert stuck["verdict"] == "metastable" and stuck["recovered_at"] is None, said
    assert max(stuck["goodput"][-6:]) < RATE / 2, said  # still down at the end, 5 s after
    assert sum(stuck["offered"][-6:]) / 6 > CAPACITY, said  # retries keep the load above it
    with server("--shed") as url:  # the same server behind LoadShedder
        saved = probe(url, SCENARIO).get("naive")
    said = {"stuck": said, "saved": (saved.baseline, saved.goodput, saved.recovered_at)}
    assert saved.verdict == "recovered" and saved.recovered_at is not None, said
    assert saved.recovered_at - 5.0 <= 2.0, said  # back within 2 s of the trigger's end


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8000/", True),
        ("http://[::1]:8000/", True),
        ("http://localhost/", True),
        ("http://example.com/", False),
        ("http://10.0.0.1/", False),
        ("ftp://127.0.0.1/", False),
    ],
)
def test_only_loopback_or_named_hosts(url: str, allowed: bool) -> None:
    if allowed:
        assert check_target(url) == url
    else:
        with pytest.raises(ValueError):
            check_target(url)
    assert check_target("http://example.com/", ["example.com"]) == "http://example.com/"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_duration": 5.0}, "real time"),
        ({"max_requests": 100}, "max_requests"),
        ({"max_duration": 1e9}, "max_duration must be <="),
    ],
)
def test_probe_refuses_runs_beyond_its_bounds(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        probe("http://127.0.0.1:9/", SCENARIO, **kwargs)


def test_probe_command_refuses_a_foreign_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(SCENARIO))
    with pytest.raises(SystemExit) as exc:
        main(["probe", "http://example.com/", "--scenario", str(scenario)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--allow-host" in err and "Traceback" not in err
