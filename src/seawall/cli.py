"""The ``seawall`` command: run the simulator's scenarios, the whole demo, or operate sagas.

``seawall demo`` runs every scenario in a short version, prints tables, and writes PNG plots and
a JSON summary to ``./seawall-report/``; it ends with a saga run's log. ``seawall sim NAME`` runs
one scenario with its own options (``seawall sim NAME --help``). Both need the ``sim`` extra
(``pip install -e '.[sim]'`` in a checkout). ``seawall saga list / show / counts / retry /
compensate / cancel / signal --store URL`` reads and operates a saga log (no extra needed).
``seawall web`` (or ``seawall demo --web``) serves the interactive page on 127.0.0.1, and
``seawall web --store URL`` a saga store (the ``web`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

__all__ = ["main"]

EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_METASTABLE = 3  # seawall probe: a strategy did not recover on its own
EXIT_INCONCLUSIVE = 4  # seawall probe: the load generator fell behind; no verdict


class _Terminated(BaseException):
    """SIGTERM arrived: unwind like Ctrl-C, so that worker processes are stopped on the way."""


class _UsageError(Exception):
    """Bad input found by the command itself (an unwritable path): a message, exit 2."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _is_store_error(err: BaseException | None) -> bool:
    """Whether *err* is the database's own (SQLite's or PostgreSQL's driver)."""
    return type(err).__module__.partition(".")[0] in ("sqlite3", "psycopg")


def _store_refused(store: str, why: object) -> int:
    """The database refused (a read-only file, a full disk, a lost connection): the store's
    state, not a bug of seawall; one line, exit status 1."""
    sys.stderr.write(
        f"seawall: error: the saga store {_said(store)} refused the operation: {_said(str(why))}\n"
    )
    return EXIT_INTERNAL


def _said(err: BaseException | str) -> str:
    """What the command prints of an error or a text it did not write itself: without secrets
    (a store URL's password, a token) and without control characters (an escape sequence in
    an error message must not act on the terminal)."""
    from seawall._core.redact import escape_controls, redact_text

    return escape_controls(redact_text(str(err)))


