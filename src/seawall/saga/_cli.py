"""``seawall saga list / show / counts / retry / compensate / cancel / signal --store URL``, and the
tables the command and the demo print.

The command needs no saga definitions: it reads the log, and its operations change rows that
the workers (which have the definitions) then act on. It never creates or migrates a store (a
mistyped path is an error, not an empty store), and everything it prints of the store is
escaped: what services and users wrote there is untrusted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final

from seawall._core.redact import escape_controls, redact_text
from seawall.saga._model import HistoryEntry, Run, Status, StepRecord, utc
from seawall.saga._operations import (
    OVERDUE_AFTER,
    is_overdue,
    lease_of,
    operate,
    parse_duration,
    run_status,
)
from seawall.saga._rows import Loaded, to_history, to_run
from seawall.saga._signals import send_signal
from seawall.saga._store import Store
from seawall.saga._stores import open_store

__all__ = [
    "add_arguments",
    "format_counts",
    "format_history",
    "format_lease",
    "format_run",
    "format_runs",
    "main",
    "run_json",
    "run_state",
]

#: The most runs one bulk operation acts on (run it again for more).
BULK_LIMIT: Final = 10_000
#: The most runs ``list --limit`` prints (each is read whole into memory).
LIST_LIMIT: Final = 1_000_000

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


def format_run(run: Run, notes: Sequence[str] = ()) -> str:
    """A run as text: a header line, the reason if any, the *notes* lines, and a table of its
    steps."""
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
    lines += notes
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


def run_state(loaded: Loaded, now: float, overdue_after: float) -> dict[str, Any]:
    """What an operator reads of a run's scheduling at the store's time *now*, as JSON data:
    ``lease`` (``owner``, ``expiresAt``, ``expired``; ``None`` when no worker holds the run),
    ``overdue`` and ``storeNow``."""
    lease = lease_of(loaded.run, now)
    return {
        "lease": None
        if lease is None
        else {
            "owner": lease.owner,
            "expiresAt": _iso(utc(lease.expires_at)),
            "expired": lease.expired,
        },
        "overdue": is_overdue(loaded.run, now, overdue_after),
        "storeNow": _iso(utc(now)),
    }


def format_lease(loaded: Loaded, now: float, overdue_after: float) -> str:
    """The line of ``seawall saga show`` on the run's lease, on the store's clock."""
    lease = lease_of(loaded.run, now)
    if lease is None:
        text = "lease: none"
    else:
        left = lease.expires_at - now
        when = f"expired {-left:.1f} s ago" if lease.expired else f"in {left:.1f} s"
        text = (
            f"lease: {escape_controls(lease.owner)} until {_when(utc(lease.expires_at))} ({when})"
        )
    overdue = is_overdue(loaded.run, now, overdue_after)
    return f"{text}  overdue {'yes' if overdue else 'no'}  store time {_when(utc(now))}"


def format_counts(counts: dict[str, dict[str, int]]) -> str:
    """Runs by saga and status, with each saga's overdue runs, as one table."""
    rows = []
    for saga in sorted(counts):
        by = counts[saga]
        overdue = by.get("overdue", 0)
        statuses = sorted(k for k in by if k != "overdue")
        for k, status in enumerate(statuses):
            rows.append([saga, status, str(by[status]), str(overdue) if k == 0 else ""])
    return _table(["saga", "status", "runs", "overdue"], rows)


def _duration(name: str) -> Any:
    def parse(text: str) -> float:
        try:
            return parse_duration(text, name)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def _limit(text: str) -> int:
    try:
        value: int | None = int(text)
    except ValueError:  # not a number, or one of more than 4300 digits
        value = None
    if value is None or not 1 <= value <= LIST_LIMIT:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(
            f"must be a whole number >= 1 and <= {LIST_LIMIT}, got {shown!r}"
        )
    return value


