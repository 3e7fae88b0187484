"""Server models, the overload experiments (metastable, ramp, Bronson et al.) and Brooker's 2022
retry limiters."""

from __future__ import annotations

import math

import pytest

from seawall.sim import metastable, sweep
from seawall.sim._brooker import RetryBreaker, RetryTokenBucket
from seawall.sim._engine import Engine
from seawall.sim._metastable_model import _peak_rate, _recovery
from seawall.sim._scenarios import OVERLOAD_DEFAULTS
from seawall.sim._servers import make_server


def _finishes(model: str, arrivals: int, **kw: float) -> list[tuple[float, int]]:
    engine = Engine()
    done: list[tuple[float, int]] = []
    server = make_server(
        model,
        engine,
        lambda token: done.append((round(engine.now, 6), token)),
        base=float(kw.get("base", 1.0)),
        per_request=float(kw.get("per", 0.1)),
        concurrency=int(kw.get("concurrency", 2)),
        queue_limit=kw.get("queue_limit", math.inf),
    )
    accepted = [server.submit(i) for i in range(arrivals)]
    assert len(server) == sum(accepted)
    engine.run()
    assert len(server) == 0
    return done


def test_fixed_latency_is_set_by_the_load_at_arrival() -> None:
    # base + per_request x the requests in the server, the arriving one included.
    assert _finishes("fixed", 3) == [(1.1, 0), (1.2, 1), (1.3, 2)]


def test_processor_sharing_serves_everyone_at_the_shared_rate() -> None:
    # Three in: each progresses at 1/(1 + 0.3); the first finishes at 1.3, all three at once.
    assert _finishes("processor_sharing", 3) == [(1.3, 0), (1.3, 1), (1.3, 2)]


def test_a_concurrency_limit_queues_then_refuses() -> None:
    assert _finishes("limit", 3) == [(1.0, 0), (1.0, 1), (2.0, 2)]
    assert _finishes("limit", 4, queue_limit=1) == [(1.0, 0), (1.0, 1), (2.0, 2)]


def test_unknown_server_model_is_refused() -> None:
    with pytest.raises(ValueError, match="server must be one of"):
        metastable(server="quantum")


def _late(series: tuple[float, ...], start: int) -> float:
    tail = series[start:]
    return sum(tail) / len(tail)


def test_metastable_published_backoff_recovers_where_naive_collapses() -> None:
    r = metastable(strategies=("naive", "published_backoff"), duration=60.0)
    assert r.server == "fixed"
    assert not r.get("naive").recovered
    assert _late(r.get("naive").goodput, 45) < 5.0
    (at,) = r.get("published_backoff").recovered_at
    assert at is not None and at <= 30.0


def test_metastable_naive_runs_either_recover_or_collapse() -> None:
    # The spike model is bistable: each run ends either back at the offered 40/s or at zero
    # goodput, nothing in between; the mean of many runs (what the published curve shows) is
    # the share that recovers times 40/s. 40 runs of 80 s.
    r = metastable(strategies=("naive",), duration=80.0, runs=40, seed=1, workers=2)
    late = r.get("naive").goodput
    recovered = [t for t in r.get("naive").recovered_at if t is not None]
    share = len(recovered) / 40
    assert 0.05 <= share <= 0.6
    assert _late(late, 55) == pytest.approx(40.0 * share, abs=4.0)


def test_ramp_trigger_collapses_naive_retries() -> None:
    kw = dict(OVERLOAD_DEFAULTS["ramp"], strategies=("naive", "budget_shedding"))
    r = metastable(**kw)
    assert r.trigger == "peak"
    assert not r.get("naive").recovered
    assert r.get("budget_shedding").recovered


