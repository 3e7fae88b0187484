"""--seeds N: per-trial data, means with 95% CIs, a self-describing JSON, --from re-runs it,
the same results on any number of processes or on Dask; --list and installed scenarios."""

from __future__ import annotations

import json
import math
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import seawall
from seawall.cli import main
from seawall.sim import SCENARIOS
from seawall.sim import _registry as registry
from seawall.sim._metastable import MetastableResult, MetastableSeries
from seawall.sim._scenarios import overload_metrics
from seawall.sim._trials import bootstrap_ci, mean_ci, run_trials, summarize, wilson

SWEEP = ["sim", "sweep", "--clients", "10", "--duration", "2", "--p", "0.3", "--splits"]
SWEEP += ["--strategies", "retries_3", "retry_budget"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_mean_and_95_percent_interval() -> None:
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0])
    half = 4.303 / math.sqrt(3)  # t(0.975, 2 dof) * s / sqrt(n), s = 1
    assert (mean, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(x) for x in mean_ci([]))


def test_wilson_interval_of_a_proportion_stays_in_its_range() -> None:
    # Reference values of the Wilson score interval (z = 1.96).
    assert wilson(10, 30) == pytest.approx((0.1923, 0.5122), abs=5e-4)
    assert wilson(0, 30) == pytest.approx((0.0, 0.1135), abs=5e-4)
    assert wilson(30, 30) == pytest.approx((0.8865, 1.0), abs=5e-4)
    lo, hi = wilson(1, 2)
    assert 0.0 < lo < 0.5 < hi < 1.0
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_bootstrap_interval_of_goodput_never_goes_below_zero() -> None:
    # Three seeds collapsed (0/s), one recovered (40/s): Student's t puts the interval far
    # below zero; the bootstrap of the mean stays between the smallest and largest trial.
    values = [0.0, 0.0, 0.0, 40.0]
    assert mean_ci(values)[1] < -10.0
    lo, hi = bootstrap_ci(values)
    assert 0.0 <= lo <= 10.0 <= hi <= 40.0
    assert bootstrap_ci(values) == (lo, hi)  # deterministic
    assert bootstrap_ci([3.0]) == (3.0, 3.0) and bootstrap_ci([2.0, 2.0]) == (2.0, 2.0)
    ratios = [1.5, 30.0, 12.0, 8.0]  # a p99.9 cut, seed by seed
    lo, hi = bootstrap_ci(ratios)
    assert 1.5 <= lo < sum(ratios) / 4 < hi <= 30.0


def _series(recovered_at: tuple[float | None, ...]) -> MetastableSeries:
    return MetastableSeries(
        "naive", (40.0,) * 80, (40.0,) * 80, (0.0,) * 80, recovered_at, 0.5, 2.0, 0
    )


def test_share_of_runs_recovered_is_reported_with_its_interval() -> None:
    # 10 of 30 runs came back: the share is a third, not 0.0 ("not all of them").
    runs = (25.0,) * 10 + (None,) * 20
    result = MetastableResult((_series(runs),), 1.0, 80.0, 40.0, 80.0, 20.0, 25.0, 30, 0)
    m = overload_metrics(result)
    assert m["naive.recovered"] == pytest.approx(1 / 3) and m["naive.runs"] == 30.0
    assert m["naive.recovered_at"] is None  # not every run: no single time
    # Over seeds, the runs are pooled into one proportion with its Wilson interval.
    other = overload_metrics(
        MetastableResult((_series((None,) * 30),), 1.0, 80.0, 40.0, 80.0, 20.0, 25.0, 30, 1)
    )
    summary = summarize([{"metrics": m}, {"metrics": other}])["naive.recovered"]
    assert summary["method"] == "wilson"
    assert (summary["successes"], summary["trials"]) == (10, 60)
    assert summary["mean"] == pytest.approx(10 / 60)
    assert summary["ci95"] == pytest.approx(list(wilson(10, 60)))
    goodput = summarize([{"metrics": {"g": 0.0}}, {"metrics": {"g": 0.0}}, {"metrics": {"g": 9.0}}])
    assert goodput["g"]["method"] == "bootstrap" and goodput["g"]["ci95"][0] >= 0.0


