"""``seawall probe URL --scenario FILE``: the scenario file's load, against a real HTTP service.

The arrivals of the scenario file (its shape, pushed past saturation and back down) are sent in
real time, open loop, by clients built from seawall's own policies (the file's strategies, or
the routes of a seawall policy file) over :class:`seawall.httpx.AsyncRetryTransport`, so they
retry as production does. Goodput, attempts and latency are recorded per bin, and the verdict
says whether goodput came back on its own after the trigger, and how soon, or stayed down:
metastable.

Bounded: a run is refused beyond ``max_duration`` seconds or ``max_requests`` requests, at most
``max_in_flight`` requests are outstanding (the rest are counted as ``dropped``, never queued
without end), and the target must be on a loopback address or a host the user names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import math
import random
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from seawall.sim._file import scenario_plan
from seawall.sim._metastable import _policy, _recovery
from seawall.sim._util import trial_rng

__all__ = ["ProbeResult", "ProbeSeries", "check_target", "probe"]

MAX_DURATION = 3600.0
MAX_REQUESTS = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeSeries:
    """One client strategy's run against the service.

    Attributes:
        strategy: the strategy or policy-file route.
        goodput: successful requests per second, per bin.
        offered: attempts sent per second, per bin (retries included).
        errors: requests that finally failed, per second, per bin.
        p99: the 99th percentile latency of the requests that succeeded in each bin (s).
        requests: requests started.
        succeeded: requests that succeeded.
        dropped: arrivals not sent because ``max_in_flight`` were outstanding.
        baseline: mean goodput before the trigger (per second).
        recovered_at: when goodput came back for good after the trigger (``None``: never).
        verdict: ``recovered`` (within ``recovered_at - trigger_end`` s), ``metastable`` (it
            did not come back) or ``unhealthy`` (no goodput even before the trigger).
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


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeResult:
    """The result of :func:`probe`."""

    url: str
    series: tuple[ProbeSeries, ...]
    bin_width: float
    duration: float
    trigger_start: float
    trigger_end: float
    seed: int

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
        raise ValueError(f"url must be http:// or https:// with a host, got {url!r}")
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
    from seawall.sim._metastable import _Params, _rate_at

    shape = _Params(
        "probe", 0, 0, plan["duration"], plan["rate"], plan["peak"], 0.0, 0.0,
        1.0, 0.0, 1.0, 1.0, 1, 1, plan["bin_width"], rate_points=tuple(plan["points"]),
    )  # fmt: skip
    even = plan["shape"] == "constant"
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


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    return values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]


async def _run_one(
    url: str,
    label: str,
    policy: Any,
    plan: Mapping[str, Any],
    arrivals: Sequence[float],
    max_in_flight: int,
    host_budget: bool,
) -> tuple[list[int], list[int], list[int], list[list[float]], int, int, int]:
    import httpx

    from seawall.httpx import AsyncRetryTransport

    width = plan["bin_width"]
    nbins = math.ceil(plan["duration"] / width)
    goodput, offered, errors = [0] * nbins, [0] * nbins, [0] * nbins
    latencies: list[list[float]] = [[] for _ in range(nbins)]
    loop = asyncio.get_running_loop()
    start = loop.time()

    def bin_now() -> int:
        return int((loop.time() - start) / width)

    class Counting(httpx.AsyncBaseTransport):
        """Counts every attempt the retry transport sends."""

        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            self.inner = inner

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            k = bin_now()
            if k < nbins:
                offered[k] += 1
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    inner = httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=64)
    )
    client = httpx.AsyncClient(
        transport=(
            AsyncRetryTransport(policy, transport=Counting(inner))
            if host_budget  # production's default: a retry budget per host besides the policy's
            else AsyncRetryTransport(policy, transport=Counting(inner), budget=None)
        ),
        timeout=httpx.Timeout(plan["timeout"]),
    )
    in_flight = 0
    requests = succeeded = dropped = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one() -> None:
        nonlocal in_flight, succeeded
        t0 = loop.time()
        ok = False
        try:
            response = await client.get(url)
            ok = response.status_code < 400
        except Exception:  # any failure of the call: the request failed
            ok = False
        finally:
            in_flight -= 1
        k = bin_now()
        if k < nbins:
            if ok:
                goodput[k] += 1
                latencies[k].append(loop.time() - t0)
            else:
                errors[k] += 1
        succeeded += ok

    try:
        for t in arrivals:
            delay = start + t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            requests += 1
            if in_flight >= max_in_flight:
                dropped += 1
                continue
            in_flight += 1
            task = asyncio.ensure_future(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        rest = start + plan["duration"] - loop.time()
        if rest > 0:
            await asyncio.sleep(rest)
    finally:
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.wait(list(tasks))
        await client.aclose()
    return goodput, offered, errors, latencies, requests, succeeded, dropped


def probe(
    url: str,
    data: Mapping[str, Any],
    *,
    policies: Mapping[str, Any] | None = None,
    allow_hosts: Sequence[str] = (),
    max_requests: int = 100_000,
    max_duration: float = 300.0,
    max_in_flight: int = 1000,
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
        max_in_flight: outstanding requests at most (arrivals beyond are dropped and counted).
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
        good, offered, errors, lat, requests, succeeded, dropped = asyncio.run(
            _run_one(url, label, policy, plan, arrivals, max_in_flight, route is not None)
        )
        g = [x / width for x in good]
        pre = [g[k] for k in range(len(g)) if k * width >= 1.0 and (k + 1) * width <= start]
        baseline = sum(pre) / len(pre) if pre else 0.0
        recovered = _recovery(g, width, end, [baseline] * len(g)) if baseline > 0 else None
        if baseline <= 0:
            verdict = "unhealthy"
        else:
            verdict = "metastable" if recovered is None else "recovered"
        series.append(
            ProbeSeries(
                strategy=label,
                goodput=tuple(g),
                offered=tuple(x / width for x in offered),
                errors=tuple(x / width for x in errors),
                p99=tuple(_p99(v) for v in lat),
                requests=requests,
                succeeded=succeeded,
                dropped=dropped,
                baseline=baseline,
                recovered_at=recovered,
                verdict=verdict,
            )
        )
    return ProbeResult(url, tuple(series), width, plan["duration"], start, end, seed)


def render_probe(result: ProbeResult, console: Any) -> None:
    """A table of the verdicts, and goodput over time as text."""
    from rich.table import Table

    table = Table(
        title=f"probe {result.url}: trigger in [{result.trigger_start:g} s, "
        f"{result.trigger_end:g} s), {result.duration:g} s per strategy"
    )
    for column in ("strategy", "requests", "succeeded", "dropped", "baseline", "verdict"):
        table.add_column(column, justify="left" if column in ("strategy", "verdict") else "right")
    for s in result.series:
        if s.verdict == "recovered" and s.recovered_at is not None:
            after = s.recovered_at - result.trigger_end
            verdict = f"recovered on its own within {max(0.0, after):g} s"
        elif s.verdict == "metastable":
            verdict = "stuck: metastable (goodput did not come back)"
        else:
            verdict = "unhealthy before the trigger"
        table.add_row(
            s.strategy,
            str(s.requests),
            str(s.succeeded),
            str(s.dropped),
            f"{s.baseline:.1f}/s",
            verdict,
        )
    console.print(table)
    for s in result.series:
        console.print(f"{s.strategy}: goodput/s per {result.bin_width:g} s bin", markup=False)
        console.print(" ".join(f"{x:.0f}" for x in s.goodput), markup=False, soft_wrap=True)
