"""The published figures seawall reproduces: for each, its source and what the source reports,
the figure, the scenario run that reproduces it, and how close counts as agreeing."""

from __future__ import annotations

import dataclasses
import math

__all__ = ["COMPARISONS", "EXPERIMENTS", "Experiment"]

COMPARISONS = ("near", "at_most", "at_least")


@dataclasses.dataclass(frozen=True, slots=True)
class Experiment:
    """One published figure, the run that reproduces it, and how close counts as agreeing.

    Attributes:
        key: a stable identifier (``seawall sim verify --only KEY``).
        source: who published it, where.
        claim: what the source reports, in words.
        published: the published figure, as text.
        value: the published figure as a number, in the unit of *metric*.
        tolerance: how far seawall's mean may be from *value* and still agree.
        scenario: the seawall scenario that reproduces it.
        argv: its options (as on the command line); the rest are its defaults.
        metric: the metric compared (a key of the scenario's metrics), or ``"a/b"``: the ratio
            of two of them, trial by trial.
        unit: how to print the figures: ``"x"``, ``"/s"``, ``"s"``, ``"%"``, ``"share"`` or
            ``""``.
        compare: ``near`` (within *tolerance* of *value*), ``at_most`` (no more than *value*
            plus *tolerance*) or ``at_least``.
        relative: *tolerance* is a fraction of *value* rather than in the metric's unit.
        reference: where the figure is: the page, or the source's own simulator run here.
        comparable: ``False`` when seawall's scenario is not the source's system: the row
            shows the difference and *note* says why.
        note: what the row needs said (why it may differ, how it was measured).
    """

    key: str
    source: str
    claim: str
    published: str
    value: float
    tolerance: float
    scenario: str
    argv: tuple[str, ...]
    metric: str
    unit: str = ""
    compare: str = "near"
    relative: bool = False
    reference: str = ""
    comparable: bool = True
    note: str = ""

    def __post_init__(self) -> None:
        if self.compare not in COMPARISONS:
            raise ValueError(f"compare must be one of {', '.join(COMPARISONS)}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be a finite number >= 0, got {self.tolerance!r}")