def _status(text: str) -> Status:
    try:
        return run_status(text, "--status")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
        sub.add_argument(
            "--overdue-after",
            type=_duration("--overdue-after"),
            default=OVERDUE_AFTER,
            metavar="DURATION",
            help="due work unclaimed this long makes a run overdue (60s); an expired lease "
            "makes it overdue at once",
        )

    def filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--status", type=_status, help="only runs in this status")
        sub.add_argument("--saga", help="only runs of this saga")
        sub.add_argument(
            "--stuck",
            action="store_true",
            help="only runs waiting for a person or a worker: NEEDS_ATTENTION, or overdue",
        )
        sub.add_argument(
            "--older-than",
            type=_duration("--older-than"),
            metavar="DURATION",
            help="only runs unchanged for at least this long (90s, 5m, 2h, 1d)",
        )
        sub.add_argument(
            "--error-contains",
            metavar="TEXT",
            help="only runs whose reason or a step's last error contains TEXT (any case)",
        )

    listing = commands.add_parser("list", help="the latest runs, with the step each is at")
    common(listing)
    filters(listing)
    listing.add_argument(
        "--limit", type=_limit, default=50, help=f"at most this many runs (50; <= {LIST_LIMIT})"
    )
    show = commands.add_parser(
        "show", help="one run: every step, its lease, and (--history) its history"
    )
    common(show)
    show.add_argument("run_id")
    show.add_argument("--history", action="store_true", help="also print the run's history")
    counts = commands.add_parser("counts", help="runs by saga and status, and overdue runs")
    common(counts)
    for name, help_text in (
        ("retry", "make the run's waiting attempt due now, or retry what gave up"),
        ("compensate", "stop the run and compensate its finished steps"),
        ("cancel", "stop the run without compensating (FAILED)"),
    ):
        sub = commands.add_parser(
            name,
            help=f"{help_text}; one run, or every run the filters match",
            description=(
                f"{help_text[0].upper()}{help_text[1:]}. Give a RUN_ID, or filters to act on "
                "every run they match: the command prints how many and asks before it acts "
                "(--yes skips the question; without a terminal, --yes is required)."
            ),
        )
        common(sub)
        sub.add_argument("run_id", nargs="?", help="the run (or give filters)")
        filters(sub)
        sub.add_argument(
            "--force",
            action="store_true",
            help="break the lease of the worker holding the run (one known to be dead): the "
            "run can be claimed at once, and the old worker records nothing",
        )
        sub.add_argument("--yes", action="store_true", help="act on the runs without asking")
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
    # An operator's command never creates or migrates a store: the workers do.
    store = open_store(args.store, create=False)
    try:
        return _dispatch(store, args)
    finally:
        store.close()


def _filtered(args: argparse.Namespace) -> bool:
    return bool(
        args.status is not None
        or args.saga is not None
        or args.stuck
        or args.older_than is not None
        or args.error_contains
    )


def _find(store: Store, args: argparse.Namespace, limit: int) -> tuple[float, list[Loaded]]:
    now = store.now()
    found = store.find_runs(
        now,
        status=None if args.status is None else args.status.value,
        saga=args.saga,
        stuck_after=args.overdue_after if args.stuck else None,
        older_than=args.older_than,
        error_contains=args.error_contains or None,
        limit=limit,
    )
    return now, found


def _no_run(store: Store, run_id: str) -> int:
    sys.stderr.write(
        f"seawall saga: no run {escape_controls(repr(run_id))} in "
        f"{escape_controls(store.redacted())}\n"
    )
    return 1


