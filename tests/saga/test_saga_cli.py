"""`seawall saga list / show / retry / compensate / cancel --store URL`."""

from __future__ import annotations

import json
import random

import pytest

import seawall
from seawall import saga
from seawall.cli import main

START = 1_700_000_000.0


def usage_error(argv: list[str]) -> bool:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code == 2


def fixture_store(url: str) -> tuple[saga.Orchestrator, seawall.VirtualClock]:
    clock = seawall.VirtualClock(start=START)
    state = {"charge": 0}

    def charge(ctx: saga.StepContext) -> dict[str, int]:
        state["charge"] += 1
        if ctx.input.get("decline"):
            raise seawall.Permanent("card declined")
        if state["charge"] <= 1 and ctx.input.get("flaky"):
            raise ConnectionError("gateway reset")
        return {"paid": 1}

    pol = seawall.RetryPolicy(
        max_attempts=3,
        backoff=seawall.Backoff(base=60.0, cap=600.0),
        rng=random.Random(3),
        hooks=(),
    )
    order = saga.Saga(
        "order",
        [
            saga.Step("reserve", lambda ctx: {"r": 1}, compensate=lambda ctx: None, policy=pol),
            saga.Step("charge", charge, policy=pol, on_exhausted="park"),
        ],
    )
    orch = saga.Orchestrator(url, [order], clock=clock, hooks=())
    orch.start("order", {"flaky": True}, run_id="waiting")
    orch.start("order", {"decline": True}, run_id="parked")
    orch.run_due()
    return orch, clock


def test_list_and_show_print_the_log_per_step(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    orch, _ = fixture_store(store_url)
    with orch:
        assert main(["saga", "list", "--store", store_url]) == 0
        table = capsys.readouterr().out
        header = table.splitlines()[0].split()
        assert header == [
            "run",
            "saga",
            "status",
            "step",
            "attemptCount",
            "nextRetryAt",
            "lastError",
            "updated",
        ]
        waiting = next(line for line in table.splitlines() if line.startswith("waiting"))
        assert "RETRYING" in waiting and "ConnectionError: gateway reset" in waiting
        assert "2023-11-14T22:1" in waiting  # nextRetryAt, UTC
        assert main(["saga", "show", "parked", "--store", store_url, "--history"]) == 0
        shown = capsys.readouterr().out
        assert "status NEEDS_ATTENTION" in shown
        assert "charge   FAILED     1             -            Permanent: card declined" in shown
        assert "give_up" in shown
        assert main(["saga", "show", "waiting", "--store", store_url, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        charge = data["steps"][1]
        assert data["status"] == "RETRYING"
        assert charge["attemptCount"] == 1
        assert charge["lastError"] == "ConnectionError: gateway reset"
        assert charge["nextRetryAt"].endswith("Z")
        assert charge["status"] == "RETRYING"
        assert [h["event"] for h in data["history"]][:2] == ["started", "attempt"]
        assert (
            main(["saga", "list", "--store", store_url, "--status", "needs_attention", "--json"])
            == 0
        )
        assert [r["runId"] for r in json.loads(capsys.readouterr().out)] == ["parked"]


def test_retry_compensate_and_cancel_change_the_log_workers_act_on(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    orch, clock = fixture_store(store_url)
    with orch:
        # The CLI's time is the system clock's: far past the virtual START, so "now" is due.
        assert main(["saga", "retry", "waiting", "--store", store_url]) == 0
        assert "retry: applied" in capsys.readouterr().out
        assert main(["saga", "compensate", "parked", "--store", store_url, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "COMPENSATING"
        clock.advance(10 * 365 * 86400.0)
        orch.run_due()
        assert orch.get("waiting").status is saga.Status.SUCCEEDED
        assert orch.get("parked").status is saga.Status.COMPENSATED
        assert usage_error(["saga", "cancel", "parked", "--store", store_url])
        assert "COMPENSATED" in capsys.readouterr().err


def test_cli_errors(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEAWALL_SAGA_STORE", raising=False)
    assert usage_error(["saga", "list"])
    assert "--store" in capsys.readouterr().err
    assert usage_error(["saga", "list", "--store", "redis://x"])
    assert "unknown store scheme" in capsys.readouterr().err
    saga.Orchestrator(sqlite_url, [saga.Saga("s", [saga.Step("a", lambda ctx: None)])]).close()
    assert main(["saga", "show", "nope", "--store", sqlite_url]) == 1
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["saga", "retry", "nope", "--store", sqlite_url]) == 1
    monkeypatch.setenv("SEAWALL_SAGA_STORE", sqlite_url)
    assert main(["saga", "list"]) == 0
    assert capsys.readouterr().out == "no runs\n"


@pytest.mark.parametrize("command", ["list", "retry", "compensate", "cancel"])
@pytest.mark.parametrize("status", ["BOGUS", "pending", "needs-attention"])
def test_an_unknown_status_filter_is_refused_with_the_valid_ones(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], command: str, status: str
) -> None:
    saga.Orchestrator(sqlite_url, [saga.Saga("s", [saga.Step("a", lambda ctx: None)])]).close()
    # Not "no runs": a typo must not read as "nothing is stuck".
    yes = [] if command == "list" else ["--yes"]
    assert usage_error(["saga", command, "--store", sqlite_url, "--status", status, *yes])
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert "argument --status" in err and repr(status) in err and "Traceback" not in err
    for valid in ("RUNNING", "RETRYING", "WAITING", "NEEDS_ATTENTION", "COMPENSATED"):
        assert valid in err
    assert "PENDING" not in err.split(repr(status), 1)[1]  # a step's status, never a run's
