"""The scenarios reproduce the field's qualitative results on small, fast runs."""

from __future__ import annotations

import math

import pytest

import seawall
from seawall.lowlevel import RetryState
from seawall.sim import amplify, metastable, occ, storm, sweep
from seawall.sim._report import histogram_lines, jsonable, occ_markdown

# -- storm -----------------------------------------------------------------------------------


def test_storm_trace_retries_until_the_dependency_is_back() -> None:
    r = storm(clients=10, outage=0.5, max_attempts=10, base=0.1, cap=1.0)
    assert r.succeeded and r.reason is None
    *failures, last = r.trace
    assert last.error is None and last.wait is None
    assert last.started >= 0.5  # it succeeded only once the outage was over
    assert all(s.error is not None and s.wait is not None for s in failures)
    for before, after in zip(r.trace, r.trace[1:], strict=False):
        assert before.wait is not None
        # The next attempt starts after the attempt's own time plus the policy's wait.
        assert after.started == pytest.approx(before.started + 0.05 + before.wait)


def test_storm_trace_gives_up_when_attempts_run_out() -> None:
    r = storm(clients=5, outage=100.0, max_attempts=4)
    assert not r.succeeded
    assert r.reason == "attempts_exhausted"
    assert len(r.trace) == 4
    assert r.trace[-1].wait is None


def test_storm_without_jitter_every_client_retries_at_the_same_instants() -> None:
    r = storm(clients=100, max_attempts=5, base=0.1, cap=2.0)
    none = r.retry_times["none"]
    assert len(none) == 400  # 4 retries per client
    assert sorted(set(none)) == pytest.approx([0.1, 0.3, 0.7, 1.5])
    assert r.peaks["none"] == 100
    # Full jitter spreads the same retries out: a far smaller spike.
    assert len(r.retry_times["full"]) == 400
    assert r.peaks["full"] < 30
    assert r.peaks["decorrelated"] < 30


def test_storm_histogram_text_shows_the_lockstep() -> None:
    r = storm(clients=20)
    lines = histogram_lines({k: r.retry_times[k] for k in ("none", "full")}, width=0.1)
    assert lines[0].split() == ["time", "(s)", "none", "full"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    # Without jitter all 20 clients land in the same bin for each of their four retries.
    lockstep = {span for span, cells in rows.items() if cells[0].startswith("#")}
    assert lockstep == {"0.1-0.2", "0.3-0.4", "0.7-0.8", "1.5-1.6"}
    assert all(rows[span][1] == "20" for span in lockstep)
    # With full jitter the first retries spread over [0, 0.1) and later ones wider still.
    assert rows["0.0-0.1"][0] == "."


# -- occ ---------------------------------------------------------------------------------------


@pytest.mark.volume
def test_occ_no_jitter_costs_more_than_full_jitter() -> None:
    r = occ((20, 40), trials=8, seed=1)
    for n in (20, 40):
        full = r.row("full", n)
        assert r.row("exponential", n).calls > 1.2 * full.calls
        assert r.row("no_backoff", n).calls > 1.2 * full.calls
        # Without jitter the clients stay in lockstep and climb to long waits.
        assert r.row("exponential", n).completion > 2 * full.completion
        assert full.calls >= n  # every client writes at least once
    assert r.row("full", 40).calls > r.row("full", 20).calls


def test_occ_one_client_writes_once() -> None:
    r = occ((1,), algorithms=("full",), trials=3)
    row = r.row("full", 1)
    assert row.calls == 1
    # One read, its answer, the write and its answer: four hops of about 10 ms.
    assert 0.03 < row.completion < 0.05


def test_occ_is_driven_by_the_real_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every conflict goes through the real RetryState.on_error: a spy on it sees each retry.
    errors: list[BaseException] = []
    real = RetryState.on_error

    def spy(self: RetryState, error: BaseException, now: float) -> float | None:
        errors.append(error)
        return real(self, error, now)

    monkeypatch.setattr(RetryState, "on_error", spy)
    r = occ((10,), algorithms=("full",), trials=1)
    assert len(errors) == round(r.row("full", 10).calls) - 10  # one write succeeds per client
    assert {type(e).__name__ for e in errors} == {"WriteConflict"}


def test_occ_same_seed_same_result_whatever_the_workers() -> None:
    a = occ((10, 30), algorithms=("full", "exponential"), trials=3, seed=7)
    b = occ((10, 30), algorithms=("full", "exponential"), trials=3, seed=7, workers=2)
    c = occ((10, 30), algorithms=("full", "exponential"), trials=3, seed=8)
    assert a == b
    assert a != c


def test_occ_markdown_table() -> None:
    r = occ((5, 10), algorithms=("full",), trials=2)
    lines = occ_markdown(r).splitlines()
    assert lines[0] == "| N | full calls / time |"
    assert lines[2].startswith("| 5 | ") and lines[3].startswith("| 10 | ")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"clients": (0,)}, "clients"),
        ({"trials": 0}, "trials"),
        ({"algorithms": ("fast",)}, "algorithms"),
        ({"base": 1.0, "cap": 0.5}, "cap"),
        ({"hop_mean": -1.0}, "hop_mean"),
    ],
)
def test_occ_rejects_bad_parameters(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        occ(**kwargs)  # type: ignore[arg-type]


# -- amplify -----------------------------------------------------------------------------------


def test_amplify_27_vs_3_vs_about_1_1() -> None:
    r = amplify(layers=3, attempts=3, requests=500)
    assert r.row("naive").per_request == 27.0
    assert r.row("one_layer").per_request == 3.0
    assert 1.05 <= r.row("budget").per_request <= 1.15
    assert r.row("budget").per_request <= r.row("budget_every_layer").per_request <= 1.34
    assert amplify(layers=2, attempts=4, requests=50).row("naive").per_request == 16.0


def test_amplify_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="layers"):
        amplify(layers=0)
    with pytest.raises(ValueError, match="ratio"):
        amplify(ratio=1.5)


