"""Scenario files: an overload experiment described in TOML, run by ``seawall sim file`` (and
driven against a real service by ``seawall probe``).

```toml
[run]
duration = 120          # seconds simulated
bin_width = 1.0         # seconds per bin of the time series

[arrivals]
shape = "step"          # constant (evenly spaced) | poisson | step | ramp | bursts
rate = 40               # requests/s (the base rate)
steps = [[20, 80], [25, 40]]            # step: [time, rate] changes
ramp = { start = 20, end = 40, to = 90 }  # ramp: from `rate` up to `to`, then back to `rate`
bursts = [[30, 500]]                    # bursts: [time, requests at once], over Poisson `rate`
spacing = "poisson"                     # or "even": arrivals evenly spaced (step, ramp, bursts)

[server]
model = "fixed"         # fixed | processor_sharing | limit (see seawall.sim._servers)
base_latency = 1.0
per_request = 0.01
concurrency = 100       # limit: slots
queue_limit = 1000      # limit: queue (beyond it, refused at once)
network_mean = 0.1      # mean one-way network latency
shed_limit = 100        # the budget_shedding strategy sheds beyond this many in the server

[failures]
probability = 0.0       # each attempt fails at once, independently
outages = [[60, 70]]    # correlated: windows in which...
outage_kind = "error"   # ...every attempt fails at once ("error"), or the server stalls ("stall")

[clients]
timeout = 3.0           # the client's patience per attempt
attempts = 3            # for the named strategies
strategies = ["naive", "budget"]   # by name (seawall.sim.METASTABLE_STRATEGIES), and/or
policies = "policies.toml"         # every route of a seawall policy file (seawall.config)
```

Every field is optional but ``arrivals.rate``; unknown fields are refused with their path and
the nearest valid name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from seawall._core.validate import key_path, unknown_key
from seawall._policy.config import ConfigError, RouteConfig, _decode, _read, load_config
from seawall.sim._metastable import (
    METASTABLE_STRATEGIES,
    MetastableResult,
    run_series,
)
from seawall.sim._metastable_model import _Params
from seawall.sim._servers import SERVER_MODELS
from seawall.sim._util import MAX_DURATION, check_volume, isolated

__all__ = ["SHAPES", "read_scenario", "read_policies", "run_scenario_file", "scenario_plan"]

SHAPES: tuple[str, ...] = ("constant", "poisson", "step", "ramp", "bursts")
_SECTIONS = {
    "run": ("duration", "bin_width", "name"),
    "arrivals": ("shape", "rate", "steps", "ramp", "bursts", "spacing"),
    "server": (
        "model",
        "base_latency",
        "per_request",
        "concurrency",
        "queue_limit",
        "network_mean",
        "shed_limit",
    ),
    "failures": ("probability", "outages", "outage_kind"),
    "clients": ("timeout", "attempts", "strategies", "policies"),
}


def read_scenario(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The data of a scenario file (TOML, or JSON), checked by :func:`scenario_plan`.

    Raises:
        ValueError: the file cannot be read or parsed, or a field is invalid (its path named).
    """
    try:
        data = dict(_decode(_read(path), path))
    except OSError as err:
        raise ValueError(f"scenario file {os.fspath(path)}: {err.strerror or err}") from None
    except ConfigError as err:
        raise ValueError(str(err)) from None
    policies = (
        data.get("clients", {}).get("policies") if isinstance(data.get("clients"), dict) else None
    )
    if isinstance(policies, str):
        # A policy file named relative to the scenario file: read it now, so that the run's
        # record holds the policies themselves (a re-run does not depend on the file).
        base = os.path.dirname(os.path.abspath(os.fspath(path)))
        data["clients"] = {
            **data["clients"],
            "policies": read_policies(os.path.join(base, policies)),
        }
    scenario_plan(data)
    return data


