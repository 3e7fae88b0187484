"""The redis-server fixture: skipped where it cannot start, a failure under CI=true."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize(("ci", "expected"), [("true", 1), ("", 0)])
def test_no_redis_server_fails_under_ci_and_skips_elsewhere(
    tmp_path: pathlib.Path, ci: str, expected: int
) -> None:
    for helper in ("conftest.py", "redis_process.py"):
        shutil.copy(HERE / helper, tmp_path / helper)
    (tmp_path / "test_needs_redis.py").write_text(
        "def test_it(redis_server):\n    assert redis_server.url\n", encoding="utf-8"
    )
    env = {**os.environ, "CI": ci, "SEAWALL_REDIS_SERVER": str(tmp_path / "no-such-binary")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == expected, proc.stdout + proc.stderr
    if ci:
        assert "could not start under CI" in proc.stdout
    else:
        assert "1 skipped" in proc.stdout
