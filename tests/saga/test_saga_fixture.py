"""Without a PostgreSQL server, the PostgreSQL tests skip, except under CI=true, where they fail."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
TEST = "test_saga_input.py::test_a_store_of_a_newer_schema_is_refused_and_left_as_it_is[postgresql]"


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_postgresql_tests_fail_under_ci_when_the_server_cannot_start(
    ci: str, outcome: str, tmp_path: pathlib.Path
) -> None:
    env = {**os.environ, "CI": ci, "SEAWALL_PG_BINDIR": str(tmp_path / "missing")}
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"{HERE}/{TEST}",
        ],
        env=env, capture_output=True, text=True, cwd=HERE.parent.parent, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert outcome in out, out
    assert "PostgreSQL could not start" in out
    assert (done.returncode != 0) == (ci == "true")
