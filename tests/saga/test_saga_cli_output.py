"""What `seawall saga` prints is safe to print: no control character from an error message or
a row reaches the terminal, and no secret of the store's URL reaches stderr, a repr or an error.

The hostile texts are real: a step raises an error whose message carries escape sequences (clear
the screen, retitle the window, a one-character CSI, a bidirectional override) and forged
lines; a row edited behind the orchestrator's back carries them in the saga's name and the
run's reason; store URLs carry a password in the user info, in the query (``password=``,
``sslpassword=``) or as a connection string.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import sqlite3
import subprocess
import sys

import pytest

import seawall
from seawall import saga
from seawall.cli import main

HOSTILE = (
    "\x1b[2J\x1b]0;owned\x07gateway said no\r\nfake-run  order  SUCCEEDED  -\n"
    "\x9b31mred\u202etxet\x00\x7f\tend"
)
# Every character a terminal acts on, as it is written to the terminal.
CONTROLS = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | {"\u202e"}
SECRETS = ("pw-in-user-info", "pw-in-query", "sslpw-in-query", "pw-in-dsn")


def hostile_store(url: str) -> None:
    """A run whose step failed with HOSTILE, with HOSTILE also in rows written by hand."""

    def charge(ctx: saga.StepContext) -> None:
        raise ConnectionError(HOSTILE)

    pol = seawall.RetryPolicy(max_attempts=3, backoff=seawall.Backoff(60.0, cap=600.0), hooks=())
    order = saga.Saga("order", [saga.Step("charge", charge, policy=pol)])
    clock = seawall.VirtualClock(start=1_700_000_000.0)
    with saga.Orchestrator(url, [order], clock=clock, hooks=()) as orch:
        orch.start("order", {}, run_id="r1")
        orch.run_due()
        assert "\x1b[2J" in (orch.get("r1").steps[0].last_error or "")  # stored as it came
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE seawall_saga_runs SET saga = ?, reason = ?", (f"o{HOSTILE}", HOSTILE))


def shown_lines(text: str) -> list[str]:
    lines = text.split("\n")
    for line in lines:
        assert not CONTROLS & set(line), repr(line)
    return lines


def test_list_and_show_escape_control_characters(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_store(sqlite_url)
    assert main(["saga", "list", "--store", sqlite_url]) == 0
    listed = shown_lines(capsys.readouterr().out)
    assert len(listed) == 3  # header, one run, the final newline: no forged row
    assert "\\x1b[2J\\x1b]0;owned\\x07gateway" in listed[1]  # shown, escaped

    assert main(["saga", "show", "r1", "--store", sqlite_url, "--history"]) == 0
    out = capsys.readouterr().out
    shown = shown_lines(out)
    assert shown[0].startswith("run r1  saga o\\x1b[2J")
    assert shown[1].startswith("reason: \\x1b[2J")
    assert "\\r\\nfake-run" in shown[1] and "\\x9b31mred\\u202etxet\\x00\\x7f\\tend" in shown[1]
    assert not any(line.startswith("fake-run") for line in shown)


def test_json_output_escapes_control_characters(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_store(sqlite_url)
    for argv in (["list"], ["show", "r1", "--history"]):
        assert main(["saga", *argv, "--store", sqlite_url, "--json"]) == 0
        out = capsys.readouterr().out
        assert not (CONTROLS - {"\n"}) & set(out)
        data = json.loads(out)
        run = data[0] if isinstance(data, list) else data
        assert (run["saga"], run["reason"]) == (f"o{HOSTILE}", HOSTILE)  # unchanged, as JSON


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:pw-in-user-info@127.0.0.1:{port}/app",
        "postgresql://127.0.0.1:{port}/app?password=pw-in-query",
        "postgresql://127.0.0.1:{port}/app?sslmode=prefer&sslpassword=sslpw-in-query",
        "postgresql://app@127.0.0.1:{port}/app?user=app&password=pw-in-query&connect_timeout=5",
    ],
)
def test_an_unreachable_store_is_named_without_its_secrets(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = url.format(port=closed_port())
    with pytest.raises(ConnectionError) as info:
        saga.Orchestrator(url, [])
    assert not any(s in str(info.value) for s in SECRETS), info.value
    assert "127.0.0.1" in str(info.value)
    assert main(["saga", "list", "--store", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("seawall: error: cannot connect to the saga store postgresql://")
    assert "cannot write" not in err
    assert not any(s in err for s in SECRETS), err


def test_a_malformed_store_url_is_refused_without_its_secrets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for url in ("host=127.0.0.1 user=app password=pw-in-dsn", "redis://:pw-in-user-info@h/0"):
        with pytest.raises(SystemExit) as info:
            main(["saga", "list", "--store", url])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("seawall: error: url")
        assert not any(s in err for s in SECRETS), err


def test_repr_and_missing_run_hide_the_query_password(pg_url: str) -> None:
    # The session's cluster trusts loopback connections: the password is sent and ignored.
    url = f"{pg_url}?password=pw-in-query&sslpassword=sslpw-in-query"
    with saga.Orchestrator(url, [saga.Saga("s", [saga.Step("a", lambda ctx: None)])]) as orch:
        shown = repr(orch)
        assert "127.0.0.1" in shown
        with pytest.raises(KeyError) as info:
            orch.get("missing")
        for text in (shown, str(info.value)):
            assert not any(s in text for s in SECRETS), text


def test_argument_errors_escape_what_was_typed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["saga", "list", "--store", "sqlite:///x.db", "\x1b]0;owned\x07"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: \\x1b]0;owned\\x07" in err
    assert not CONTROLS & set(err.replace("\n", ""))


def read_only(path: pathlib.Path) -> bool:
    """Make *path* read-only, for root too (the immutable attribute); whether it worked."""
    path.chmod(0o444)
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], check=False, capture_output=True)
    try:
        with path.open("r+b"):
            return False
    except OSError:
        return True


def writable_again(path: pathlib.Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)
    path.chmod(0o644)


def test_a_read_only_store_is_read_and_refuses_writes_clearly(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "saga.db"
    url = f"sqlite:///{path}"
    with saga.Orchestrator(url, [saga.Saga("s", [saga.Step("a", lambda ctx: None)])]) as orch:
        orch.start("s", {}, run_id="r1")
    try:
        if not read_only(path):
            pytest.skip("this file system cannot make a file read-only for this user")
        assert main(["saga", "list", "--store", url]) == 0  # reading needs no write
        assert capsys.readouterr().out.splitlines()[1].startswith("r1 ")
        assert main(["saga", "retry", "r1", "--store", url]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"seawall: error: the saga store {url} refused the operation: ")
        assert "readonly database" in err and "internal error" not in err
    finally:
        writable_again(path)


def test_a_missing_postgres_extra_is_named_not_reported_as_a_bug(monkeypatch, capsys) -> None:
    # psycopg not installed: the import fails for real, as on a machine without the extra.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "seawall.saga._postgres", raising=False)
    url = "postgresql://127.0.0.1:1/db?password=pw-in-query"
    for words in (["saga", "list", "--store", url], ["web", "--store", url, "--port", "0"]):
        assert main(words) == 1
        err = capsys.readouterr().err
        assert err == (
            "seawall: error: a postgresql:// saga store needs psycopg 3: "
            "pip install 'seawall[postgres]'\n"
        )
