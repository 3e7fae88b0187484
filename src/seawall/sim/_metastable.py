"""Scenario ``metastable``: a load spike tips a server into a collapse that retries sustain."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from seawall._core import validate as _validate
from seawall.sim._metastable_model import (
    _Params,
    _rate_at,
    _recovery,
    _run,
)
from seawall.sim._servers import SERVER_MODELS
from seawall.sim._util import MAX_DURATION, check_volume, isolated, parallel_map

__all__ = ["METASTABLE_STRATEGIES", "MetastableResult", "MetastableSeries", "metastable"]

METASTABLE_STRATEGIES: tuple[str, ...] = (
    "naive",
    "backoff",
    "budget",
    "budget_shedding",
    "published_backoff",
    "retry_once",
    "no_retries",
    "adaptive_throttle",
)
#: The strategies a run compares unless told otherwise.
DEFAULT_METASTABLE_STRATEGIES: tuple[str, ...] = ("naive", "backoff", "budget", "budget_shedding")
TRIGGERS: tuple[str, ...] = ("spike", "ramp", "peak")


@dataclasses.dataclass(frozen=True, slots=True)
class MetastableSeries:
    """One strategy's run(s).

    Attributes:
        strategy: one of :data:`METASTABLE_STRATEGIES`.
        goodput: successful requests per second, per bin (mean over runs).
        offered: attempts reaching the server per second, per bin (mean over runs).
        in_flight: requests in the server at the end of each bin (mean over runs).
        recovered_at: per run, when goodput came back after the spike (``None``: never).
        success: the fraction of the requests settled by the end (succeeded or given up)
            that succeeded (mean over runs).
        load: attempts per request (mean over runs).
        events: simulator events, all runs together.
    """

    strategy: str
    goodput: tuple[float, ...]
    offered: tuple[float, ...]
    in_flight: tuple[float, ...]
    recovered_at: tuple[float | None, ...]
    success: float
    load: float
    events: int

    @property
    def recovered(self) -> bool:
        """Whether goodput recovered after the spike in every run."""
        return all(t is not None for t in self.recovered_at)


@dataclasses.dataclass(frozen=True, slots=True)
class MetastableResult:
    """The result of :func:`metastable`."""

    series: tuple[MetastableSeries, ...]
    bin_width: float
    duration: float
    rate: float
    spike_rate: float
    spike_start: float
    spike_end: float
    runs: int
    seed: int
    server: str = "fixed"
    trigger: str = "spike"
    outage: tuple[float, float] | None = None
    latency_step: tuple[float, float, float] | None = None

    @property
    def trigger_end(self) -> float:
        """When the trigger (the spike or ramp, the outage, the latency step) ended."""
        return max(
            self.spike_end,
            self.outage[1] if self.outage else 0.0,
            self.latency_step[1] if self.latency_step else 0.0,
        )

    def get(self, strategy: str) -> MetastableSeries:
        for s in self.series:
            if s.strategy == strategy:
                return s
        raise KeyError(strategy)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.series)


@isolated
def metastable(
    *,
    strategies: Sequence[str] = DEFAULT_METASTABLE_STRATEGIES,
    duration: float = 80.0,
    rate: float = 40.0,
    spike_rate: float = 80.0,
    spike_start: float = 20.0,
    spike_end: float = 25.0,
    base_latency: float = 1.0,
    per_request: float = 0.01,
    network_mean: float = 0.1,
    timeout: float = 3.0,
    attempts: int = 3,
    shed_limit: int = 100,
    bin_width: float = 1.0,
    runs: int = 1,
    seed: int = 0,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    server: str = "fixed",
    concurrency: int = 100,
    queue_limit: float = math.inf,
    trigger: str = "spike",
    outage: tuple[float, float] | None = None,
    latency_step: tuple[float, float, float] | None = None,
    policies: Any = None,
    shed_queue: int = 0,
    shed_queue_wait: float = 1.0,
) -> MetastableResult:
    """A server that slows down with load, a short spike, and clients that retry.

    By default (``server="fixed"``) the server has no concurrency limit; a request takes
    ``base_latency + per_request * n`` seconds where n is the number of requests in the server
    once it has arrived (itself included), and it finishes its work even after the client has
    stopped waiting. With the defaults this is the spike model of M. Brooker's simulator
    (github.com/mbrooker/simulator_example, ``simple_collapse_sim/sim.py``): open-loop
    arrivals, the same server, timeout, attempts and network. The system is bistable: a run
    either recovers or collapses, so the mean of several runs (*runs*) is a share of each.
    ``server="processor_sharing"`` shares the server between the requests in it (throughput
    capped at ``1 / per_request``); ``server="limit"`` gives it *concurrency* slots of
    *base_latency* seconds each and a FIFO queue of *queue_limit* (see
    ``seawall.sim._servers``). Each network hop takes Exp(mean
    *network_mean*). Requests arrive as a Poisson process at *rate* per second, at *spike_rate*
    between *spike_start* and *spike_end*. Every attempt times out after *timeout* seconds.

    Strategies (each a real :class:`~seawall.RetryPolicy` with ``max_attempts=attempts``):

    - ``naive``: retry at once after a timeout.
    - ``backoff``: full-jitter backoff (base 0.1 s, cap 2 s).
    - ``budget``: backoff plus a shared :class:`~seawall.RetryBudget` (defaults).
    - ``budget_shedding``: the same, and in front of the server the decision core of
      :class:`seawall.server.LoadShedder` (its ``Admission``) admits *shed_limit* requests at a
      time, queues *shed_queue* more for up to *shed_queue_wait* seconds (newest first), and
      answers the rest at once with "overloaded; don't retry".
    - ``published_backoff``: U(0, 20 s) before the first retry, U(0, 40 s) before the second.
    - ``retry_once``: one retry, at once (Bronson et al., HotOS'21).
    - ``no_retries``: one attempt.
    - ``adaptive_throttle``: backoff (as ``backoff``) and a shared
      :class:`~seawall.AdaptiveThrottle` (defaults: K = 2 over two minutes), which rejects
      requests locally once the server accepts fewer than half of them.

    ``trigger="ramp"`` raises the rate linearly from *rate* to *spike_rate* between
    *spike_start* and *spike_end* instead of jumping; ``trigger="peak"`` raises it the same way,
    then lowers it at the same slope, to zero (the ramp of Brooker's simulator); goodput then
    recovers once it is back to 90% of the arrivals of the moment; *outage* ``(start, end)``
    stalls the server for that window: requests reaching it wait, and it takes them in order when it
    comes back; *latency_step* ``(start, end, extra)`` makes every request of that window reach
    the server *extra* seconds late, without holding its slots (Bronson et al.'s latency step:
    the server's capacity does not change, only its latency).

    Goodput has recovered once, after the spike, its mean over 5 s is back to >= 90% of its mean
    before the spike (from 5 s on).

    Args:
        strategies: a subset of :data:`METASTABLE_STRATEGIES`.
        duration: seconds simulated.
        rate: arrivals per second outside the spike.
        spike_rate: arrivals per second during the spike.
        spike_start: when the spike starts (seconds).
        spike_end: when it ends.
        base_latency: the server's latency when empty.
        per_request: seconds of latency added by each request in the server.
        network_mean: mean one-way network latency.
        timeout: the client's timeout per attempt.
        attempts: attempts per request, the first included.
        shed_limit: the shedder's ``max_concurrency`` (``budget_shedding``).
        shed_queue: the shedder's ``max_queue``.
        shed_queue_wait: the shedder's ``max_queue_wait`` (seconds).
        bin_width: seconds per bin of the time series.
        server: the server model, one of ``fixed``, ``processor_sharing``, ``limit``.
        concurrency: slots of the ``limit`` server.
        queue_limit: the ``limit`` server's queue (beyond it, refused at once).
        trigger: ``spike``, ``ramp`` or ``peak``.
        outage: a window ``(start, end)`` during which the server stalls, or ``None``.
        latency_step: ``(start, end, extra)``: in that window every request reaches the server
            *extra* seconds late, without holding its slots or queue (the trigger of Bronson
            et al.'s retry example), or ``None``.
        policies: the data of a seawall policy file (``seawall.config``): each route runs too,
            as a strategy named after it, with the policy production would build from it.
        runs: independent runs per strategy; the series are their means.
        seed: the seed.
        workers: processes to spread the runs over.
        progress: called with (runs done, runs in all).

    Returns:
        A :class:`MetastableResult`.
    """
    for s in strategies:
        if s not in METASTABLE_STRATEGIES:
            raise ValueError(
                f"strategies must be among {', '.join(METASTABLE_STRATEGIES)}; got {s!r}"
            )
    duration = _validate.seconds("duration", duration, zero=False, finite=True)
    if duration > MAX_DURATION:
        raise ValueError(f"duration must be <= {MAX_DURATION:g} seconds, got {duration!r}")
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    spike_rate = _validate.number("spike_rate", spike_rate, minimum=0.0, above=True, finite=True)
    spike_start = _validate.seconds("spike_start", spike_start, finite=True)
    spike_end = _validate.seconds("spike_end", spike_end, finite=True)
    if spike_end < spike_start:
        raise ValueError(f"spike_end must be >= spike_start ({spike_start!r}), got {spike_end!r}")
    base_latency = _validate.seconds("base_latency", base_latency, zero=False, finite=True)
    per_request = _validate.seconds("per_request", per_request, finite=True)
    network_mean = _validate.seconds("network_mean", network_mean, zero=False, finite=True)
    timeout = _validate.seconds("timeout", timeout, zero=False, finite=True)
    attempts = _validate.count("attempts", attempts, minimum=1)
    shed_limit = _validate.count("shed_limit", shed_limit, minimum=1)
    shed_queue = _validate.count("shed_queue", shed_queue, minimum=0)
    shed_queue_wait = _validate.seconds("shed_queue_wait", shed_queue_wait, finite=True)
    bin_width = _validate.seconds("bin_width", bin_width, zero=False, finite=True)
    runs = _validate.count("runs", runs, minimum=1)
    seed = _validate.count("seed", seed, minimum=0)
    if duration / bin_width > 1_000_000:
        raise ValueError(f"duration / bin_width must be <= 1e6 bins, got {duration / bin_width:g}")
    check_volume(
        "rate * duration * attempts (over every run)",
        max(rate, spike_rate) * duration * attempts * runs * len(tuple(strategies)),
    )
    if server not in SERVER_MODELS:
        raise ValueError(f"server must be one of {', '.join(SERVER_MODELS)}; got {server!r}")
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}; got {trigger!r}")
    concurrency = _validate.count("concurrency", concurrency, minimum=1)
    if queue_limit != math.inf:
        queue_limit = _validate.count("queue_limit", queue_limit, minimum=0)
    down = (0.0, 0.0)
    if outage is not None:
        o_start, o_end = (_validate.seconds("outage", t, finite=True) for t in outage)
        if o_end < o_start:
            raise ValueError(f"outage must be (start, end) with end >= start, got {outage!r}")
        down = (o_start, o_end)
    step = (0.0, 0.0, 0.0)
    if latency_step is not None:
        if len(latency_step) != 3:
            raise ValueError(f"latency_step must be (start, end, extra), got {latency_step!r}")
        s_start, s_end, s_extra = (
            _validate.seconds("latency_step", t, finite=True) for t in latency_step
        )
        if s_end < s_start:
            raise ValueError(
                f"latency_step must be (start, end, extra) with end >= start, got {latency_step!r}"
            )
        step = (s_start, s_end, s_extra)
    routes: dict[str, Any] = {}
    if policies is not None:
        from seawall._policy.config import ConfigError, load_config

        try:
            routes = load_config(policies)
        except ConfigError as err:
            raise ValueError(f"policies: {err}") from None
    strategies = [*strategies, *(r for r in routes if r not in strategies)]
    jobs = [
        _Params(
            s,
            r,
            seed,
            duration,
            rate,
            spike_rate,
            spike_start,
            spike_end,
            base_latency,
            per_request,
            network_mean,
            timeout,
            attempts,
            shed_limit,
            bin_width,
            server,
            concurrency,
            queue_limit,
            trigger,
            *down,
            route=routes.get(s),
            shed_queue=shed_queue,
            shed_queue_wait=shed_queue_wait,
            step_start=step[0],
            step_end=step[1],
            step_extra=step[2],
        )
        for s in strategies
        for r in range(runs)
    ]
    # The trigger: the spike (or ramp), the outage, or both; recovery counts from its end.
    windows = [w for w in ((spike_start, spike_end), down, step[:2]) if w[1] > w[0]]
    trigger_start = min((w[0] for w in windows), default=spike_start)
    trigger_end = max((w[1] for w in windows), default=spike_end)
    series = run_series(
        jobs, strategies, runs, trigger_start, trigger_end, workers=workers, progress=progress
    )
    return MetastableResult(
        series,
        bin_width,
        duration,
        rate,
        spike_rate,
        spike_start,
        spike_end,
        runs,
        seed,
        server,
        trigger,
        down if down[1] > down[0] else None,
        step if step[1] > step[0] else None,
    )


def run_series(
    jobs: Sequence[_Params],
    strategies: Sequence[str],
    runs: int,
    trigger_start: float,
    trigger_end: float,
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[MetastableSeries, ...]:
    """Run *jobs* (``runs`` per strategy, in order) and average them into one series each."""
    outs = parallel_map(_run, jobs, workers=workers, progress=progress)
    series = []
    for i, s in enumerate(strategies):
        mine = outs[i * runs : (i + 1) * runs]
        params = jobs[i * runs]
        bin_width, rate = params.bin_width, params.rate
        nbins = len(mine[0][0])
        good = tuple(sum(o[0][k] for o in mine) / runs / bin_width for k in range(nbins))
        offered = tuple(sum(o[1][k] for o in mine) / runs / bin_width for k in range(nbins))
        inflight = tuple(sum(o[2][k] for o in mine) / runs for k in range(nbins))
        recovered: list[float | None] = []
        # A load that keeps changing after its peak is judged against its own demand.
        demand = (
            [_rate_at(params, (k + 0.5) * bin_width) for k in range(nbins)]
            if params.trigger == "peak"
            else None
        )
        for o in mine:
            g = [x / bin_width for x in o[0]]
            pre = [
                g[k]
                for k in range(len(g))
                if k * bin_width >= 5.0 and (k + 1) * bin_width <= trigger_start
            ]
            flat = [sum(pre) / len(pre) if pre else rate] * nbins
            baseline = demand if demand is not None else flat
            recovered.append(_recovery(g, bin_width, trigger_end, baseline))
        series.append(
            MetastableSeries(
                strategy=s,
                goodput=good,
                offered=offered,
                in_flight=inflight,
                recovered_at=tuple(recovered),
                success=sum(o[4] / max(1, o[5]) for o in mine) / runs,
                load=sum(o[6] / max(1, o[3]) for o in mine) / runs,
                events=sum(o[7] for o in mine),
            )
        )
    return tuple(series)
