"""``seawall probe URL --scenario FILE``: the scenario file's load, against a real HTTP service.

The arrivals of the scenario file (its shape, pushed past saturation and back down) are sent in
real time, open loop, by clients built from seawall's own policies (the file's strategies, or
the routes of a seawall policy file) over :class:`seawall.httpx.AsyncRetryTransport`, so they
retry as production does. Goodput, attempts and latency are recorded per bin, and the verdict
says whether goodput came back on its own after the trigger, and how soon, or stayed down:
metastable.

A load generator can misjudge a service by failing itself: a loop that falls behind its
schedule sends less than it was asked to (and a slow service then looks fast: coordinated
omission), and attempts that fail inside the client (no free connection, no file descriptor)
look like a dead service while the service receives nothing. So the probe measures itself,
as wrk2 and k6 do:

- each request has an *intended* start, from the schedule; its *lag* is how much later its
  first attempt actually went out. Latency is measured from the intended start (coordinated
  omission corrected: a request the generator sent late waited that long too);
- an attempt counts as *sent* once its request headers were written to a connection (httpcore's
  trace); an attempt that failed before, for a reason on the client's side (no connection from
  the pool, no file descriptor, no local port), is *unsent* and counted apart;
- arrivals beyond ``max_in_flight`` outstanding requests are *dropped* (never queued).

When more than 5% of the requests started more than ``max_lag`` late, any arrival was dropped,
or more than 1% of the attempts were unsent, the generator did not offer the load it was asked
to, and the verdict is ``inconclusive``, with the reasons: the probe refuses to judge rather
than blame the service for its own lag.

Bounded: a run is refused beyond ``max_duration`` seconds or ``max_requests`` requests, at most
``max_in_flight`` requests are outstanding, and the target must be on a loopback address or a
host the user names.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import ipaddress
import math
import random
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from seawall._core.redact import redact_repr, redact_url
from seawall.sim._file import scenario_plan
from seawall.sim._metastable_model import _policy, _recovery
from seawall.sim._util import trial_rng

__all__ = ["VERDICTS", "ProbeResult", "ProbeSeries", "check_target", "probe"]

MAX_DURATION = 3600.0
MAX_REQUESTS = 1_000_000
#: The verdicts of one strategy's run.
VERDICTS = ("recovered", "metastable", "unhealthy", "inconclusive")
#: The generator fell behind when more than this share of the requests started late (a stall
#: of a fraction of a second on a busy machine delays a few; falling behind delays many)...
FELL_BEHIND_SHARE = 0.05
#: ...or more than this share of the attempts failed in the client.
UNSENT_SHARE = 0.01
# Failures of the client's own resources: the attempt never reached the service.
_LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeSeries:
    """One client strategy's run against the service.

    Attributes:
        strategy: the strategy or policy-file route.
        goodput: successful requests per second, per bin (by the time they completed).
        offered: attempts sent per second, per bin: their request headers reached a
            connection (retries included).
        errors: requests that finally failed, per second, per bin.
        p99: the 99th percentile latency of the requests that succeeded in each bin (s),
            measured from each request's intended start (coordinated omission corrected).
        requests: requests the schedule asked for.
        succeeded: requests that succeeded.
        dropped: arrivals not sent because ``max_in_flight`` were outstanding.
        baseline: mean goodput before the trigger (per second).
        recovered_at: when goodput came back for good after the trigger (``None``: never).
        verdict: ``recovered`` (within ``recovered_at - trigger_end`` s), ``metastable`` (it
            did not come back), ``unhealthy`` (no goodput even before the trigger) or
            ``inconclusive`` (the generator fell behind: see *reasons*).
        attempts: attempts the clients started.
        unsent: attempts that failed in the client before reaching the service.
        lag_p50: the median lag of the requests' first attempts behind their intended start.
        lag_p99: its 99th percentile.
        lag_max: the largest lag.
        late: requests whose first attempt started more than ``max_lag`` late.
        loop_lag_max: the longest the event loop was late waking up (a stalled generator).
        reasons: why the verdict is ``inconclusive`` (empty otherwise).
    """

    strategy: str
    goodput: tuple[float, ...]
    offered: tuple[float, ...]
    errors: tuple[float, ...]
    p99: tuple[float | None, ...]
    requests: int
    succeeded: int
    dropped: int
    baseline: float
    recovered_at: float | None
    verdict: str
    attempts: int = 0
    unsent: int = 0
    lag_p50: float = 0.0
    lag_p99: float = 0.0
    lag_max: float = 0.0
    late: int = 0
    loop_lag_max: float = 0.0
    reasons: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    """The result of :func:`probe`."""

    url: str  # the target, without its secrets (user info, query): it is shown and saved
    series: tuple[ProbeSeries, ...]
    bin_width: float
    duration: float
    trigger_start: float
    trigger_end: float
    seed: int
    max_lag: float = 0.2

    def get(self, strategy: str) -> ProbeSeries:
        for s in self.series:
            if s.strategy == strategy:
                return s
        raise KeyError(strategy)


def check_target(url: str, allow_hosts: Sequence[str] = ()) -> str:
    """*url* if it is http(s) on a loopback address or one of *allow_hosts*.

    Raises:
        ValueError: another scheme, no host, or a host that is neither.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url must be http:// or https:// with a host, got {redact_repr(url)}")
    host = parts.hostname
    if host in allow_hosts or host == "localhost":
        return url
    try:
        if ipaddress.ip_address(host).is_loopback:
            return url
    except ValueError:
        pass
    raise ValueError(
        f"probe sends real load: {host!r} is neither a loopback address nor a host named "
        "with --allow-host (name your own hosts only)"
    )


