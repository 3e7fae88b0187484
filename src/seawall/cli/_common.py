"""What every part of the ``seawall`` command shares: exit statuses, usage errors, safe
printing of text it did not write, and the consoles, rules and progress bars of its output."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

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


#: Each scenario's subparser, by name (filled by build_parser): its defaults for --from and
#: --grid.
_SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


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