def read_policies(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The data of a seawall policy file (TOML, YAML, JSON), validated by ``seawall.config``.

    Raises:
        ValueError: the file cannot be read, or ``seawall.config`` refuses it.
    """
    try:
        data = dict(_decode(_read(path), path))
        load_config(data)
    except OSError as err:
        raise ValueError(f"policy file {os.fspath(path)}: {err.strerror or err}") from None
    except ConfigError as err:
        raise ValueError(f"policy file {os.fspath(path)}: {err}") from None
    return data


def _table(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a table, got {value!r}")
    for name in value:
        if name not in _SECTIONS[key]:
            raise ValueError(f"{key_path(key, name)}: {unknown_key(name, _SECTIONS[key])}")
    return value


def _num(table: Mapping[str, Any], path: str, default: float | None, *, low: float = 0.0,
         above: bool = False, high: float = math.inf) -> float:  # fmt: skip
    value = table.get(path.split(".")[-1], default)
    if value is None:
        raise ValueError(f"{path} is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{path} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < low or (above and v == low) or v > high:
        bound = f"> {low:g}" if above else f">= {low:g}"
        raise ValueError(f"{path} must be a finite number {bound} and <= {high:g}, got {value!r}")
    return v


def _pairs(value: object, path: str) -> list[tuple[float, float]]:
    if not isinstance(value, list):
        raise ValueError(f"{path} must be a list of [a, b] pairs, got {value!r}")
    out = []
    for i, item in enumerate(value):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in item)
            or not all(math.isfinite(x) and x >= 0 for x in item)
        ):
            raise ValueError(f"{path}[{i}] must be a pair of numbers >= 0, got {item!r}")
        out.append((float(item[0]), float(item[1])))
    return out


def scenario_plan(data: Mapping[str, Any]) -> dict[str, Any]:
    """Check a scenario file's data and turn it into the plan the runner (and the probe) use.

    Raises:
        ValueError: a field is invalid (its path is named).
    """
    for name in data:
        if name not in _SECTIONS:
            known = tuple(_SECTIONS)
            raise ValueError(f"{key_path('', name)}: {unknown_key(name, known, what='table')}")
    run, arr, srv = _table(data, "run"), _table(data, "arrivals"), _table(data, "server")
    fail, cli = _table(data, "failures"), _table(data, "clients")
    duration = _num(run, "run.duration", 120.0, above=True, high=MAX_DURATION)
    bin_width = _num(run, "run.bin_width", 1.0, above=True, high=duration)
    if duration / bin_width > 1_000_000:
        raise ValueError("run.duration / run.bin_width must be <= 1e6 bins")
    shape = arr.get("shape", "poisson")
    if shape not in SHAPES:
        raise ValueError(f"arrivals.shape must be one of {', '.join(SHAPES)}; got {shape!r}")
    rate = _num(arr, "arrivals.rate", None, high=1e7)
    points: list[tuple[float, float]] = [(0.0, rate)]
    bursts: list[tuple[float, int]] = []
    window = (0.0, 0.0)
    peak = rate
    if shape == "step":
        steps = sorted(_pairs(arr.get("steps", []), "arrivals.steps"))
        for t, r in steps:
            # A step is two points at the same instant: the rate jumps there.
            points += [(t, points[-1][1]), (t, r)]
        if steps:
            window = (steps[0][0], steps[-1][0])
            peak = max(r for _, r in points)
    elif shape == "ramp":
        ramp = arr.get("ramp")
        if not isinstance(ramp, Mapping) or set(ramp) - {"start", "end", "to"}:
            raise ValueError("arrivals.ramp must be a table {start, end, to}")
        start = _num(ramp, "arrivals.ramp.start", None)
        end = _num(ramp, "arrivals.ramp.end", None)
        to = _num(ramp, "arrivals.ramp.to", None, high=1e7)
        if end <= start:
            raise ValueError(f"arrivals.ramp.end must be > start ({start:g}), got {end:g}")
        points = [(0.0, rate), (start, rate), (end, to), (end, rate)]
        window, peak = (start, end), max(rate, to)
    elif shape == "bursts":
        for t, n in _pairs(arr.get("bursts", []), "arrivals.bursts"):
            if n != int(n) or n > 1e6:
                raise ValueError(f"arrivals.bursts: a burst is a whole number <= 1e6, got {n:g}")
            bursts.append((t, int(n)))
        if bursts:
            window = (min(t for t, _ in bursts), max(t for t, _ in bursts))
    elif any(k in arr for k in ("steps", "ramp", "bursts")):
        raise ValueError(f"arrivals: shape {shape!r} takes no steps, ramp or bursts")
    spacing = arr.get("spacing", "even" if shape == "constant" else "poisson")
    if spacing not in ("poisson", "even"):
        raise ValueError(f"arrivals.spacing must be 'poisson' or 'even', got {spacing!r}")
    if shape == "poisson" and spacing == "even":
        raise ValueError("arrivals.spacing: shape 'poisson' is Poisson ('constant' is even)")
    model = srv.get("model", "fixed")
    if model not in SERVER_MODELS:
        raise ValueError(f"server.model must be one of {', '.join(SERVER_MODELS)}; got {model!r}")
    queue = srv.get("queue_limit")
    server = {
        "model": model,
        "base_latency": _num(srv, "server.base_latency", 1.0, above=True, high=3600),
        "per_request": _num(srv, "server.per_request", 0.01, high=3600),
        "concurrency": int(_num(srv, "server.concurrency", 100, low=1, high=1e6)),
        "queue_limit": math.inf
        if queue is None
        else int(_num(srv, "server.queue_limit", 0, high=1e9)),
        "network_mean": _num(srv, "server.network_mean", 0.1, above=True, high=60),
        "shed_limit": int(_num(srv, "server.shed_limit", 100, low=1, high=1e9)),
    }
    probability = _num(fail, "failures.probability", 0.0, high=1.0)
    outages = _pairs(fail.get("outages", []), "failures.outages")
    for i, (s, e) in enumerate(outages):
        if e < s:
            raise ValueError(f"failures.outages[{i}] must be [start, end] with end >= start")
    kind = fail.get("outage_kind", "error")
    if kind not in ("error", "stall"):
        raise ValueError(f"failures.outage_kind must be 'error' or 'stall', got {kind!r}")
    if outages:
        starts = [s for s, _ in outages] + ([window[0]] if window[1] > window[0] or bursts else [])
        ends = [e for _, e in outages] + ([window[1]] if window[1] > window[0] or bursts else [])
        window = (min(starts), max(ends))
    timeout = _num(cli, "clients.timeout", 3.0, above=True, high=3600)
    attempts = int(_num(cli, "clients.attempts", 3, low=1, high=100))
    names = cli.get("strategies", [] if "policies" in cli else ["naive", "budget"])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"clients.strategies must be a list of names, got {names!r}")
    for n in names:
        if n not in METASTABLE_STRATEGIES:
            raise ValueError(
                f"clients.strategies: {n!r} is not one of {', '.join(METASTABLE_STRATEGIES)}"
            )
    routes: dict[str, RouteConfig] = {}
    if "policies" in cli:
        policies = cli["policies"]
        if not isinstance(policies, Mapping):
            raise ValueError("clients.policies must name a policy file (or be its tables)")
        try:
            routes = load_config(policies)
        except ConfigError as err:
            raise ValueError(f"clients.policies: {err}") from None
    if not names and not routes:
        raise ValueError("clients: name at least one strategy or policy")
    peak_total = max(peak, rate) * duration + sum(n for _, n in bursts)
    check_volume("arrivals over run.duration", peak_total * attempts * (len(names) + len(routes)))
    return {
        "duration": duration,
        "bin_width": bin_width,
        "shape": shape,
        "even": spacing == "even",
        "rate": rate,
        "peak": peak,
        "points": points,
        "bursts": bursts,
        "window": window,
        "server": server,
        "probability": probability,
        "outages": outages,
        "outage_kind": kind,
        "timeout": timeout,
        "attempts": attempts,
        "strategies": list(names),
        "routes": routes,
    }


@isolated
def run_scenario_file(
    data: Mapping[str, Any],
    *,
    policies: Mapping[str, Any] | None = None,
    runs: int = 1,
    seed: int = 0,
    workers: int = 1,
    progress: Any = None,
) -> MetastableResult:
    """Run a scenario file's data (:func:`read_scenario`), optionally with the routes of a policy
    file (:func:`read_policies`) as the clients' policies instead of the file's own.

    Returns:
        A :class:`~seawall.sim.MetastableResult`: one series per strategy or policy.
    """
    if policies is not None:
        clients = dict(data.get("clients", {}))
        clients["policies"] = dict(policies)
        clients.setdefault("strategies", [])
        data = {**data, "clients": clients}
    plan = scenario_plan(data)
    srv = plan["server"]
    stall = plan["outage_kind"] == "stall"
    labels: list[str] = [*plan["strategies"], *plan["routes"]]
    jobs = []
    for label in labels:
        route = plan["routes"].get(label) if label not in plan["strategies"] else None
        for r in range(runs):
            jobs.append(
                _Params(
                    label,
                    r,
                    seed,
                    plan["duration"],
                    plan["rate"],
                    plan["peak"],
                    plan["window"][0],
                    plan["window"][0],  # no built-in spike: the rate comes from the points
                    srv["base_latency"],
                    srv["per_request"],
                    srv["network_mean"],
                    plan["timeout"],  # the named strategies' attempt timeout
                    plan["attempts"],
                    srv["shed_limit"],
                    plan["bin_width"],
                    srv["model"],
                    srv["concurrency"],
                    srv["queue_limit"],
                    "spike",
                    0.0,
                    0.0,
                    rate_points=tuple(plan["points"]),
                    even=plan["even"],
                    bursts=tuple(plan["bursts"]),
                    failure_probability=plan["probability"],
                    error_outages=() if stall else tuple(plan["outages"]),
                    stall_outages=tuple(plan["outages"]) if stall else (),
                    route=route,
                    client_timeout=plan["timeout"],
                )
            )
    start, end = plan["window"]
    series = run_series(jobs, labels, runs, start, end, workers=workers, progress=progress)
    return MetastableResult(
        series,
        plan["bin_width"],
        plan["duration"],
        plan["rate"],
        plan["peak"],
        start,
        end,
        runs,
        seed,
        srv["model"],
        plan["shape"],
        None,
    )