def test_the_ramp_is_the_published_one() -> None:
    # Brooker's simulator (simple_collapse_sim/sim.py): 80 - 1.6 * |t - 25| arrivals a second.
    kw = OVERLOAD_DEFAULTS["ramp"]
    for t in (0.0, 10.0, 24.9, 25.0, 40.0, 74.0, 75.0, 79.0):
        assert _peak_rate(
            kw["rate"], kw["spike_rate"], kw["spike_start"], kw["spike_end"], t
        ) == pytest.approx(max(0.0, 80 - 1.6 * abs(t - 25)))
    r = metastable(**dict(kw, strategies=("no_retries",), runs=3))
    offered = r.get("no_retries").offered  # one attempt per request: the arrivals
    assert sum(offered[:10]) / 10 == pytest.approx(48.0, rel=0.15)  # 40/s rising by 1.6/s
    assert sum(offered[20:30]) / 10 == pytest.approx(76.8, rel=0.15)  # about the peak
    assert sum(offered[76:]) == 0.0  # none after 75 s


def test_recovery_against_a_demand_that_falls() -> None:
    # Judged against the demand of each window, and not at all where it is under a tenth of
    # the highest: a goodput that follows a falling load has recovered.
    demand = [40.0] * 10 + [float(40 - 4 * k) for k in range(10)] + [0.0] * 10
    assert _recovery(demand, 1.0, 5.0, demand) == 5.0
    assert _recovery([0.0] * 30, 1.0, 5.0, demand) is None
    half = [x / 2 for x in demand]
    assert _recovery(half, 1.0, 5.0, demand) is None


def test_bronson_retry_after_timeout_is_stuck_at_twice_the_load() -> None:
    kw = dict(OVERLOAD_DEFAULTS["bronson"], duration=100.0)
    r = metastable(**kw)
    assert r.latency_step == (10.0, 20.0, 1.0) and r.trigger_end == 20.0
    stuck = r.get("retry_once")
    assert not stuck.recovered
    assert _late(stuck.goodput, 40) == 0.0
    assert 530 <= _late(stuck.offered, 40) <= 590  # 280 first tries + 280 retries
    # Without the retry the requests piled up at the step's end drain, and it recovers.
    assert r.get("no_retries").recovered
    assert 250 <= _late(r.get("no_retries").goodput, 60) <= 310


def test_bronson_below_half_the_capacity_the_same_step_does_not_stick() -> None:
    # The paper's stable region: retries double 140/s to 280/s, which a server of 300/s still
    # serves, so goodput is back as soon as the latency step ends.
    kw = dict(OVERLOAD_DEFAULTS["bronson"], rate=140.0, spike_rate=140.0, duration=60.0)
    (at,) = metastable(**kw).get("retry_once").recovered_at
    assert at is not None and at <= 21.0
    # The latency step is a trigger, not a loss of capacity: a stall of the same 10 s leaves
    # a backlog that keeps even this load stuck past its timeout for a long while.
    stalled = dict(kw, latency_step=None, outage=(10.0, 20.0))
    (late,) = metastable(**stalled).get("retry_once").recovered_at
    assert late is None or late > 40.0


def test_latency_step_is_validated() -> None:
    with pytest.raises(ValueError, match="latency_step"):
        metastable(latency_step=(20.0, 10.0, 1.0))
    with pytest.raises(ValueError, match="latency_step"):
        metastable(latency_step=(1.0, 2.0))  # type: ignore[arg-type]


def test_an_answer_after_the_timeout_is_not_a_success_during_the_backoff() -> None:
    # Every attempt takes 5 s at the server against a 1 s timeout: nothing can succeed. With
    # waits of U(0, 20 s) between attempts, the late answers land in the waits; a client that
    # timed out has dropped the call, so they are not successes (they were, before).
    r = metastable(
        strategies=("published_backoff", "backoff"),
        duration=40.0,
        rate=5.0,
        spike_rate=5.0,
        base_latency=5.0,
        per_request=0.0,
        timeout=1.0,
    )
    for s in r.series:
        assert sum(s.goodput) == 0.0 and s.success == 0.0


def test_ramp_with_long_backoff_collapses_as_in_the_source() -> None:
    # In the source's simulator (simple_collapse_sim, run_sim_ramp with its backoff client) the
    # ramp collapses for good with backoff too: backoff spreads the retries of the way up, it
    # does not remove them, and 3 attempts per request at 40/s and more exceed 100/s.
    kw = dict(OVERLOAD_DEFAULTS["ramp"], strategies=("published_backoff",), runs=3)
    s = metastable(**kw).get("published_backoff")
    assert s.recovered_at == (None, None, None)
    assert max(s.goodput[45:70]) < 2.0  # the mean of 3 runs: none serves anything