_SRE = "Google SRE book (2016)"
_AMPLIFY = ("--layers", "3", "--requests", "200")
_BRONSON = "Bronson et al., Metastable Failures in Distributed Systems, HotOS'21"
_COLLAPSE = "Brooker, simulator_example/simple_collapse_sim (the metastable spike and ramp model)"
_RETRIES = "Brooker, Fixing retries with token buckets and circuit breakers (2022)"
_RETRY_SIM = (
    "the source's simulator (simulator_example/retry_sim/retry_sim.py, run_sims: 100 clients at "
    "10/s for 10 s), mean of 10 runs (seeds 0-9)"
)
_TEN_FOR_A_MINUTE = ("--clients", "10", "--duration", "60")
_SWEEP_SOURCE = ("--splits", "--clients", "100", "--rate", "10", "--duration", "10")
_TAIL = "Dean and Barroso, The Tail at Scale, CACM 2013"
_TAIL_NOTE = (
    "another system: the paper's figure is a BigTable benchmark (1,000 keys over 100 servers, "
    "hedged after 10 ms); seawall's is the hedge scenario's log-normal leaves with Pareto "
    "stalls, hedged at the live p95 under a 10% load bound"
)

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "sre-64x",
        f"{_SRE}, ch. 22 Addressing Cascading Failures",
        "retries at every layer multiply: 3 retries (4 attempts) at each of 3 layers send 64 "
        "attempts to the database for one request",
        "64x",
        64.0,
        0.0,
        "amplify",
        (*_AMPLIFY, "--attempts", "4"),
        "naive.per_request",
        "x",
        reference="the book's worked example (ch. 22, Retries)",
    ),
    Experiment(
        "sre-3x",
        f"{_SRE}, ch. 21 Handling Overload",
        "a per-request limit of 3 attempts lets the load on a failing backend grow 3x",
        "3x",
        3.0,
        0.0,
        "amplify",
        (*_AMPLIFY, "--attempts", "3"),
        "one_layer.per_request",
        "x",
        reference="ch. 21, Deciding to Retry",
        note="seawall's one-layer rule: only the layer next to the failing one retries",
    ),
    Experiment(
        "sre-1.1x",
        f"{_SRE}, ch. 21",
        "a per-client retry budget of 10% of requests limits the growth to 1.1x",
        "1.1x",
        1.1,
        0.01,
        "amplify",
        (*_AMPLIFY, "--attempts", "3"),
        "budget.per_request",
        "x",
        reference="ch. 21, Deciding to Retry",
        note="RetryBudget(ratio=0.1) without its per-second floor",
    ),
    Experiment(
        "sre-throttle-k",
        f"{_SRE}, ch. 21",
        "client-side adaptive throttling with K = 2 lets about K requests reach the backend for "
        "each it accepts",
        "2 per accept",
        2.0,
        0.1,
        "throttle",
        ("--duration", "120"),
        "adaptive_throttle.late_per_success",
        "",
        reference="ch. 21, Client-Side Throttling (the formula, K = 2)",
        note="400 requests/s against a server of 100/s; from 30 s on",
    ),
    Experiment(
        "aws-occ-jitter",
        "Brooker, Exponential Backoff And Jitter, AWS Architecture Blog (2015)",
        "with 100 contending clients, jitter cut the calls of capped exponential backoff by more "
        "than half",
        "less than half",
        0.5,
        0.0,
        "occ",
        ("--clients", "100", "--algorithms", "exponential", "full", "--trials", "100"),
        "full.N100.calls/exponential.N100.calls",
        "",
        compare="at_most",
        reference="the post's text (full jitter against no jitter)",
        note="calls with full jitter over calls without",
    ),
    Experiment(
        "bronson-load",
        _BRONSON,
        "280 QPS against a capacity of 300 QPS, a 1 s timeout and 1 retry: after a latency step "
        "past the timeout the load stays at twice the rate",
        "560 QPS",
        560.0,
        0.02,
        "bronson",
        ("--strategies", "retry_once", "--duration", "120"),
        "retry_once.late_offered",
        "/s",
        relative=True,
        reference="the paper's retry example",
    ),
    Experiment(
        "bronson-goodput",
        _BRONSON,
        "...and every request times out: zero goodput, for good",
        "0/s",
        0.0,
        0.5,
        "bronson",
        ("--strategies", "retry_once", "--duration", "120"),
        "retry_once.late_goodput",
        "/s",
        reference="the paper's retry example",
    ),
    Experiment(
        "bronson-stable",
        _BRONSON,
        "below half the capacity the doubled load still fits: the system is stable and "
        "recovers when the trigger ends (140 QPS; the step ends at 20 s)",
        "stable",
        20.0,
        1.0,
        "bronson",
        ("--strategies", "retry_once", "--rate", "140", "--spike-rate", "140", "--duration", "60"),
        "retry_once.recovered_at",
        "s",
        compare="at_most",
        reference="the retry example: stable below half the capacity",
    ),
    # Brooker's spike model: each published curve is the per-second mean of 10 runs of a
    # bistable system (its run_multiple_n), so what compares is the share of runs that recover.
    Experiment(
        "collapse-spike-naive",
        _COLLAPSE,
        "without backoff a run either recovers after the 80/s spike or stays collapsed for good; "
        "the share that recovers (what the mean curve of its runs shows)",
        "27% (27 of 100)",
        0.27,
        0.10,
        "metastable",
        ("--strategies", "naive", "--duration", "80", "--trials", "10"),
        "naive.recovered",
        "share",
        reference="the source's simulator (run_sim_spike, Client), 100 runs (seeds 0-99)",
        note="10 runs a seed; the 95% interval of a share from 100 runs is about 8 points",
    ),
    Experiment(
        "collapse-spike-backoff",
        _COLLAPSE,
        "backoff U(0, 20 s), then U(0, 40 s): goodput dips after the spike and is back by t = 30 s",
        "by 30 s",
        30.0,
        0.0,
        "metastable",
        ("--strategies", "published_backoff", "--duration", "80", "--trials", "10"),
        "published_backoff.recovered_at",
        "s",
        compare="at_most",
        reference="the source's mean curve (run_sim_spike, ClientWithBackoffAndJitter)",
    ),
    Experiment(
        "collapse-ramp-backoff",
        _COLLAPSE,
        "on the ramp (from 40/s up to 80/s at 25 s, then down at the same slope) the same "
        "backoff collapses for good",
        "0% recover",
        0.0,
        0.05,
        "ramp",
        ("--strategies", "published_backoff"),
        "published_backoff.recovered",
        "share",
        reference="the source's simulator (run_sim_ramp, ClientWithBackoffAndJitter): 0 of 20 "
        "runs (seeds 0-19) recover",
    ),
    Experiment(
        "brooker-bucket-success",
        _RETRIES,
        "adaptive retries (a token bucket: 5 tokens, 0.1 per call) at a 20% failure rate: "
        "share of calls that succeed",
        "90.7%",
        0.907,
        0.01,
        "sweep",
        ("--p", "0.2", *_SWEEP_SOURCE, "--strategies", "brooker_bucket"),
        "brooker_bucket.p0.2.success",
        "%",
        reference=_RETRY_SIM,
    ),
    Experiment(
        "brooker-bucket-load",
        _RETRIES,
        "...and the load it sends (attempts per call)",
        "1.135",
        1.135,
        0.01,
        "sweep",
        ("--p", "0.2", *_SWEEP_SOURCE, "--strategies", "brooker_bucket"),
        "brooker_bucket.p0.2.load",
        "",
        reference=_RETRY_SIM,
    ),
    Experiment(
        "brooker-bucket-high",
        _RETRIES,
        "the bucket acts like 0.1 retries per call at high failure rates: load about 1.1 at 50% "
        "failures",
        "about 1.1",
        1.1,
        0.03,
        "sweep",
        ("--p", "0.5", "--splits", "--strategies", "brooker_bucket", *_TEN_FOR_A_MINUTE),
        "brooker_bucket.p0.5.load",
        "",
        reference="the post's text",
        note="10 clients for 60 s, so that the full buckets of the start weigh little",
    ),
    Experiment(
        "brooker-breaker",
        _RETRIES,
        "a breaker that breaks retries only (10% threshold, 3 retries) at a 10% failure rate: "
        "share of calls that succeed",
        "92.7%",
        0.927,
        0.01,
        "sweep",
        ("--p", "0.1", *_SWEEP_SOURCE, "--strategies", "brooker_breaker"),
        "brooker_breaker.p0.1.success",
        "%",
        reference=_RETRY_SIM,
        note="the source's breaker counts failures over a client's whole life, seawall's over "
        "its last 100 attempts",
    ),
    Experiment(
        "brooker-n-retries",
        _RETRIES,
        "N retries at a 100% failure rate do 1 + N times the work (N = 3)",
        "4x",
        4.0,
        0.0,
        "sweep",
        ("--p", "1.0", "--splits", "--strategies", "retries_3", "--duration", "5"),
        "retries_3.p1.load",
        "x",
        reference="the post's text",
    ),
    Experiment(
        "tail-at-scale",
        _TAIL,
        "hedging after a short delay cut the p99.9 of a fan-out from 1,800 ms to 74 ms (24x)",
        "24x",
        1800.0 / 74.0,
        0.25,
        "hedge",
        ("--requests", "1000", "--at", "p95"),
        "p999_cut",
        "x",
        relative=True,
        reference="section Hedged requests",
        comparable=False,
        note=_TAIL_NOTE,
    ),
    Experiment(
        "tail-at-scale-load",
        _TAIL,
        "...for 2% more requests",
        "+2%",
        0.02,
        0.005,
        "hedge",
        ("--requests", "1000", "--at", "p95"),
        "p95.extra_load",
        "%",
        reference="section Hedged requests",
        comparable=False,
        note=_TAIL_NOTE + "; seawall hedges at its p95, so about 5% of leaf calls get a hedge",
    ),
)