# -- sweep -------------------------------------------------------------------------------------


def test_sweep_retries_buy_success_with_load_and_budgets_cap_the_load() -> None:
    r = sweep(clients=10, rate=20.0, duration=5.0, failure_rates=(0.0, 0.5), splits=(2, 50), seed=3)
    for s in ("no_retries", "retries_3", "retry_budget", "token_bucket"):
        healthy = r.row(s, 0.0)
        assert healthy.success == 1.0 and healthy.load == 1.0
    none, three = r.row("no_retries", 0.5), r.row("retries_3", 0.5)
    assert abs(none.success - 0.5) < 0.05 and none.load == 1.0
    assert three.success > 0.9 and three.load > 1.8  # 1 + 0.5 + 0.25 + 0.125
    # The gRPC token bucket stops retrying once half the attempts fail.
    assert r.row("token_bucket", 0.5).load < 1.3
    # A breaker in front does nothing while healthy, and opens (refusing attempts) at p = 50%.
    assert r.row("breaker", 0.0).load == 1.0 and r.row("breaker", 0.0).throttled == 0
    assert r.row("breaker", 0.5).throttled > 0
    assert r.row("breaker", 0.5).load < three.load
    # Per-client budgets: spread thin (50 clients at 4 req/s, 20 requests each), the
    # RetryBudget's floor (1 retry/s, 10 per window) is most of each budget: at most
    # (20 + 2 + 10) / 20 = 1.6 attempts a request; concentrated (2 clients at 100 req/s), the
    # ratio binds.
    thin = {x.strategy: x for x in r.splits if x.clients == 50}
    dense = {x.strategy: x for x in r.splits if x.clients == 2}
    assert dense["retry_budget"].load < thin["retry_budget"].load <= 1.6 + 1e-9
    assert thin["retry_budget"].load < thin["retries_3"].load
    assert dense["retry_budget"].load < 0.8 * dense["retries_3"].load


def test_sweep_rejects_a_probability_outside_0_1() -> None:
    with pytest.raises(ValueError, match="failure_rates"):
        sweep(failure_rates=(1.5,))
    with pytest.raises(ValueError, match="clients"):
        sweep(clients=0)


# -- metastable --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def meta() -> seawall.sim.MetastableResult:
    return metastable(duration=60.0, seed=0)


def test_metastable_naive_stays_collapsed_while_the_budget_recovers(
    meta: seawall.sim.MetastableResult,
) -> None:
    late = range(45, 60)  # 20 s after the spike ended
    before = range(5, 20)
    for s in meta.series:
        # Before the trigger every strategy serves the offered 40/s.
        assert sum(s.goodput[k] for k in before) / len(before) > 30
    for name in ("naive", "backoff"):
        s = meta.get(name)
        assert not s.recovered
        assert sum(s.goodput[k] for k in late) / len(late) < 5  # collapsed
        assert s.in_flight[-1] > 1000  # the server drowns in work nobody waits for
    for name in ("budget", "budget_shedding"):
        s = meta.get(name)
        assert s.recovered
        assert sum(s.goodput[k] for k in late) / len(late) > 35
        assert s.recovered_at[0] is not None and 25.0 <= s.recovered_at[0] < 45.0
    assert meta.get("budget").load < 1.2 < meta.get("naive").load


def test_metastable_shedding_keeps_the_server_bounded(meta: seawall.sim.MetastableResult) -> None:
    assert max(meta.get("budget_shedding").in_flight) <= 100


def test_metastable_without_a_spike_nothing_collapses() -> None:
    r = metastable(strategies=("naive",), duration=40.0, spike_rate=40.0)
    assert r.get("naive").recovered
    assert r.get("naive").success > 0.99


@pytest.mark.volume
def test_metastable_same_seed_same_result() -> None:
    a = metastable(strategies=("naive", "budget"), duration=30.0, seed=5)
    b = metastable(strategies=("naive", "budget"), duration=30.0, seed=5)
    c = metastable(strategies=("naive", "budget"), duration=30.0, seed=6)
    assert a == b
    assert a != c


def test_metastable_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="spike_end"):
        metastable(spike_start=30.0, spike_end=20.0)
    with pytest.raises(ValueError, match="strategies"):
        metastable(strategies=("magic",))


# -- determinism and JSON ----------------------------------------------------------------------


@pytest.mark.volume
def test_every_scenario_is_deterministic_by_seed() -> None:
    assert storm(clients=10, seed=4) == storm(clients=10, seed=4)
    assert storm(clients=10, seed=4) != storm(clients=10, seed=5)
    assert amplify(requests=50, seed=1) == amplify(requests=50, seed=1)
    kw = {"clients": 5, "duration": 2.0, "failure_rates": (0.3,), "splits": ()}
    assert sweep(**kw, seed=2) == sweep(**kw, seed=2)  # type: ignore[arg-type]
    assert sweep(**kw, seed=2) != sweep(**kw, seed=3)  # type: ignore[arg-type]


def test_results_convert_to_json_data() -> None:
    data = jsonable(sweep(clients=2, duration=1.0, failure_rates=(0.1,), splits=()))
    assert data["rows"][0]["strategy"] == "no_retries"
    assert isinstance(data["rows"][0]["success"], float)
    assert jsonable({"x": math.nan, "y": (1, math.inf)}) == {"x": None, "y": [1, None]}