def _arrivals(plan: Mapping[str, Any], rng: random.Random) -> list[float]:
    from seawall.sim._metastable_model import _Params, _rate_at

    shape = _Params(
        "probe", 0, 0, plan["duration"], plan["rate"], plan["peak"], 0.0, 0.0,
        1.0, 0.0, 1.0, 1.0, 1, 1, plan["bin_width"], rate_points=tuple(plan["points"]),
    )  # fmt: skip
    even = plan["even"]
    out: list[float] = []
    t = 0.0
    while True:
        rate = _rate_at(shape, t)
        if rate <= 0:
            later = [p for p, _ in plan["points"] if p > t]
            t = min(later[0] if later else math.inf, t + 0.1)
        else:
            t += 1.0 / rate if even else rng.expovariate(rate)
            if t < plan["duration"]:
                out.append(t)
        if t >= plan["duration"]:
            break
    for when, n in plan["bursts"]:
        out += [when] * n
    return sorted(out)


def _quantile(values: list[float], q: float) -> float | None:
    """The *q* quantile (nearest rank) of *values*, sorted in place; ``None`` if empty."""
    if not values:
        return None
    values.sort()
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def _p99(values: list[float]) -> float | None:
    return _quantile(values, 0.99)


def _local_failure(error: BaseException) -> bool:
    """Whether *error* is the client's own: no connection from its pool, no descriptor or port."""
    import httpx

    if isinstance(error, httpx.PoolTimeout):
        return True
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _LOCAL_ERRNOS:
            return True
        e = e.__cause__ or e.__context__
    return False


@dataclasses.dataclass(slots=True)
class _Run:
    """What one strategy's run measured."""

    goodput: list[int]
    offered: list[int]
    errors: list[int]
    latencies: list[list[float]]
    lags: list[float]
    requests: int = 0
    succeeded: int = 0
    dropped: int = 0
    attempts: int = 0
    unsent: int = 0
    loop_lag_max: float = 0.0


class _Record:
    """One request's schedule: when it was meant to start, and when its first attempt did."""

    __slots__ = ("intended", "started")

    def __init__(self, intended: float) -> None:
        self.intended = intended
        self.started: float | None = None


_RECORD_KEY = "seawall.probe"
_TIMEOUTS = ("connect", "read", "write", "pool")
_POOLS = 16