def test_seeds_document_holds_parameters_seeds_version_and_every_trial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = _json([*SWEEP, "--seeds", "3", "--seed", "5", "--json", "--workers", "1"], capsys)
    run = doc["run"]
    assert run["scenario"] == "sweep" and run["seeds"] == [5, 6, 7]
    assert run["seawall_version"] == seawall.__version__
    assert run["parameters"]["clients"] == 10 and run["parameters"]["duration"] == 2.0
    assert run["parameters"]["strategies"] == ["retries_3", "retry_budget"]
    assert [t["seed"] for t in doc["trials"]] == [5, 6, 7]
    # Each trial is exactly the single run with that seed.
    single = _json([*SWEEP, "--seed", "6", "--json"], capsys)
    assert single["run"]["seeds"] == [6]
    del single["run"]
    assert doc["trials"][1]["result"] == single
    values = [t["metrics"]["retries_3.p0.3.load"] for t in doc["trials"]]
    summary = doc["summary"]["retries_3.p0.3.load"]
    assert summary["n"] == 3 and summary["mean"] == pytest.approx(sum(values) / 3)
    assert summary["ci95"][0] < summary["mean"] < summary["ci95"][1]


def test_from_reruns_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    many = _json([*SWEEP, "--seeds", "2", "--json", "--workers", "1"], capsys)
    path = tmp_path / "many.json"
    path.write_text(json.dumps(many))
    assert _json(["sim", "--from", str(path), "--workers", "1"], capsys) == many
    one = _json(
        ["sim", "metastable", "--duration", "30", "--strategies", "naive", "--json"], capsys
    )
    path.write_text(json.dumps(one))
    assert _json(["sim", "--from", str(path)], capsys) == one


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("not json", "not JSON"),
        ('{"rows": []}', "no 'run' record"),
        ('{"run": {"scenario": "nope", "parameters": {}, "seeds": [0]}}', "unknown scenario"),
        ('{"run": {"scenario": "sweep", "parameters": {"x": 1}, "seeds": [0]}}', "unknown param"),
        ('{"run": {"scenario": "sweep", "parameters": {}, "seeds": [-1]}}', "whole numbers"),
    ],
)
def test_from_refuses_a_bad_file(
    content: str | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--from", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_parameters_in_trials_are_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "metastable", "--spike-start", "30", "--spike-end", "10", "--seeds", "2"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--workers", "2"])
    assert exc.value.code == 2
    assert "spike_end" in capsys.readouterr().err


def _params() -> dict[str, object]:
    return {
        "clients": 10,
        "rate": 10.0,
        "duration": 2.0,
        "failure_rates": [0.3],
        "strategies": ["retries_3", "token_bucket"],
        "splits": [],
        "split_p": 0.5,
    }


def test_results_do_not_depend_on_the_processes() -> None:
    one = run_trials("sweep", _params(), [0, 1, 2], workers=1)
    two = run_trials("sweep", _params(), [0, 1, 2], workers=2)
    assert one == two


# The local cluster's scheduler hosts a dashboard on 8787, or on another port when something else
# holds it (another cluster on the machine, or another test worker's): a warning, not a failure.
@pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")
def test_a_dask_local_cluster_gives_the_same_results() -> None:
    pytest.importorskip("distributed")
    local = run_trials("sweep", _params(), [0, 1, 2], workers=1)
    dask = run_trials("sweep", _params(), [0, 1, 2], workers=2, engine="dask")
    assert dask == local


def test_dask_runs_items_in_chunks_with_the_same_results() -> None:
    pytest.importorskip("distributed")
    from seawall.sim._dask import chunk_size, dask_map
    from seawall.sim._trials import run_trial

    # A task per item while they are few; about 4 tasks per worker beyond.
    assert chunk_size(24, 2) == 1 and chunk_size(1000, 2) == 125 and chunk_size(1000, 8) == 32
    jobs = [
        ("amplify", {"layers": 2, "attempts": 3, "requests": 5, "ratio": 0.1}, s) for s in range(7)
    ]
    one_each = [run_trial(j) for j in jobs]
    # Chunks of 3 (7 items in 3 chunks, each taking every third item), back in order.
    assert dask_map(run_trial, jobs, workers=2, chunk=3) == one_each
    # Submitted costliest first (here the last seeds), and still back in order.
    assert dask_map(run_trial, jobs, workers=2, cost=lambda job: job[2]) == one_each
    with pytest.raises(ValueError, match="chunk"):
        dask_map(run_trial, jobs, chunk=0)


