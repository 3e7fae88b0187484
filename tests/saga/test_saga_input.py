"""Bad input gets a clear error and writes nothing."""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import pytest

import seawall
from seawall import saga


def ok(ctx: saga.StepContext) -> None:
    return None


ONE = saga.Saga("one", [saga.Step("a", ok)])


def count_runs(orch: saga.Orchestrator) -> int:
    return sum(orch.counts().values())


def test_duplicate_step_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate step name 'a'"):
        saga.Saga("dup", [saga.Step("a", ok), saga.Step("a", ok)])


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: saga.Saga("", [saga.Step("a", ok)]), ValueError, "name"),
        (lambda: saga.Saga("s", []), ValueError, "steps must not be empty"),
        (lambda: saga.Saga("s", "ab"), TypeError, "steps"),
        (lambda: saga.Saga("s", [ok]), TypeError, "saga.Step"),
        (lambda: saga.Step("a", 42), TypeError, "action"),
        (lambda: saga.Step("a", ok, compensate="no"), TypeError, "compensate"),
        (lambda: saga.Step("a", ok, policy=3), TypeError, "policy"),
        (lambda: saga.Step("a", ok, on_exhausted="retry"), ValueError, "on_exhausted"),
        (lambda: saga.Step("a\n", ok), ValueError, "name"),
    ],
)
def test_bad_definitions_name_the_parameter(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


def test_unknown_saga_and_non_json_input_write_nothing(store_url: str) -> None:
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        with pytest.raises(ValueError, match="unknown saga 'two'"):
            orch.start("two", {})
        with pytest.raises(TypeError, match=r"input\['when'\] is a set"):
            orch.start("one", {"when": {1}})
        with pytest.raises(TypeError, match=r"NaN|nan"):
            orch.start("one", [float("nan")])
        with pytest.raises(TypeError, match="keys are strings"):
            orch.start("one", {1: "x"})
        with pytest.raises(TypeError, match="run_id"):
            orch.start("one", {}, run_id=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="run_id"):
            orch.start("one", {}, run_id="")
        assert count_runs(orch) == 0
        assert orch.runs() == []


@pytest.mark.parametrize(
    "url", ["mysql://localhost/db", "saga.db", "sqlite://relative.db", "sqlite:///:memory:"]
)
def test_unknown_store_schemes_are_refused_and_create_no_file(
    url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="url"):
        saga.Orchestrator(url, [ONE])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"lease": 0}, ValueError, "lease"),
        ({"lease": True}, TypeError, "lease"),
        ({"batch": 0}, ValueError, "batch"),
        ({"clock": object()}, TypeError, "clock"),
        ({"hooks": [1]}, TypeError, "hooks"),
        ({"poll": -1.0}, ValueError, "poll"),
    ],
)
def test_bad_orchestrator_parameters(
    sqlite_url: str, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        saga.Orchestrator(sqlite_url, [ONE], **kwargs)


def test_two_sagas_of_one_name_are_refused(sqlite_url: str) -> None:
    with pytest.raises(ValueError, match="two sagas are named 'one'"):
        saga.Orchestrator(sqlite_url, [ONE, saga.Saga("one", [saga.Step("b", ok)])])


def test_a_store_of_a_newer_schema_is_refused_and_left_as_it_is(store_url: str) -> None:
    saga.Orchestrator(store_url, [ONE], hooks=()).close()
    bump = "UPDATE seawall_saga_schema SET version = version + 1"
    if store_url.startswith("sqlite"):
        path = store_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute(bump)
        before = pathlib.Path(path).read_bytes()
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(bump)
    with pytest.raises(saga.SchemaVersionError, match="newer than this seawall's"):
        saga.Orchestrator(store_url, [ONE])
    if store_url.startswith("sqlite"):
        assert pathlib.Path(path).read_bytes() == before


def test_a_run_of_a_saga_unknown_here_is_left_alone(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=1_700_000_000.0)
    with saga.Orchestrator(sqlite_url, [ONE], clock=clock, hooks=()) as producer:
        run_id = producer.start("one", {})
    other = saga.Saga("other", [saga.Step("x", ok)])
    with saga.Orchestrator(sqlite_url, [other], clock=clock, hooks=()) as orch:
        assert orch.run_due() == 0
        with pytest.raises(ValueError, match="unknown here"):
            orch.run_until_settled(run_id)
        assert orch.get(run_id).status is saga.Status.RUNNING


def test_a_corrupt_retry_state_in_a_row_gives_up_instead_of_crashing(sqlite_url: str) -> None:
    clock = seawall.VirtualClock(start=1_700_000_000.0)
    calls: list[int] = []

    def flaky(ctx: saga.StepContext) -> None:
        calls.append(ctx.attempt)
        raise ConnectionError("x")

    s = saga.Saga("s", [saga.Step("a", flaky)])
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        run_id = orch.start("s", {})
        orch.run_due()
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                'UPDATE seawall_saga_steps SET retry_state = \'{"retry": {"version": 99}}\''
            )
        run = orch.run_until_settled(run_id)
    assert run.status is saga.Status.COMPENSATED
    assert "newer" in (run.steps[0].last_error or "")
    assert calls == [1]


