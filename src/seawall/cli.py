"""The ``seawall`` command: run the simulator's scenarios, the whole demo, or operate sagas.

``seawall demo`` runs every scenario in a short version, prints tables, and writes PNG plots and
a JSON summary to ``./seawall-report/``; it ends with a saga run's log. ``seawall sim NAME`` runs
one scenario with its own options (``seawall sim NAME --help``). Both need the ``sim`` extra:
``pip install seawall[sim]``. ``seawall saga list / show / retry / compensate / cancel --store
URL`` reads and operates a saga log (no extra needed). ``seawall web`` (or ``seawall demo
--web``) serves the interactive page on 127.0.0.1 (the ``web`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def _default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser (one subparser per registered scenario)."""
    from seawall.sim import SCENARIOS
    from seawall.sim._args import count, whole

    parser = argparse.ArgumentParser(
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
    demo.add_argument("--seed", type=whole, default=0, help="random seed (0)")
    demo.add_argument(
        "--workers", type=count, default=_default_workers(), help="processes to use (CPUs)"
    )
    demo.add_argument(
        "--web", action="store_true", help="serve the interactive page instead (see `seawall web`)"
    )
    _web_arguments(demo)
    web = commands.add_parser(
        "web",
        help="serve the interactive demo page on 127.0.0.1 and print its URL",
        description=(
            "Serve the demo page: backoff stepped attempt by attempt, retry storms with and "
            "without jitter, the simulator's experiments and a saga's log. Needs the 'web' "
            "extra: pip install 'seawall[web,sim]'."
        ),
    )
    _web_arguments(web)

    from seawall.saga._cli import add_arguments as add_saga_arguments

    saga = commands.add_parser(
        "saga",
        help="list, show, retry, compensate or cancel saga runs in a store (--store URL)",
        description="Read and operate a saga log. `seawall saga COMMAND --help` for each.",
    )
    add_saga_arguments(saga)

    sim = commands.add_parser(
        "sim",
        help="run one scenario: " + ", ".join(SCENARIOS),
        description="Run one scenario. `seawall sim NAME --help` lists its options.",
    )
    names = sim.add_subparsers(dest="scenario", metavar="NAME")
    names.required = True
    for name, scenario in SCENARIOS.items():
        sub = names.add_parser(
            name, help=scenario.summary, description=scenario.description or scenario.summary
        )
        scenario.add_arguments(sub)
        sub.add_argument("--seed", type=whole, default=0, help="random seed (0)")
        sub.add_argument(
            "--workers", type=count, default=_default_workers(), help="processes to use (CPUs)"
        )
        sub.add_argument(
            "--json", action="store_true", help="print the result as JSON instead of tables"
        )
        sub.add_argument(
            "--metrics",
            action="store_true",
            help="also print the production metrics (seawall_*_total) of the run; one process",
        )
        if scenario.plot is not None:
            sub.add_argument("--plot", metavar="PATH", help="write a PNG plot to PATH")
    return parser


def _web_arguments(parser: argparse.ArgumentParser) -> None:
    from seawall.sim._args import whole

    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=whole, default=8000, help="TCP port (8000; 0 picks a free one)"
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


def _consoles() -> tuple[Any, Any]:
    from rich.console import Console

    return Console(), Console(stderr=True)


def _run_sim(args: argparse.Namespace) -> int:
    from seawall.sim import SCENARIOS
    from seawall.sim._report import jsonable

    scenario = SCENARIOS[args.scenario]
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
        data = jsonable(result)
        if counters is not None:
            from seawall.sim._metrics import metrics_json

            data = {**data, "metrics": metrics_json(counters)} if isinstance(data, dict) else data
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        scenario.render(result, out)
        if counters is not None:
            out.rule("metrics: what production dashboards would show for this run")
            out.print(counters.format() or "(no series)", markup=False, soft_wrap=True)
    plot = getattr(args, "plot", None)
    if plot:
        scenario.plot(result, plot)  # type: ignore[misc]
        err.print(f"plot written to {plot}", markup=False)
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from seawall.sim import SCENARIOS
    from seawall.sim._report import jsonable, occ_markdown

    out, err = _consoles()
    directory = os.path.abspath(args.out)
    os.makedirs(directory, exist_ok=True)
    summary: dict[str, Any] = {"seed": args.seed, "scenarios": {}}
    written: list[str] = []
    started = time.monotonic()
    for name, scenario in SCENARIOS.items():
        t0 = time.monotonic()
        with _progress(err, f"demo: {name}") as progress:
            result = scenario.demo(args.seed, args.workers, progress)
        out.rule(f"[bold]{name}[/bold]: {scenario.summary}")
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
    out.rule("[bold]saga[/bold]: retries owned by a durable orchestrator (the log per step)")
    for title, text in tables:
        out.print(f"{title}:", markup=False)
        out.print(text, markup=False, soft_wrap=True)
        out.print()
    summary["saga"] = {"seconds": round(time.monotonic() - t0, 3), "run": saga_summary}
    path = os.path.join(directory, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    written.append(path)
    out.rule()
    out.print(f"demo finished in {time.monotonic() - started:.1f} s; report in {directory}/:")
    for p in written:
        out.print(f"  {os.path.basename(p)}", markup=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``seawall`` command; returns the exit status."""
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
            return _run_sim(args)
        except (ValueError, TypeError) as err:
            # Parameters the option types could not check alone (e.g. --cap below --base).
            parser.exit(EXIT_USAGE, f"seawall: error: {err}\n")
    except KeyboardInterrupt:
        sys.stderr.write("\nseawall: interrupted\n")
        return EXIT_INTERRUPTED
    return 0  # pragma: no cover - parser.exit raises


if __name__ == "__main__":
    sys.exit(main())
