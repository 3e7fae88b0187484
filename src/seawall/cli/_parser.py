"""The ``seawall`` command's arguments: one subparser per scenario, and the demo, web,
probe and saga commands."""

from __future__ import annotations

import argparse

from seawall.cli._common import _SUBPARSERS, _default_workers, _Parser


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
    _seed_argument(demo)
    _workers_argument(demo)
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
    _seed_argument(probe)
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
    _workers_argument(sim)
    names = sim.add_subparsers(dest="scenario", metavar="NAME")
    for name, scenario in SCENARIOS.items():
        sub = names.add_parser(
            name, help=scenario.summary, description=scenario.description or scenario.summary
        )
        _SUBPARSERS[name] = sub
        scenario.add_arguments(sub)
        _seed_argument(sub)
        _workers_argument(sub)
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
    _workers_argument(verify)
    return parser


def _seed_argument(parser: argparse.ArgumentParser) -> None:
    from seawall.sim import _args as options

    parser.add_argument("--seed", type=options.seed, default=0, help="random seed (0)")


def _workers_argument(parser: argparse.ArgumentParser) -> None:
    from seawall.sim import _args as options

    parser.add_argument(
        "--workers",
        type=options.workers,
        default=_default_workers(),
        help="processes to use (CPUs)",
    )


def _web_arguments(parser: argparse.ArgumentParser) -> None:
    from seawall.sim import _args as options

    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument(
        "--port", type=options.port, default=8000, help="TCP port (8000; 0 picks a free one)"
    )
