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

import os
import sys
from collections.abc import Sequence

from seawall.cli._common import _SUBPARSERS as _SUBPARSERS  # each scenario's options
from seawall.cli._common import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    _is_store_error,
    _said,
    _store_refused,
    _Terminated,
    _UsageError,
)
from seawall.cli._parser import build_parser
from seawall.cli._runs import (
    _list_scenarios,
    _run_demo,
    _run_from,
    _run_probe,
    _run_sim,
    _run_web,
)

__all__ = ["main"]


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


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
