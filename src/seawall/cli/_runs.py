"""What ``seawall sim``, ``seawall demo``, ``seawall probe`` and ``seawall web`` do once
their arguments are read."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from seawall.cli._common import (
    _SUBPARSERS,
    EXIT_INCONCLUSIVE,
    EXIT_METASTABLE,
    _consoles,
    _progress,
    _rule,
    _said,
    _UsageError,
    _writable_file,
)


def _run_web(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        sys.stderr.write(
            f"seawall: the page needs the 'web' extra ({err.name} is missing): "
            "pip install 'seawall[web,sim]'\n"
        )
        return 1
    store = getattr(args, "store", None)
    if store:
        from seawall.saga._operations import parse_duration
        from seawall.web import serve_store

        serve_store(
            store,
            args.host,
            args.port,
            allow_actions=args.allow_actions,
            overdue_after=parse_duration(args.overdue_after, "--overdue-after"),
        )
        return 0
    if getattr(args, "allow_actions", False):
        raise ValueError("--allow-actions: give the store to act on with --store URL")
    from seawall.web import serve

    serve(args.host, args.port)
    return 0


def _run_probe(args: argparse.Namespace) -> int:
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise _UsageError("probe needs httpx: pip install 'seawall[httpx]'") from None
    from seawall.sim._probe import probe, render_probe
    from seawall.sim._report import jsonable

    result = probe(
        args.url,
        args.spec,
        policies=args.policies_data,
        allow_hosts=args.allow_hosts,
        max_requests=args.max_requests,
        max_duration=args.max_duration,
        max_in_flight=args.max_in_flight,
        max_lag=args.max_lag,
        settle=args.settle,
        seed=args.seed,
    )
    if args.json:
        sys.stdout.write(json.dumps(jsonable(result), indent=2) + "\n")
    else:
        out, _err = _consoles()
        render_probe(result, out)
    # The exit status carries the verdict, for a CI job: 4 if the probe could not judge (its
    # load generator fell behind), else 3 if any strategy stayed down.
    if any(s.verdict == "inconclusive" for s in result.series):
        return EXIT_INCONCLUSIVE
    return EXIT_METASTABLE if any(s.verdict != "recovered" for s in result.series) else 0


def _list_scenarios() -> int:
    from seawall.sim._registry import BROKEN, SCENARIOS

    width = max(len(n) for n in SCENARIOS)
    for name, scenario in SCENARIOS.items():
        sys.stdout.write(f"{_said(name):<{width}}  {_said(scenario.summary)}\n")
    for name, error in BROKEN:
        sys.stderr.write(
            f"seawall: the installed scenario {name!r} failed to load: {_said(error)}\n"
        )
    return 0


def _run_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``seawall sim --from FILE``: the same scenario, parameters and seeds as FILE."""
    from seawall.sim._grid import run_grid
    from seawall.sim._registry import SCENARIOS
    from seawall.sim._trials import run_trials

    recipe = args.from_file.endswith(".toml")  # a scenario file: a run record, no results yet
    try:
        if recipe:
            from seawall._policy.config import _decode, _read

            doc = dict(_decode(_read(args.from_file), args.from_file))
            run = doc.get("run")
            if isinstance(run, dict):
                run = {"parameters": {}, "seeds": [0], **run}
                doc = {**doc, "run": run}
        else:
            with open(args.from_file, encoding="utf-8") as f:
                doc = json.load(f)
    except OSError as error:
        raise _UsageError(f"--from {args.from_file}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        raise _UsageError(f"--from {args.from_file}: not JSON ({error})") from None
    except ValueError as error:  # invalid TOML (seawall's ConfigError is a ValueError)
        raise _UsageError(f"--from {error}") from None
    run = doc.get("run") if isinstance(doc, dict) else None
    if not isinstance(run, dict) or not isinstance(run.get("parameters"), dict):
        raise _UsageError(
            f"--from {args.from_file}: no 'run' record (write it with `seawall sim NAME --json`)"
        )
    name = run.get("scenario")
    if name not in SCENARIOS:
        raise _UsageError(f"--from {args.from_file}: unknown scenario {name!r}")
    seeds = run.get("seeds")
    if recipe and isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= 1:
        seeds = list(range(seeds))  # a scenario file may give a number of seeds
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    ):
        raise _UsageError(f"--from {args.from_file}: 'seeds' must be a list of whole numbers")
    # Defaults first (a file from an older version may lack a newer option), then the file's.
    params = {
        a.dest: a.default
        for a in _SUBPARSERS[name]._actions
        if a.dest != "help" and a.default is not argparse.SUPPRESS
    }
    known = set(params)
    for key, value in run["parameters"].items():
        if key not in known:
            raise _UsageError(f"--from {args.from_file}: unknown parameter {key!r} for {name}")
        params[key] = value
    from seawall.sim._trials import parameters_of

    params = parameters_of(argparse.Namespace(**params))
    grid = run.get("grid")
    if grid is not None:
        if not isinstance(grid, dict) or not all(
            k in known and isinstance(v, list) and v for k, v in grid.items()
        ):
            raise _UsageError(f"--from {args.from_file}: 'grid' must map options to lists")
        for key in grid:
            params.pop(key, None)
    _out, err = _consoles()
    with _progress(err, f"seawall sim {name}") as progress:
        if grid is not None:
            data = run_grid(name, params, grid, seeds, workers=args.workers, progress=progress)
        elif "trials" in doc or (recipe and len(seeds) > 1):
            data = run_trials(name, params, seeds, workers=args.workers, progress=progress)
        else:
            data = _single(name, params, seeds[0], progress)
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    return 0


