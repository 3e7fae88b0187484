"""``seawall saga list / show / retry / compensate / cancel / signal --store URL``, and the
tables the command and the demo print.

The command needs no saga definitions: it reads the log, and its operations change rows that
the workers (which have the definitions) then act on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from seawall._core.redact import escape_controls
from seawall.saga._model import HistoryEntry, Run, Status, StepRecord
from seawall.saga._operations import operate
from seawall.saga._rows import to_history, to_run
from seawall.saga._signals import send_signal
from seawall.saga._store import Store
from seawall.saga._stores import open_store

__all__ = ["add_arguments", "format_history", "format_run", "format_runs", "main", "run_json"]

STORE_ENV = "SEAWALL_SAGA_STORE"


def _when(value: datetime.datetime | None) -> str:
    if value is None:
        return "-"
    return (
        value.astimezone(datetime.timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], limit: int = 60) -> str:
    # Cells hold what services and users wrote (error messages, names): escaped, so that none
    # can act on the terminal or forge a line of the table.
    shown = [[escape_controls(c) for c in row] for row in rows]
    cut = [[c if len(c) <= limit else c[: limit - 3] + "..." for c in row] for row in shown]
    widths = [
        max(len(h), *(len(r[i]) for r in cut)) if cut else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cut]
    return "\n".join(lines)


def _step_row(step: StepRecord) -> list[str]:
    attempts = str(step.attempt_count)
    if step.compensation_attempt_count:
        attempts += f" (+{step.compensation_attempt_count} compensation)"
    return [
        step.name,
        step.status.value,
        attempts,
        _when(step.next_retry_at),
        step.last_error or "-",
    ]


def format_run(run: Run) -> str:
    """A run as text: a header line, the reason if any, and a table of its steps."""
    head = (
        f"run {escape_controls(run.run_id)}  saga {escape_controls(run.saga)}  "
        f"status {escape_controls(run.status.value)}  "
        f"created {_when(run.created_at)}  updated {_when(run.updated_at)}"
    )
    lines = [head]
    if run.reason:
        lines.append(f"reason: {escape_controls(run.reason)}")
    if run.deadline is not None:
        lines.append(f"deadline: {_when(run.deadline)}")
    lines.append(
        _table(
            ["step", "status", "attemptCount", "nextRetryAt", "lastError"],
            [_step_row(s) for s in run.steps],
        )
    )
    return "\n".join(lines)


def _current(run: Run) -> StepRecord | None:
    for step in run.steps:
        if step.status in (Status.RUNNING, Status.RETRYING, Status.COMPENSATING, Status.FAILED):
            return step
        if step.status is Status.WAITING:
            return step
    return next((s for s in run.steps if s.status is Status.PENDING), None)


def format_runs(runs: Sequence[Run]) -> str:
    """Runs as one table, with the step each is at."""
    rows = []
    for run in runs:
        step = _current(run)
        rows.append(
            [
                run.run_id,
                run.saga,
                run.status.value,
                step.name if step else "-",
                str(step.attempt_count) if step else "-",
                _when(step.next_retry_at) if step else "-",
                (step.last_error or "-") if step else "-",
                _when(run.updated_at),
            ]
        )
    return _table(
        ["run", "saga", "status", "step", "attemptCount", "nextRetryAt", "lastError", "updated"],
        rows,
        limit=48,
    )


def format_history(history: Sequence[HistoryEntry]) -> str:
    rows = []
    for h in history:
        detail = ", ".join(f"{k}={v}" for k, v in h.detail.items())
        rows.append(
            [
                _when(h.at),
                h.event,
                h.step or "-",
                h.phase or "-",
                "-" if h.attempt is None else str(h.attempt),
                "-" if h.delay is None else f"{h.delay:.3f}",
                h.error or "-",
                detail or "-",
            ]
        )
    return _table(["at", "event", "step", "phase", "attempt", "delay", "error", "detail"], rows)


def _iso(value: datetime.datetime | None) -> str | None:
    return None if value is None else _when(value)


def run_json(run: Run, history: Sequence[HistoryEntry] | None = None) -> dict[str, Any]:
    """A run as JSON data (camelCase keys, times in ISO 8601 UTC)."""
    data: dict[str, Any] = {
        "runId": run.run_id,
        "saga": run.saga,
        "status": run.status.value,
        "input": run.input,
        "reason": run.reason,
        "deadline": _iso(run.deadline),
        "createdAt": _iso(run.created_at),
        "updatedAt": _iso(run.updated_at),
        "steps": [
            {
                "name": s.name,
                "status": s.status.value,
                "attemptCount": s.attempt_count,
                "nextRetryAt": _iso(s.next_retry_at),
                "lastError": s.last_error,
                "result": s.result,
                "compensationAttemptCount": s.compensation_attempt_count,
                "idempotencyKey": s.idempotency_key,
                "startedAt": _iso(s.started_at),
                "finishedAt": _iso(s.finished_at),
            }
            for s in run.steps
        ],
    }
    if history is not None:
        data["history"] = [
            {
                "at": _iso(h.at),
                "event": h.event,
                "step": h.step,
                "phase": h.phase,
                "attempt": h.attempt,
                "delay": h.delay,
                "error": h.error,
                "detail": dict(h.detail),
            }
            for h in history
        ]
    return data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``saga`` subcommands, on *parser*."""
    commands = parser.add_subparsers(dest="saga_command", metavar="COMMAND")
    commands.required = True

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--store",
            default=os.environ.get(STORE_ENV),
            help=f"the store's URL: sqlite:///path.db or postgresql://... (env {STORE_ENV})",
        )
        sub.add_argument("--json", action="store_true", help="print JSON instead of a table")

    listing = commands.add_parser("list", help="the latest runs, with the step each is at")
    common(listing)
    listing.add_argument("--status", type=lambda v: Status(v.upper()), help="only this status")
    listing.add_argument("--saga", help="only runs of this saga")
    listing.add_argument("--limit", type=int, default=50, help="at most this many runs (50)")
    show = commands.add_parser("show", help="one run: every step, and its history")
    common(show)
    show.add_argument("run_id")
    show.add_argument("--history", action="store_true", help="also print the run's history")
    for name, help_text in (
        ("retry", "make the run's waiting attempt due now, or retry what gave up"),
        ("compensate", "stop the run and compensate its finished steps"),
        ("cancel", "stop the run without compensating (FAILED)"),
    ):
        sub = commands.add_parser(name, help=help_text)
        common(sub)
        sub.add_argument("run_id")
    signal = commands.add_parser(
        "signal",
        help="send a signal to a run (its saga.WaitFor of that name); a duplicate changes nothing",
    )
    common(signal)
    signal.add_argument("run_id")
    signal.add_argument("name", help="the signal's name (the WaitFor step's)")
    signal.add_argument("--data", help="the signal's data, as JSON (default: null)")