def _dispatch(store: Store, args: argparse.Namespace) -> int:
    out = sys.stdout
    command = args.saga_command
    if command == "list":
        now, found = _find(store, args, args.limit)
        runs = [to_run(item) for item in found]
        if args.json:
            listed = [
                {**run_json(run), **run_state(item, now, args.overdue_after)}
                for run, item in zip(runs, found, strict=True)
            ]
            out.write(json.dumps(listed, indent=2) + "\n")
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
    if command == "counts":
        counts = store.counts_by_saga(store.now(), args.overdue_after)
        if args.json:
            out.write(json.dumps(counts, indent=2, sort_keys=True) + "\n")
        else:
            out.write((format_counts(counts) if counts else "no runs") + "\n")
        return 0
    if command in ("retry", "compensate", "cancel"):
        operation = "retry_now" if command == "retry" else command
        if args.run_id is None:
            if not _filtered(args):
                raise ValueError(
                    f"{command}: give a RUN_ID, or filters (--status, --saga, --stuck, "
                    "--older-than, --error-contains) for every run they match"
                )
            return _bulk(store, args, command, operation)
        if _filtered(args):
            raise ValueError(f"{command}: give a RUN_ID or filters, not both")
        try:
            done = operate(store, args.run_id, operation, force=args.force)
        except KeyError:
            return _no_run(store, args.run_id)
        if not args.json:
            out.write(
                f"{command}: {'applied' if done == 'applied' else 'requested from its worker'}\n"
            )
    loaded = store.load(args.run_id)
    if loaded is None:
        return _no_run(store, args.run_id)
    now = store.now()
    run = to_run(loaded)
    history = to_history(store.history(args.run_id))
    if args.json:
        one = {**run_json(run, history), **run_state(loaded, now, args.overdue_after)}
        if kept is not None:
            one["signal"] = {"name": args.name, "kept": kept}
        out.write(json.dumps(one, indent=2) + "\n")
    else:
        out.write(format_run(run, [format_lease(loaded, now, args.overdue_after)]) + "\n")
        if getattr(args, "history", False):
            out.write("\n" + format_history(history) + "\n")
    return 0


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def _confirm(question: str) -> bool:
    """Ask on the terminal; anything but y or yes is a no."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _bulk(store: Store, args: argparse.Namespace, command: str, operation: str) -> int:
    out = sys.stdout
    ids = store.find_run_ids(
        store.now(),
        status=None if args.status is None else args.status.value,
        saga=args.saga,
        stuck_after=args.overdue_after if args.stuck else None,
        older_than=args.older_than,
        error_contains=args.error_contains or None,
        limit=BULK_LIMIT,
    )
    more = (
        " (the most one command acts on: run it again for the rest)"
        if (len(ids) == BULK_LIMIT)
        else ""
    )
    forced = " --force" if args.force else ""
    if not ids:
        if args.json:
            out.write(json.dumps({"matched": 0, "applied": 0, "requested": 0, "skipped": []}))
            out.write("\n")
        else:
            out.write(f"{command}: no run matches\n")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(
                f"{command}: {_runs(len(ids))} match; without a terminal to confirm on, "
                "give --yes to act on them"
            )
        shown = ", ".join(escape_controls(r) for r in ids[:5]) + (", ..." if len(ids) > 5 else "")
        if not _confirm(f"{command}{forced} {_runs(len(ids))}{more} ({shown})?"):
            sys.stderr.write(f"{command}: nothing done\n")
            return 1
    applied = requested = 0
    skipped: list[dict[str, str]] = []
    for run_id in ids:
        try:
            done = operate(store, run_id, operation, force=args.force)
        except (KeyError, ValueError) as err:
            # It changed since it was counted (finished, or taken by another operator).
            skipped.append({"runId": run_id, "why": redact_text(str(err).strip("'\""))})
            continue
        if done == "applied":
            applied += 1
        else:
            requested += 1
    if args.json:
        summary = {
            "matched": len(ids),
            "applied": applied,
            "requested": requested,
            "skipped": skipped,
        }
        out.write(json.dumps(summary, indent=2) + "\n")
    else:
        out.write(
            f"{command}: {_runs(len(ids))} matched{more}: {applied} applied, {requested} "
            f"requested from their workers, {len(skipped)} skipped\n"
        )
        for item in skipped:
            out.write(
                f"  skipped {escape_controls(item['runId'])}: {escape_controls(item['why'])}\n"
            )
    return 0