def test_start_many_is_one_commit_and_all_or_nothing(store_url: str) -> None:
    with saga.Orchestrator(store_url, [ONE], hooks=()) as orch:
        commits = orch.store.commits
        ids = orch.start_many("one", [{"i": i} for i in range(20)])
        assert orch.store.commits == commits + 1
        assert len(set(ids)) == 20 and count_runs(orch) == 20
        with pytest.raises(TypeError, match=r"inputs\[2\] is a bytes"):
            orch.start_many("one", [{}, {}, b"x"])
        with pytest.raises(ValueError, match="another saga or input"):
            orch.start_many("one", [{"new": 1}, {"other": 2}], run_ids=["fresh", ids[0]])
        with pytest.raises(ValueError, match="twice"):
            orch.start_many("one", [{}, {}], run_ids=["x", "x"])
        assert count_runs(orch) == 20  # "fresh" was rolled back with the rest
        assert orch.start_many("one", [{"i": 0}], run_ids=[ids[0]]) == [ids[0]]
        assert orch.run_due() == 20


@pytest.mark.parametrize(
    ("column", "value"),
    [("input", "[unclosed"), ("result", "\x00")],
)
def test_an_unreadable_row_parks_its_run_and_the_worker_goes_on(
    sqlite_url: str, column: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = seawall.VirtualClock(start=1_700_000_000.0)

    def flaky(ctx: saga.StepContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("x")
        return "ok"

    s = saga.Saga("s", [saga.Step("a", lambda ctx: "first"), saga.Step("b", flaky)])
    with saga.Orchestrator(sqlite_url, [s], clock=clock, hooks=()) as orch:
        orch.start("s", {}, run_id="bad")
        good = orch.start("s", {}, run_id="good")
        orch.run_due()
        table = "seawall_saga_runs" if column == "input" else "seawall_saga_steps"
        where = (
            "position = 1"
            if column == "retry_state"
            else ("position = 0" if column == "result" else "1")
        )
        with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
            conn.execute(
                f"UPDATE {table} SET {column} = ? WHERE run_id = 'bad' AND {where}", (value,)
            )
        with caplog.at_level("ERROR", logger="seawall.saga"):
            assert orch.run_until_settled(good).status is saga.Status.SUCCEEDED
            clock.advance(3600.0)
            orch.run_due()
        rows = (
            sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
            .execute("SELECT status, reason, due_at FROM seawall_saga_runs WHERE run_id = 'bad'")
            .fetchall()
        )
    assert rows[0][0] == "NEEDS_ATTENTION"
    assert "cannot be read" in rows[0][1]
    assert rows[0][2] is None
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