def test_brooker_token_bucket_fills_per_call_and_spends_a_token_per_retry() -> None:
    # The source's AdaptiveRetryStrategy: 5 tokens, full at first; 0.1 at each call's start;
    # a retry only while more than one token is left.
    bucket = RetryTokenBucket()
    error = ConnectionError()
    assert bucket.tokens == 5.0
    for _ in range(4):
        assert bucket.allow_retry(error)
    assert bucket.tokens == 1.0
    assert not bucket.allow_retry(error)  # one token left is not "more than one"
    bucket.on_success()
    bucket.on_failure(error)
    assert bucket.tokens == 1.0  # outcomes neither fill nor drain it
    bucket.on_request()
    assert bucket.allow_retry(error)  # 1.1 tokens
    for _ in range(100):
        bucket.on_request()
    assert bucket.tokens == 5.0  # capped


def test_brooker_bucket_in_the_sweep_matches_the_source_simulator() -> None:
    # The source's simulator (retry_sim.py, run_sims: 100 clients at 10/s for 10 s), at a 20%
    # failure rate: 90.7% success for a load of 1.135 (mean of its runs, seeds 0-9). The same
    # cell here, one seed; the old bucket (10 tokens, filled per success) gave 94.2% / 1.178.
    r = sweep(failure_rates=(0.2,), strategies=("brooker_bucket",), splits=(), seed=0)
    row = r.row("brooker_bucket", 0.2)
    assert row.success == pytest.approx(0.907, abs=0.012)
    assert row.load == pytest.approx(1.135, abs=0.01)


def test_brooker_breaker_stops_retries_above_the_threshold() -> None:
    breaker = RetryBreaker(threshold=0.1, window=10)
    error = ConnectionError()
    for _ in range(9):
        breaker.on_success()
    assert breaker.allow_retry(error)
    breaker.on_failure(error)  # 1 in 10
    assert not breaker.allow_retry(error)
    breaker.on_success()  # the failure is still among the last 10 outcomes
    assert not breaker.allow_retry(error)
    for _ in range(9):  # now it has slid out of the window
        breaker.on_success()
    assert breaker.allow_retry(error)


def test_brooker_strategies_in_the_sweep() -> None:
    names = ("retries_3", "brooker_bucket", "brooker_breaker")
    r = sweep(20, rate=10.0, duration=10.0, failure_rates=(0.01, 0.5), strategies=names, splits=())
    for name in names[1:]:
        # Like N retries when failures are rare...
        assert r.row(name, 0.01).success == pytest.approx(
            r.row("retries_3", 0.01).success, abs=0.01
        )
        # ...and close to no retries once they are common.
        assert r.row(name, 0.5).load < 1.25 < r.row("retries_3", 0.5).load


def test_adaptive_throttle_holds_the_server_to_about_k_requests_per_success() -> None:
    # Google SRE book, ch. 21: with client-side throttling the server receives about K (2)
    # requests for each it accepts; without, all of the demand (here 4 times its capacity).
    from seawall.sim._scenarios import overload_metrics

    kw = dict(OVERLOAD_DEFAULTS["throttle"], duration=60.0)
    r = metastable(**kw)
    m = overload_metrics(r)
    assert m["adaptive_throttle.late_per_success"] == pytest.approx(2.0, rel=0.08)
    assert m["no_retries.late_per_success"] == pytest.approx(4.0, rel=0.08)
    assert m["adaptive_throttle.late_goodput"] == pytest.approx(100.0, rel=0.05)  # full use
    # Requests rejected in the client are failed requests, not unsettled ones.
    assert r.get("adaptive_throttle").success == pytest.approx(0.25, abs=0.03)
    assert "adaptive_throttle.recovered" not in m  # no trigger, no recovery to judge