def _single(name: str, params: dict[str, Any], seed: int, progress: Any) -> dict[str, Any]:
    from seawall import __version__
    from seawall.sim._registry import SCENARIOS
    from seawall.sim._report import jsonable

    args = argparse.Namespace(**params, seed=seed, workers=1)
    data: dict[str, Any] = _with_run(
        jsonable(SCENARIOS[name].run(args, progress)), name, params, seed, __version__
    )
    return data


def _with_run(data: Any, name: str, params: dict[str, Any], seed: int, version: str) -> Any:
    if not isinstance(data, dict):
        return data
    run = {"scenario": name, "parameters": params, "seeds": [seed], "seawall_version": version}
    return {**data, "run": run}


def _run_seeds(args: argparse.Namespace) -> int:
    from seawall.sim._trials import parameters_of, run_trials

    if getattr(args, "metrics", False):
        raise ValueError("--metrics counts one run in one process: it does not go with --seeds")
    if getattr(args, "plot", None):
        raise ValueError("--plot draws one run: it does not go with --seeds")
    out, err = _consoles()
    params = parameters_of(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    with _progress(err, f"seawall sim {args.scenario} x {args.seeds} seeds") as progress:
        doc = run_trials(
            args.scenario,
            params,
            seeds,
            workers=args.workers,
            engine=args.engine,
            cluster=args.cluster,
            progress=progress,
        )
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    from rich.table import Table

    table = Table(
        title=f"{args.scenario}: {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), mean and 95% CI"
    )
    for column in ("metric", "mean", "95% CI", "trials"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key, s in doc["summary"].items():
        mean = "-" if s["mean"] is None else f"{s['mean']:.4g}"
        if s.get("method") == "wilson":  # a share of runs: say how many
            mean += f" ({s['successes']} of {s['trials']} runs)"
        ci = "-" if s["ci95"] is None else f"[{s['ci95'][0]:.4g}, {s['ci95'][1]:.4g}]"
        table.add_row(key, mean, ci, str(s["n"]))
    out.print(table)
    return 0


def _run_sim(args: argparse.Namespace) -> int:
    from seawall import __version__
    from seawall.sim import SCENARIOS
    from seawall.sim._report import jsonable
    from seawall.sim._trials import parameters_of

    if getattr(args, "grid", None):
        from seawall.sim._grid import run_grid_command

        return run_grid_command(args, _SUBPARSERS[args.scenario])
    if args.seeds is not None:
        return _run_seeds(args)
    scenario = SCENARIOS[args.scenario]
    plot = getattr(args, "plot", None)
    if plot:
        _writable_file(plot, "--plot")
    out, err = _consoles()
    counters = None
    with contextlib.ExitStack() as stack:
        if getattr(args, "metrics", False):
            from seawall.instrumentation import Counters
            from seawall.sim._metrics import collect_metrics

            # The counters live in this process: worker processes would keep their own.
            args.workers = 1
            counters = stack.enter_context(collect_metrics(Counters()))
        with _progress(err, f"seawall sim {scenario.name}") as progress:
            result = scenario.run(args, progress)
    if args.json:
        data = _with_run(
            jsonable(result), scenario.name, parameters_of(args), args.seed, __version__
        )
        if counters is not None:
            from seawall.sim._metrics import metrics_json

            data = {**data, "metrics": metrics_json(counters)} if isinstance(data, dict) else data
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        scenario.render(result, out)
        if counters is not None:
            _rule(out, "metrics: what production dashboards would show for this run")
            out.print(counters.format() or "(no series)", markup=False, soft_wrap=True)
    if plot:
        scenario.plot(result, plot)  # type: ignore[misc]
        err.print(f"plot written to {plot}", markup=False)
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from seawall.sim import SCENARIOS
    from seawall.sim._report import jsonable, occ_markdown

    out, err = _consoles()
    directory = os.path.abspath(args.out)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        why = error.strerror or error
        raise _UsageError(f"--out {args.out}: cannot create the directory: {why}") from None
    if not os.access(directory, os.W_OK):
        raise _UsageError(f"--out {args.out}: the directory is not writable")
    summary: dict[str, Any] = {"seed": args.seed, "scenarios": {}}
    written: list[str] = []
    started = time.monotonic()
    for name, scenario in SCENARIOS.items():
        t0 = time.monotonic()
        with _progress(err, f"demo: {name}") as progress:
            result = scenario.demo(args.seed, args.workers, progress)
        _rule(out, f"[bold]{name}[/bold]: {scenario.summary}")
        scenario.render(result, out)
        if scenario.plot is not None:
            path = os.path.join(directory, f"{name}.png")
            scenario.plot(result, path)
            written.append(path)
        summary["scenarios"][name] = {
            "seconds": round(time.monotonic() - t0, 3),
            "result": jsonable(result),
        }
        if name == "occ":
            table = os.path.join(directory, "occ.md")
            with open(table, "w", encoding="utf-8") as f:
                f.write(occ_markdown(result) + "\n")
            written.append(table)
    from seawall.saga._demo import demo as saga_demo

    t0 = time.monotonic()
    tables, saga_summary = saga_demo(args.seed)
    _rule(out, "[bold]saga[/bold]: retries owned by a durable orchestrator (the log per step)")
    for title, text in tables:
        out.print(f"{title}:", markup=False)
        out.print(text, markup=False, soft_wrap=True)
        out.print()
    summary["saga"] = {"seconds": round(time.monotonic() - t0, 3), "run": saga_summary}
    path = os.path.join(directory, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    written.append(path)
    _rule(out)
    out.print(f"demo finished in {time.monotonic() - started:.1f} s; report in {directory}/:")
    for p in written:
        out.print(f"  {os.path.basename(p)}", markup=False)
    return 0