async def _run_one(
    url: str,
    policy: Any,
    plan: Mapping[str, Any],
    arrivals: Sequence[float],
    max_in_flight: int,
    host_budget: bool,
) -> _Run:
    import httpx

    from seawall.httpx import AsyncRetryTransport

    width = plan["bin_width"]
    nbins = math.ceil(plan["duration"] / width)
    run = _Run([0] * nbins, [0] * nbins, [0] * nbins, [[] for _ in range(nbins)], [])
    loop = asyncio.get_running_loop()
    clock = loop.time
    start = math.inf  # set once the clients are built and warm: the schedule starts then

    def bin_at(t: float) -> int:
        return int((t - start) / width)

    class Counting(httpx.AsyncBaseTransport):
        """Counts every attempt the retry transport starts, and those that reach the service."""

        def __init__(self, pools: Sequence[httpx.AsyncBaseTransport]) -> None:
            self.pools = pools
            self.turn = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            now = clock()
            run.attempts += 1
            # Attempts take turns over several small pools: httpcore looks through every
            # connection of a pool for each request, which costs a pool of hundreds (a stuck
            # service holds one per attempt in flight) more CPU than the generator has.
            self.turn += 1
            inner = self.pools[self.turn % len(self.pools)]
            record = request.extensions.get(_RECORD_KEY)
            if isinstance(record, _Record) and record.started is None:
                record.started = now  # the first attempt leaves now
            sent = False

            async def trace(name: str, info: Mapping[str, Any]) -> None:
                # httpcore's trace hook (an async transport awaits it): the headers went out.
                nonlocal sent
                if not sent and name.endswith(".send_request_headers.complete"):
                    sent = True
                    k = bin_at(clock())
                    if 0 <= k < nbins:
                        run.offered[k] += 1

            request.extensions["trace"] = trace
            try:
                return await inner.handle_async_request(request)
            except BaseException as error:
                if not sent and _local_failure(error):
                    run.unsent += 1  # the service never saw it: the client's own failure
                raise

        async def aclose(self) -> None:
            for pool in self.pools:
                await pool.aclose()

    pools = [
        httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=8),
            # Plain HTTP needs no certificates: loading them costs the generator CPU it needs.
            verify=not url.startswith("http://"),
        )
        for _ in range(_POOLS)
    ]
    counting = Counting(pools)
    client = httpx.AsyncClient(
        transport=(
            AsyncRetryTransport(policy, transport=counting)
            if host_budget  # production's default: a retry budget per host besides the policy's
            else AsyncRetryTransport(policy, transport=counting, budget=None)
        ),
        timeout=httpx.Timeout(plan["timeout"]),
    )
    in_flight = 0
    tasks: set[asyncio.Task[None]] = set()
    done = False

    async def ticker() -> None:
        # How late the loop wakes up: a generator stalled by its own work, or by the machine.
        tick = min(0.01, width / 10)
        while not done:
            before = clock()
            await asyncio.sleep(tick)
            late = clock() - before - tick
            if late > run.loop_lag_max:
                run.loop_lag_max = late

    async def one(record: _Record) -> None:
        nonlocal in_flight
        ok = False
        try:
            response = await client.get(url, extensions={_RECORD_KEY: record})
            ok = response.status_code < 400
        except Exception:  # any failure of the call: the request failed
            ok = False
        finally:
            in_flight -= 1
        now = clock()
        if record.started is not None:
            run.lags.append(max(0.0, record.started - record.intended))
        k = bin_at(now)
        if k < nbins:
            if ok:
                run.goodput[k] += 1
                # From the intended start: the lag of the generator is part of the wait.
                run.latencies[k].append(now - record.intended)
            else:
                run.errors[k] += 1
        run.succeeded += ok

    # One request outside the schedule and the counts: the imports, the first connection and
    # its buffers happen now, not in the first requests' lag.
    with contextlib.suppress(Exception):
        warm = await pools[0].handle_async_request(
            httpx.Request("GET", url, extensions={"timeout": dict.fromkeys(_TIMEOUTS, 2.0)})
        )
        await warm.aread()
        await warm.aclose()
    # What exists now lives for the whole run: out of the collector's sight, so that its passes
    # over the run's own objects stay short (a long pass is a stall of the generator).
    gc.collect()
    gc.freeze()
    start = clock()
    watch = asyncio.ensure_future(ticker())
    try:
        for t in arrivals:
            intended = start + t
            delay = intended - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            run.requests += 1
            if in_flight >= max_in_flight:
                run.dropped += 1
                continue
            in_flight += 1
            task = asyncio.ensure_future(one(_Record(intended)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        rest = start + plan["duration"] - clock()
        if rest > 0:
            await asyncio.sleep(rest)
    finally:
        done = True
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.wait(list(tasks))
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await client.aclose()
        gc.unfreeze()
    return run


def _fell_behind(run: _Run, max_lag: float) -> tuple[tuple[str, ...], int]:
    """Why the generator did not offer the load it was asked to (empty: it did), and how many
    requests started more than *max_lag* late."""
    reasons = []
    late = sum(1 for lag in run.lags if lag > max_lag)
    if run.requests and late > FELL_BEHIND_SHARE * run.requests:
        reasons.append(
            f"{late} of {run.requests} requests started more than {max_lag:g} s after their "
            "intended time: the generator fell behind its schedule"
        )
    if run.dropped:
        reasons.append(
            f"{run.dropped} arrivals dropped at max_in_flight: the load offered was capped"
        )
    if run.attempts and run.unsent > UNSENT_SHARE * run.attempts:
        reasons.append(
            f"{run.unsent} of {run.attempts} attempts failed in the client before reaching the "
            "service (no connection or file descriptor)"
        )
    return tuple(reasons), late


def probe(
    url: str,
    data: Mapping[str, Any],
    *,
    policies: Mapping[str, Any] | None = None,
    allow_hosts: Sequence[str] = (),
    max_requests: int = 100_000,
    max_duration: float = 300.0,
    max_in_flight: int = 1000,
    max_lag: float = 0.2,
    settle: float = 0.0,
    seed: int = 0,
) -> ProbeResult:
    """Send a scenario file's load to *url* for each of its strategies in turn; a verdict each.

    Args:
        url: the service (http or https; loopback, or a host in *allow_hosts*).
        data: a scenario file's data (:func:`seawall.sim._file.read_scenario`).
        policies: a seawall policy file's data: its routes are the clients (instead of the
            file's own ``clients.policies``).
        allow_hosts: hosts besides loopback that the user owns and allows load on.
        max_requests: refuse a run whose arrivals, all strategies together, exceed this.
        max_duration: refuse a run longer than this (seconds of real time, all strategies).
        max_in_flight: outstanding requests at most (arrivals beyond are dropped and counted,
            and make the verdict ``inconclusive``).
        max_lag: seconds a request may start behind its intended time; more than 5% of the
            requests later than that make the verdict ``inconclusive``.
        settle: seconds to wait between strategies, for the service to drain.
        seed: the seed of the arrival times and of the policies' jitter.

    Raises:
        ValueError: a bad target, a run beyond the bounds, or bad scenario data.
    """
    from seawall._core import validate as _validate
    from seawall._core.clock import SYSTEM_CLOCK

    url = check_target(url, allow_hosts)
    max_requests = _validate.count("max_requests", max_requests, minimum=1, maximum=MAX_REQUESTS)
    max_duration = _validate.seconds("max_duration", max_duration, zero=False, finite=True)
    if max_duration > MAX_DURATION:
        raise ValueError(f"max_duration must be <= {MAX_DURATION:g} s, got {max_duration!r}")
    max_in_flight = _validate.count("max_in_flight", max_in_flight, minimum=1, maximum=100_000)
    max_lag = _validate.seconds("max_lag", max_lag, zero=False, finite=True)
    settle = _validate.seconds("settle", settle, finite=True)
    seed = _validate.count("seed", seed, minimum=0)
    if policies is not None:
        clients = dict(data.get("clients", {}))
        clients["policies"] = dict(policies)
        clients.setdefault("strategies", [])
        data = {**data, "clients": clients}
    plan = scenario_plan(data)
    labels = [*plan["strategies"], *plan["routes"]]
    total_time = plan["duration"] * len(labels) + settle * (len(labels) - 1)
    if total_time > max_duration:
        raise ValueError(
            f"the probe would take {total_time:g} s of real time; max_duration is "
            f"{max_duration:g} s (shorten run.duration, or raise --max-duration)"
        )
    arrivals = _arrivals(plan, trial_rng(seed, "probe", "arrivals"))
    if len(arrivals) * len(labels) > max_requests:
        raise ValueError(
            f"the probe would send {len(arrivals) * len(labels)} requests; max_requests is "
            f"{max_requests} (lower the rate, or raise --max-requests)"
        )
    width = plan["bin_width"]
    start, end = plan["window"]
    series = []
    for i, label in enumerate(labels):
        if i and settle:
            time.sleep(settle)
        route = plan["routes"].get(label) if label not in plan["strategies"] else None
        if route is not None:
            budget = route.budget
            policy = route.build(budget=None if budget is None else budget.build(None))
            policy = policy.replace(rng=trial_rng(seed, "probe", label))
        else:
            policy = _policy(
                label, plan["attempts"], plan["timeout"], SYSTEM_CLOCK, seed, 0, None
            ).replace(name=f"probe-{label}")
        run = asyncio.run(_run_one(url, policy, plan, arrivals, max_in_flight, route is not None))
        g = [x / width for x in run.goodput]
        pre = [g[k] for k in range(len(g)) if k * width >= 1.0 and (k + 1) * width <= start]
        baseline = sum(pre) / len(pre) if pre else 0.0
        recovered = _recovery(g, width, end, [baseline] * len(g)) if baseline > 0 else None
        reasons, late = _fell_behind(run, max_lag)
        if reasons:
            verdict = "inconclusive"  # the generator's own failure: no verdict on the service
        elif baseline <= 0:
            verdict = "unhealthy"
        else:
            verdict = "metastable" if recovered is None else "recovered"
        lags = list(run.lags)
        series.append(
            ProbeSeries(
                strategy=label,
                goodput=tuple(g),
                offered=tuple(x / width for x in run.offered),
                errors=tuple(x / width for x in run.errors),
                p99=tuple(_p99(v) for v in run.latencies),
                requests=run.requests,
                succeeded=run.succeeded,
                dropped=run.dropped,
                baseline=baseline,
                recovered_at=recovered,
                verdict=verdict,
                attempts=run.attempts,
                unsent=run.unsent,
                lag_p50=_quantile(lags, 0.5) or 0.0,
                lag_p99=_quantile(lags, 0.99) or 0.0,
                lag_max=max(lags, default=0.0),
                late=late,
                loop_lag_max=run.loop_lag_max,
                reasons=reasons,
            )
        )
    return ProbeResult(
        redact_url(url), tuple(series), width, plan["duration"], start, end, seed, max_lag
    )


def render_probe(result: ProbeResult, console: Any) -> None:
    """A table of the verdicts, the generator's own lag, and goodput over time as text."""
    from rich.table import Table

    table = Table(
        title=f"probe {result.url}: trigger in [{result.trigger_start:g} s, "
        f"{result.trigger_end:g} s), {result.duration:g} s per strategy"
    )
    columns = ("strategy", "requests", "succeeded", "dropped", "lag p99", "baseline", "verdict")
    for column in columns:
        table.add_column(column, justify="left" if column in ("strategy", "verdict") else "right")
    for s in result.series:
        if s.verdict == "recovered" and s.recovered_at is not None:
            after = s.recovered_at - result.trigger_end
            verdict = f"recovered on its own within {max(0.0, after):g} s"
        elif s.verdict == "metastable":
            verdict = "stuck: metastable (goodput did not come back)"
        elif s.verdict == "inconclusive":
            verdict = "inconclusive: the load generator fell behind (no verdict)"
        else:
            verdict = "unhealthy before the trigger"
        table.add_row(
            s.strategy,
            str(s.requests),
            str(s.succeeded),
            str(s.dropped),
            f"{s.lag_p99 * 1000:.0f} ms",
            f"{s.baseline:.1f}/s",
            verdict,
        )
    console.print(table)
    for s in result.series:
        for reason in s.reasons:
            console.print(f"{s.strategy}: {reason}", markup=False)
        console.print(f"{s.strategy}: goodput/s per {result.bin_width:g} s bin", markup=False)
        console.print(" ".join(f"{x:.0f}" for x in s.goodput), markup=False, soft_wrap=True)
