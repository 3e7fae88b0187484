"""`seawall saga` for operators: list filters, show's lease and overdue flag, counts, --force,
bulk operations with confirmation, and reads that never create a store."""

from __future__ import annotations

import io
import json
import pathlib
import sqlite3
import time

import pytest

import seawall
from seawall import saga
from seawall.cli import main

# The CLI judges leases on the store's real clock; these stores are written on virtual time far
# enough ahead of it that their leases are live and their retries not yet due, or far enough
# behind that everything due is overdue.
FUTURE = time.time() + 20 * 365 * 86400.0
PAST = 1_700_000_000.0


class Crash(BaseException):
    """The worker process dies here (escapes the orchestrator, as a kill would end it)."""


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


def populate(url: str, start: float) -> None:
    """``parked`` x2 (card declined), ``waiting`` (gateway reset, retry in 600 s), ``done``,
    and ``held``: leased by the worker ``w-1\\x1b[31m`` (a control character in its name),
    which died inside its attempt."""
    clock = seawall.VirtualClock(start=start)

    def charge(ctx: saga.StepContext) -> str:
        if ctx.input.get("decline"):
            raise seawall.Permanent("card declined")
        if ctx.input.get("flaky"):
            raise ConnectionError("gateway reset")
        if ctx.input.get("die"):
            raise Crash
        return "paid"

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff.constant(600.0), hooks=())
    order = saga.Saga(
        "order",
        [
            saga.Step("reserve", lambda ctx: "r", compensate=lambda ctx: None),
            saga.Step("charge", charge, policy=pol, on_exhausted="park"),
        ],
    )
    with saga.Orchestrator(url, [order], clock=clock, hooks=()) as orch:
        orch.start("order", {"decline": True}, run_id="parked-1")
        orch.start("order", {"decline": True}, run_id="parked-2")
        orch.start("order", {"flaky": True}, run_id="waiting")
        orch.start("order", {}, run_id="done")
        orch.run_due()
    dying = saga.Orchestrator(
        url, [order], clock=clock, hooks=(), lease=30.0, worker_id="w-1\x1b[31m"
    )
    dying.start("order", {"die": True}, run_id="held")
    with pytest.raises(Crash):
        dying.run_due()
    dying.close()


def listed(url: str, capsys: pytest.CaptureFixture[str], *filters: str) -> set[str]:
    assert main(["saga", "list", "--store", url, "--json", *filters]) == 0
    return {r["runId"] for r in json.loads(capsys.readouterr().out)}