def _writable_file(path: str, option: str) -> None:
    """Refuse, before a long run, a file that could not be written afterwards."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise _UsageError(f"{option} {path}: is a directory")
    if not os.path.isdir(directory):
        raise _UsageError(f"{option} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise _UsageError(f"{option} {path}: the directory {directory} is not writable")


def _default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


class _Parser(argparse.ArgumentParser):
    """argparse, with its messages (which repeat the words given) printed safely."""

    def error(self, message: str) -> NoReturn:
        super().error(_said(message))


_SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser (one subparser per registered scenario)."""
    from seawall.sim import SCENARIOS
    from seawall.sim import _args as options
    from seawall.sim._args import choice, count
    from seawall.sim._registry import load_entry_points
    from seawall.sim._trials import ENGINES

    load_entry_points()
    parser = _Parser(
        prog="seawall",
        description="seawall: safe retries. Run the simulator that shows what retry policies do.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="run every scenario (short versions); tables, PNG plots and JSON in ./seawall-report",
        description=(
            "Run storm and short versions of the other scenarios; print tables, and write PNG "
            "plots and summary.json to the output directory."
        ),
    )
    demo.add_argument("--out", default="seawall-report", help="output directory (seawall-report)")
    demo.add_argument("--seed", type=options.seed, default=0, help="random seed (0)")
    demo.add_argument(
        "--workers",
        type=options.workers,
        default=_default_workers(),
        help="processes to use (CPUs)",
    )
    demo.add_argument(
        "--web", action="store_true", help="serve the interactive page instead (see `seawall web`)"
    )
    _web_arguments(demo)
    web = commands.add_parser(
        "web",
        help="serve the interactive demo page (or, with --store, a saga store) on 127.0.0.1",
        description=(
            "Serve the demo page: backoff stepped attempt by attempt, retry storms with and "
            "without jitter, the simulator's experiments and a saga's log. With --store URL, "
            "serve that saga store instead: counts, stuck and overdue runs, each run's steps "
            "and history, and (with --allow-actions) retry, compensate and cancel. Needs the "
            "'web' extra: pip install 'seawall[web,sim]'."
        ),
    )
    _web_arguments(web)
    web.add_argument(
        "--store",
        help="serve this saga store instead (sqlite:///path.db or postgresql://...)",
    )
    web.add_argument(
        "--allow-actions",
        action="store_true",
        help="with --store: offer retry, compensate and cancel (read-only otherwise)",
    )
    web.add_argument(
        "--overdue-after",
        default="60s",
        metavar="DURATION",
        help="with --store: due work unclaimed this long makes a run overdue (60s)",
    )

    from seawall.sim._args import non_negative, positive
    from seawall.sim._scenarios import _policy_file, _scenario_file

    probe = commands.add_parser(
        "probe",
        help="load-test a real HTTP service with a scenario file; a metastability verdict",
        description=(
            "Send a scenario file's arrivals (pushed past saturation and back down) to URL in "
            "real time, through clients built from seawall's policies, and say whether "
            "goodput came back on its own after the trigger or stayed down (metastable). "
            "Loopback addresses only, unless --allow-host names your own hosts."
        ),
    )
    probe.add_argument("url", help="the service, e.g. http://127.0.0.1:8000/items")
    probe.add_argument(
        "--scenario", dest="spec", type=_scenario_file, required=True, metavar="FILE.toml"
    )
    probe.add_argument(
        "--policies",
        dest="policies_data",
        type=_policy_file,
        metavar="POLICIES.toml",
        help="the clients are the routes of this seawall policy file",
    )
    probe.add_argument(
        "--allow-host",
        dest="allow_hosts",
        action="append",
        default=[],
        metavar="HOST",
        help="a host of your own that may receive the load (repeatable)",
    )
    probe.add_argument("--max-requests", type=count, default=100_000, help="(100000)")
    probe.add_argument("--max-duration", type=positive, default=300.0, help="seconds (300)")
    probe.add_argument("--max-in-flight", type=count, default=1000, help="(1000)")
    probe.add_argument(
        "--max-lag",
        type=positive,
        default=0.2,
        help="seconds a request may start late; beyond it for 5%% of requests the probe "
        "refuses to judge (0.2)",
    )
    probe.add_argument(
        "--settle", type=non_negative, default=5.0, help="seconds between strategies (5)"
    )
    probe.add_argument("--seed", type=options.seed, default=0, help="random seed (0)")
    probe.add_argument("--json", action="store_true", help="print the result as JSON")

    from seawall.saga._cli import add_arguments as add_saga_arguments

    saga = commands.add_parser(
        "saga",
        help="list, show, retry, compensate, cancel or signal saga runs in a store (--store URL)",
        description="Read and operate a saga log. `seawall saga COMMAND --help` for each.",
    )
    add_saga_arguments(saga)

    sim = commands.add_parser(
        "sim",
        help="run one scenario: " + ", ".join(SCENARIOS),
        description="Run one scenario. `seawall sim NAME --help` lists its options.",
    )
    sim.add_argument(
        "--list", action="store_true", help="list the scenarios (built in and installed) and exit"
    )
    sim.add_argument(
        "--from",
        dest="from_file",
        metavar="RESULT.json",
        help="re-run exactly what a JSON result of `seawall sim ... --json` ran; prints JSON",
    )
    sim.add_argument(
        "--workers",
        type=options.workers,
        default=_default_workers(),
        help="processes to use (CPUs)",
    )
    names = sim.add_subparsers(dest="scenario", metavar="NAME")
    for name, scenario in SCENARIOS.items():
        sub = names.add_parser(
            name, help=scenario.summary, description=scenario.description or scenario.summary
        )
        _SUBPARSERS[name] = sub
        scenario.add_arguments(sub)
        sub.add_argument("--seed", type=options.seed, default=0, help="random seed (0)")
        sub.add_argument(
            "--workers",
            type=options.workers,
            default=_default_workers(),
            help="processes to use (CPUs)",
        )
        sub.add_argument(
            "--json", action="store_true", help="print the result as JSON instead of tables"
        )
        sub.add_argument(
            "--metrics",
            action="store_true",
            help="also print the production metrics (seawall_*_total) of the run; one process",
        )
        sub.add_argument(
            "--seeds",
            type=options.trials,
            metavar="N",
            help="run N seeds (--seed, --seed + 1, ...) in parallel: means with 95%% confidence "
            "intervals, and every trial in the JSON",
        )
        sub.add_argument(
            "--engine",
            type=choice(ENGINES),
            default="processes",
            help="where --seeds trials run: local processes, or a Dask cluster (processes)",
        )
        sub.add_argument(
            "--cluster",
            metavar="ADDRESS",
            help="with --engine dask: a scheduler's address (default: a local cluster)",
        )
        sub.add_argument(
            "--grid",
            nargs="+",
            metavar="KEY=V1,V2",
            help="run every combination of these values of the scenario's options (each cell "
            "over --seeds N seeds)",
        )
        if scenario.plot is not None:
            sub.add_argument("--plot", metavar="PATH", help="write a PNG plot to PATH")
    from seawall.sim._published import add_verify_arguments

    verify = names.add_parser(
        "verify",
        help="run every built-in experiment against the published figures it cites",
        description="Run the experiments that reproduce published figures over seeds and say, "
        "for each, whether seawall agrees within the stated tolerance or by how much it "
        "differs. Exit status 3 if a figure differs.",
    )
    add_verify_arguments(verify)
    verify.add_argument(
        "--workers",
        type=options.workers,
        default=_default_workers(),
        help="processes to use (CPUs)",
    )
    return parser


def _web_arguments(parser: argparse.ArgumentParser) -> None:
    from seawall.sim import _args as options

    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=options.port, default=8000, help="TCP port (8000; 0 picks a free one)"
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