def test_the_costliest_items_come_first_ties_in_input_order() -> None:
    from seawall.sim._util import costliest_first

    assert costliest_first(["a", "b", "c"], None) == [0, 1, 2]
    assert costliest_first([3, 9, 1, 9, 0], float) == [1, 3, 0, 2, 4]
    assert costliest_first([], float) == []


def test_an_occ_grid_starts_its_largest_cells_first() -> None:
    from seawall.sim._trials import trial_cost

    params = {"trials": 100, "algorithms": ["no_backoff", "full"], "base": 0.005, "cap": 2.0}
    costs = [trial_cost(("occ", {**params, "clients": [n]}, 0)) for n in (10, 100, 190)]
    assert 0 < costs[0] < costs[1] < costs[2]
    assert trial_cost(("occ", {**params, "trials": 200, "clients": [10]}, 0)) == 2 * costs[0]
    # Unreadable parameters, or a scenario without an estimate: no cost (the run refuses them).
    assert trial_cost(("occ", {"clients": ["x"]}, 0)) == 0.0
    assert trial_cost(("sweep", _params(), 0)) == 0.0


def _started_at(item: float) -> int:
    import time

    started = time.monotonic_ns()
    time.sleep(0.3)
    return started


def test_processes_take_the_costliest_items_first() -> None:
    from seawall.sim._util import parallel_map

    # Six items, the costliest last in input order; two processes take them from one queue in
    # cost order, so the costliest starts among the first two, the cheapest among the last two
    # (each item sleeps 0.3 s: the other process cannot overtake by two items meanwhile).
    costs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    starts = parallel_map(_started_at, costs, workers=2, cost=lambda c: c)
    rank = sorted(range(6), key=lambda i: starts[i])
    assert rank.index(5) < 2, rank
    assert rank.index(0) >= 4, rank


class _StuckPool:
    """A pool whose terminate() never returns, as CPython's can (python/cpython#96995)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def terminate(self) -> None:
        self.released.wait()

    def join(self) -> None:
        """(Never reached.)"""


def test_a_pool_stuck_in_terminate_does_not_hold_the_error_back() -> None:
    import multiprocessing
    import time

    from seawall.sim._util import terminate

    stuck = _StuckPool()
    began = time.monotonic()
    assert terminate(stuck, wait=0.2) is False
    assert time.monotonic() - began < 5.0
    stuck.released.set()
    pool = multiprocessing.get_context("spawn").Pool(2)
    workers = list(pool._pool)
    assert terminate(pool) is True
    assert all(w.exitcode is not None for w in workers)


def test_list_shows_the_built_in_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("storm", "occ", "metastable", "ramp", "bronson", "hedge"):
        assert any(line.startswith(name + " ") for line in out.splitlines())


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on sys.path that declares two seawall.scenarios entry points."""
    (tmp_path / "my_scenarios.py").write_text(
        textwrap.dedent(
            """
            from seawall.sim import Scenario

            def _run(args, progress):
                return {"doubled": 2 * args.seed}

            PLUGIN = Scenario(
                name="doubler",
                summary="a scenario from an installed package",
                add_arguments=lambda parser: None,
                run=_run,
                demo=lambda seed, workers, progress: {"doubled": 2 * seed},
                render=lambda result, console: console.print(result),
            )
            """
        )
    )
    dist = tmp_path / "my_scenarios-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-scenarios\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[seawall.scenarios]\ndoubler = my_scenarios:PLUGIN\nbroken = my_scenarios:MISSING\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "BROKEN", [])
    yield
    sys.modules.pop("my_scenarios", None)


@pytest.mark.usefixtures("installed_plugin")
def test_an_installed_scenario_is_found_listed_and_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sim", "--list"]) == 0
    captured = capsys.readouterr()
    listed = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in captured.out.splitlines()}
    assert listed["doubler"] == "a scenario from an installed package"
    assert "'broken' failed to load" in captured.err
    assert "doubler" in SCENARIOS
    doc = _json(
        ["sim", "doubler", "--seeds", "2", "--seed", "4", "--json", "--workers", "1"], capsys
    )
    assert [t["result"]["doubled"] for t in doc["trials"]] == [8, 10]
    assert doc["summary"]["doubled"]["mean"] == 9.0