def test_list_filters_combine(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    populate(store_url, PAST)  # years ago: what is due is overdue, and the lease has expired
    assert listed(store_url, capsys) == {"parked-1", "parked-2", "waiting", "done", "held"}
    assert listed(store_url, capsys, "--stuck") == {"parked-1", "parked-2", "waiting", "held"}
    assert listed(store_url, capsys, "--status", "retrying", "--stuck") == {"waiting"}
    assert listed(store_url, capsys, "--error-contains", "Card") == {"parked-1", "parked-2"}
    assert listed(store_url, capsys, "--stuck", "--error-contains", "reset") == {"waiting"}
    assert listed(store_url, capsys, "--older-than", "1d", "--saga", "order") == {
        "parked-1",
        "parked-2",
        "waiting",
        "done",
        "held",
    }
    assert listed(store_url, capsys, "--saga", "nope") == set()
    assert main(["saga", "list", "--store", store_url, "--stuck", "--json"]) == 0
    data = {r["runId"]: r for r in json.loads(capsys.readouterr().out)}
    assert data["held"]["overdue"] is True and data["held"]["lease"]["expired"] is True
    assert data["parked-1"]["overdue"] is False and data["parked-1"]["lease"] is None
    # The table: the filters apply to it too.
    assert main(["saga", "list", "--store", store_url, "--error-contains", "card"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[1:]] == ["parked-1", "parked-2"]


def test_list_on_a_future_store_is_not_overdue(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(store_url, FUTURE)  # leases live and retries due in the store's future
    assert listed(store_url, capsys, "--stuck") == {"parked-1", "parked-2"}
    assert listed(store_url, capsys, "--older-than", "1h") == set()


def test_show_gives_the_lease_on_the_stores_clock(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(store_url, FUTURE)
    assert main(["saga", "show", "held", "--store", store_url]) == 0
    out = capsys.readouterr().out
    lease = next(line for line in out.splitlines() if line.startswith("lease: "))
    assert "\x1b" not in out
    assert lease.startswith("lease: w-1\\x1b[31m until ")  # the worker's name, escaped
    assert "overdue no" in lease and "store time " in lease
    assert main(["saga", "show", "held", "--store", store_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lease"]["owner"] == "w-1\x1b[31m"  # JSON escapes it (\u001b)
    assert data["lease"]["expired"] is False and data["overdue"] is False
    expires = data["lease"]["expiresAt"]
    assert expires.endswith("Z") and expires > data["storeNow"]
    assert main(["saga", "show", "done", "--store", store_url]) == 0
    assert "lease: none  overdue no" in capsys.readouterr().out


def test_show_flags_an_expired_lease_as_overdue(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(store_url, PAST)
    assert main(["saga", "show", "held", "--store", store_url]) == 0
    lease = next(
        line for line in capsys.readouterr().out.splitlines() if line.startswith("lease: ")
    )
    assert "expired" in lease and "s ago" in lease and "overdue yes" in lease
    assert main(["saga", "show", "waiting", "--store", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overdue"] is True


def test_counts_by_saga_and_status(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    populate(store_url, PAST)
    assert main(["saga", "counts", "--store", store_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "order": {"NEEDS_ATTENTION": 2, "RETRYING": 1, "RUNNING": 1, "SUCCEEDED": 1, "overdue": 2}
    }
    assert main(["saga", "counts", "--store", store_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["saga", "status", "runs", "overdue"]
    assert lines[1].split() == ["order", "NEEDS_ATTENTION", "2", "2"]
    assert lines[2].split() == ["order", "RETRYING", "1"]


def test_retry_force_breaks_a_live_lease(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(store_url, FUTURE)
    assert main(["saga", "retry", "held", "--store", store_url]) == 0
    assert "requested from its worker" in capsys.readouterr().out
    assert main(["saga", "retry", "held", "--store", store_url, "--force", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lease"] is None
    assert data["history"][-1]["event"] == "operator"
    assert {"operation": "break_lease", "worker": "w-1\x1b[31m"} in [
        h["detail"] for h in data["history"]
    ]
    assert main(["saga", "cancel", "held", "--store", store_url, "--force"]) == 0
    assert "status FAILED" in capsys.readouterr().out


def test_bulk_retry_by_filter_with_yes(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    populate(store_url, PAST)
    argv = ["saga", "retry", "--store", store_url, "--status", "NEEDS_ATTENTION"]
    assert main([*argv, "--error-contains", "card", "--yes"]) == 0
    assert capsys.readouterr().out == (
        "retry: 2 runs matched: 2 applied, 0 requested from their workers, 0 skipped\n"
    )
    assert listed(store_url, capsys, "--status", "NEEDS_ATTENTION") == set()
    assert listed(store_url, capsys, "--status", "RETRYING") == {"parked-1", "parked-2", "waiting"}
    assert main([*argv, "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "matched": 0,
        "applied": 0,
        "requested": 0,
        "skipped": [],
    }


def test_bulk_compensate_skips_what_does_not_apply(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    populate(store_url, PAST)
    # "done" matches the saga but has finished: it is reported, not changed.
    argv = ["saga", "compensate", "--store", store_url, "--saga", "order", "--yes", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["matched"] == 5 and data["applied"] == 4
    assert [s["runId"] for s in data["skipped"]] == ["done"]
    assert "SUCCEEDED" in data["skipped"][0]["why"]
    assert listed(store_url, capsys, "--status", "COMPENSATING") == {
        "parked-1",
        "parked-2",
        "waiting",
        "held",
    }


def test_bulk_without_a_terminal_needs_yes(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(sqlite_url, PAST)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # not a terminal, even saying yes
    argv = ["saga", "cancel", "--store", sqlite_url, "--stuck"]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "4 runs match" in err and "--yes" in err
    assert listed(sqlite_url, capsys, "--status", "FAILED") == set()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "cancelled"), [("y\n", True), ("\n", False), ("no\n", False)])
def test_bulk_asks_on_a_terminal(
    sqlite_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    cancelled: bool,
) -> None:
    populate(sqlite_url, PAST)
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    code = exit_code(["saga", "cancel", "--store", sqlite_url, "--error-contains", "declined"])
    captured = capsys.readouterr()
    assert "cancel 2 runs (parked-1, parked-2)? [y/N]" in captured.err
    assert code == (0 if cancelled else 1)
    expected = {"parked-1", "parked-2"} if cancelled else set()
    assert listed(sqlite_url, capsys, "--status", "FAILED") == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["retry"], "give a RUN_ID, or filters"),
        (["retry", "done", "--stuck"], "not both"),
        (["list", "--older-than", "soon"], "--older-than must be a duration"),
        (["counts", "--overdue-after=-1s"], "--overdue-after must be a duration"),
        (["list", "--limit", "0"], "argument --limit: must be a whole number >= 1 and <= "),
        (["list", "--limit", "9" * 20], "argument --limit: must be a whole number >= 1 and <= "),
    ],
)
def test_usage_errors(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    populate(sqlite_url, PAST)
    assert exit_code(["saga", *argv, "--store", sqlite_url]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", [["list"], ["counts"], ["show", "x"], ["retry", "x"]])
def test_a_mistyped_sqlite_path_is_an_error_naming_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    path = tmp_path / "odrers.db"
    assert exit_code(["saga", *command, "--store", f"sqlite:///{path}"]) != 0
    err = capsys.readouterr().err
    assert str(path) in err and "does not exist" in err
    assert not path.exists()


def test_an_empty_postgresql_database_is_not_a_store(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = pg_url.replace("postgres@", "postgres:hunter2@", 1)
    code = exit_code(["saga", "list", "--store", secret])
    err = capsys.readouterr().err
    assert code != 0 and "no saga store" in err
    assert "hunter2" not in err


def test_store_url_secrets_are_redacted_in_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://ops:hunter2@127.0.0.1:1/db?sslpassword=swordfish"
    assert exit_code(["saga", "counts", "--store", url]) != 0
    err = capsys.readouterr().err
    assert "hunter2" not in err and "swordfish" not in err and "127.0.0.1" in err


def test_skipped_reasons_are_escaped(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    clock = seawall.VirtualClock(start=PAST)
    flow = saga.Saga("s", [saga.Step("only", lambda ctx: None)])
    with saga.Orchestrator(sqlite_url, [flow], clock=clock, hooks=()) as orch:
        orch.start("s", {}, run_id="bad")
        orch.run_due()
    # What another writer (or a newer seawall, or an attacker with the file) left in the store.
    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with conn:
        for table in ("runs", "steps", "history"):
            conn.execute(
                f"UPDATE seawall_saga_{table} SET run_id = ? WHERE run_id = 'bad'",
                ("bad\x1b]0;t\x07",),
            )
    conn.close()
    assert main(["saga", "cancel", "--store", sqlite_url, "--saga", "s", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "skipped bad\\x1b]0;t\\x07: run " in out