@contextlib.contextmanager
def _progress(console: Any, label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr, shown only once a run has taken more than a second."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task(label, total=None)
    started = time.monotonic()
    shown = False

    def update(done: int, total: int) -> None:
        nonlocal shown
        if not shown and time.monotonic() - started > 1.0:
            bar.start()
            shown = True
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if shown:
            bar.stop()


# A pipe or a file has no width: tables keep their natural width there instead of rich's
# default of 80 columns, which cut names short ("retry_bud…"). Rules are drawn 100 wide.
_PIPE_WIDTH = 1000
_RULE_WIDTH = 100


def _consoles() -> tuple[Any, Any]:
    from rich.console import Console

    out = Console()
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out = Console(width=_PIPE_WIDTH)
    return out, Console(stderr=True)


def _rule(out: Any, title: str = "") -> None:
    """A horizontal rule with *title*: the terminal's width, or 100 columns in a pipe."""
    from rich.rule import Rule

    out.print(Rule(title), width=None if out.is_terminal else min(out.width, _RULE_WIDTH))


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``seawall`` command; returns the exit status."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C, at any point: while the command imports what it needs as well as in a run.
        sys.stderr.write("\nseawall: interrupted\n")
        return EXIT_INTERRUPTED
    except _Terminated:
        sys.stderr.write("seawall: terminated\n")
        return EXIT_TERMINATED


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    serves_page = bool(words) and (words[0] == "web" or (words[0] == "demo" and "--web" in words))
    if not words or not (words[0] == "saga" or serves_page):
        try:
            import matplotlib  # noqa: F401
            import rich  # noqa: F401
        except ImportError as err:
            sys.stderr.write(
                f"seawall: the simulator needs the 'sim' extra ({err.name} is missing): "
                "pip install 'seawall[sim]'\n"
            )
            return 1
    import signal
    import threading

    from seawall.sim._util import SimulationError

    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a `kill`, a CI timeout) unwinds like Ctrl-C: the pool's workers are stopped.
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        parser = build_parser()
        args = parser.parse_args(words)
        try:
            if args.command == "web" or (args.command == "demo" and args.web):
                return _run_web(args)
            if args.command == "demo":
                return _run_demo(args)
            if args.command == "saga":
                from seawall.saga._cli import main as saga_main

                return saga_main(args)
            if args.command == "probe":
                return _run_probe(args)
            if args.list:
                return _list_scenarios()
            if args.from_file:
                return _run_from(parser, args)
            if args.scenario is None:
                raise _UsageError(
                    "sim: the following arguments are required: NAME (or --list, or --from FILE)"
                )
            if args.scenario == "verify":
                from seawall.sim._published import run_verify_command

                return run_verify_command(args)
            return _run_sim(args)
        except SimulationError as err:
            # Not the user's input: the simulator itself failed while it ran.
            cause = err.__cause__
            where = ""
            if cause is not None and cause.__traceback__ is not None:
                import traceback

                last = traceback.extract_tb(cause.__traceback__)[-1]
                where = f" (at {os.path.basename(last.filename)}:{last.lineno})"
            sys.stderr.write(f"seawall: internal error{where}: {_said(err)}; please report it\n")
            return EXIT_INTERNAL
        except (ValueError, TypeError, _UsageError) as err:
            # Parameters the option types could not check alone (e.g. --cap below --base).
            parser.exit(EXIT_USAGE, f"seawall: error: {_said(err)}\n")
        except ConnectionError as err:
            # A saga store that cannot be reached: not a file to write, not a bug of seawall.
            sys.stderr.write(f"seawall: error: {_said(err)}\n")
            return EXIT_INTERNAL
        except OSError as err:
            if args.command == "saga" and _is_store_error(err.__cause__):
                # The store turned the database's refusal into the path and its cause.
                return _store_refused(args.store, err.strerror or err)
            # Writing a result (a plot, the report) failed after the run: the path is the cause.
            name = f" {_said(err.filename)}" if err.filename else ""
            why = _said(err.strerror or err)
            parser.exit(EXIT_USAGE, f"seawall: error: cannot write{name}: {why}\n")
        except Exception as err:
            if args.command == "saga" and _is_store_error(err):
                return _store_refused(args.store, f"{type(err).__name__}: {err}")
            if isinstance(err, ImportError) and isinstance(err.__cause__, ImportError):
                # A store's driver is an extra (psycopg for postgresql://): not installed is
                # not a bug of seawall, and the message names the extra to install.
                sys.stderr.write(f"seawall: error: {_said(err)}\n")
                return EXIT_INTERNAL
            sys.stderr.write(
                f"seawall: internal error: {type(err).__name__}: {_said(err)}; please report it\n"
            )
            return EXIT_INTERNAL
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0  # pragma: no cover - parser.exit raises


if __name__ == "__main__":
    sys.exit(main())