def main(args: argparse.Namespace) -> int:
    """Run a ``seawall saga`` command; returns the exit status."""
    if not args.store:
        raise ValueError(f"--store: give the store's URL (or set {STORE_ENV})")
    store = open_store(args.store)
    try:
        return _dispatch(store, args)
    finally:
        store.close()


def _dispatch(store: Store, args: argparse.Namespace) -> int:
    out = sys.stdout
    command = args.saga_command
    if command == "list":
        if args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        status = None if args.status is None else args.status.value
        runs = [to_run(item) for item in store.runs(status, args.saga, args.limit)]
        if args.json:
            out.write(json.dumps([run_json(r) for r in runs], indent=2) + "\n")
        else:
            out.write((format_runs(runs) if runs else "no runs") + "\n")
        return 0
    kept = None
    if command == "signal":
        try:
            data = None if args.data is None else json.loads(args.data)
        except (ValueError, RecursionError) as err:
            raise ValueError(f"--data is not JSON: {err}") from None
        try:
            kept = send_signal(store, args.run_id, args.name, data)
        except KeyError:
            sys.stderr.write(
                f"seawall saga: no run {escape_controls(args.run_id)!r} in the store\n"
            )
            return 1
        if not args.json:
            out.write(
                f"signal {escape_controls(args.name)!r}: "
                + ("kept\n" if kept else "a duplicate, ignored (the first one is kept)\n")
            )
    if command in ("retry", "compensate", "cancel"):
        operation = "retry_now" if command == "retry" else command
        try:
            done = operate(store, args.run_id, operation, time.time())
        except KeyError:
            sys.stderr.write(f"seawall saga: no run {args.run_id!r} in the store\n")
            return 1
        if not args.json:
            out.write(
                f"{command}: {'applied' if done == 'applied' else 'requested from its worker'}\n"
            )
    loaded = store.load(args.run_id)
    if loaded is None:
        sys.stderr.write(f"seawall saga: no run {args.run_id!r} in the store\n")
        return 1
    run = to_run(loaded)
    history = to_history(store.history(args.run_id))
    if args.json:
        data = run_json(run, history)
        if kept is not None:
            data["signal"] = {"name": args.name, "kept": kept}
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        out.write(format_run(run) + "\n")
        if getattr(args, "history", False):
            out.write("\n" + format_history(history) + "\n")
    return 0
