"""What a saga store says when it cannot be used: a URL it refuses is repeated without its
secrets, and a SQLite file that cannot take a write (read-only, full disk) is named with the
cause, in one line on the command line.

Every case is real: the URLs are refused by ``Orchestrator``, ``open_store`` and ``seawall saga``
alike; the read-only file is one the kernel refuses to write (``chmod``, or the immutable
attribute for root, whom ``chmod`` does not stop); the full disk is SQLite's own limit on the
file's size (``max_page_count``), reached by a real write.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from seawall import saga
from seawall.cli import main
from seawall.saga._stores import open_store

SECRETS = ("pw-in-user-info", "pw-in-query", "sslpw-in-query")

# Each URL takes a different path to its ValueError (or TypeError).
REFUSED = {
    "no scheme": "postgresql//app:pw-in-user-info@db.internal/app?password=pw-in-query",
    "a secret where the scheme is": "app:pw-in-user-info@db.internal/app://x?password=pw-in-query",
    "sqlite with a host": "sqlite://app:pw-in-user-info@db.internal/saga.db?password=pw-in-query",
    "sqlite in memory": "sqlite:///file:saga.db?password=pw-in-query&sslpassword=sslpw-in-query",
    "unknown scheme": "mysql://app:pw-in-user-info@db.internal/app?password=pw-in-query",
    "no directory": "sqlite:///no/such/directory/saga.db?password=pw-in-query/x",
}


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_url_is_repeated_without_its_secrets(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for open_it in (open_store, lambda url: saga.Orchestrator(url, [])):
        with pytest.raises(ValueError) as info:
            open_it(url)
        text = str(info.value)
        assert text.startswith("url"), text  # names the parameter
        assert not any(s in text for s in SECRETS), text
        assert "[redacted]" in text, text
    with pytest.raises(SystemExit) as exited:
        main(["saga", "list", "--store", url])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("seawall: error: url") and err.count("\n") == 1, err
    assert not any(s in err for s in SECRETS), err


def test_a_url_that_is_not_a_str_is_repeated_without_its_secrets() -> None:
    with pytest.raises(TypeError) as info:
        open_store(b"postgresql://app:pw-in-user-info@db/app?password=pw-in-query")  # type: ignore[arg-type]
    assert str(info.value).startswith("url must be a str")
    assert not any(s in str(info.value) for s in SECRETS), info.value


def test_what_is_not_a_secret_stays_readable() -> None:
    with pytest.raises(ValueError, match=r"unknown store scheme 'mysql' in 'mysql://db/app'"):
        open_store("mysql://db/app")
    with pytest.raises(ValueError, match=r"does not exist: .*/no/such/directory$"):
        open_store("sqlite:///no/such/directory/saga.db")


def _immutable(path: pathlib.Path, on: bool) -> bool:
    """Set or clear the immutable attribute (root only); whether the command took it."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        return False
    flag = "+i" if on else "-i"
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.fixture
def read_only() -> Iterator[object]:
    """Make a file or a directory read-only for this process, for root too; undone after."""
    made: list[tuple[pathlib.Path, int]] = []

    def make(path: pathlib.Path) -> None:
        made.append((path, path.stat().st_mode))
        path.chmod(0o555 if path.is_dir() else 0o444)
        if os.geteuid() == 0 and not _immutable(path, True):
            # chmod does not stop root; the immutable attribute does, where the file system
            # and the container let root set it.
            pytest.skip("root writes through chmod, and chattr +i is refused here")
        probe = path / ".probe" if path.is_dir() else path
        try:
            with probe.open("ab"):
                pass
        except OSError:
            return
        pytest.skip(f"this file system lets {path} be written despite its mode")

    yield make
    for path, mode in reversed(made):
        _immutable(path, False)
        path.chmod(mode)


SAGAS = [saga.Saga("s", [saga.Step("a", lambda ctx: None)])]


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``seawall`` command, in a process of its own (its stderr as a user sees it)."""
    code = "import sys; from seawall.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def test_a_read_only_store_names_the_file_and_the_cause(
    tmp_path: pathlib.Path, read_only: Callable[[pathlib.Path], None]
) -> None:
    path = tmp_path / "saga.db"
    url = f"sqlite:///{path}"
    with saga.Orchestrator(url, SAGAS) as orch:
        orch.start("s", {}, run_id="r1")
    read_only(path)
    with saga.Orchestrator(url, SAGAS) as orch:  # opening (and reading) needs no write
        assert orch.get("r1").status is not None
        with pytest.raises(PermissionError) as info:
            orch.start("s", {}, run_id="r2")
    err = info.value
    assert err.errno == errno.EACCES and err.filename == str(path)
    assert "read-only" in str(err) and str(path) in str(err)
    assert type(err.__cause__).__name__ == "OperationalError"  # SQLite's, kept as the cause
    done = _command("saga", "retry", "r1", "--store", url)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"seawall: error: the saga store {url} refused the operation")
    assert "read-only" in done.stderr


def test_a_store_in_a_read_only_directory_names_the_file(
    tmp_path: pathlib.Path, read_only: Callable[[pathlib.Path], None]
) -> None:
    directory = tmp_path / "locked"
    directory.mkdir()
    read_only(directory)
    path = directory / "saga.db"
    with pytest.raises(PermissionError) as info:
        saga.Orchestrator(f"sqlite:///{path}", SAGAS)
    assert info.value.filename == str(path) and str(path) in str(info.value)
    assert "cannot be opened or created" in str(info.value)
    # The command never creates a store: the file that is not there is named as such.
    done = _command("saga", "list", "--store", f"sqlite:///{path}")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(path) in done.stderr and "does not exist" in done.stderr


def test_a_full_store_names_the_file_and_the_cause(tmp_path: pathlib.Path) -> None:
    # SQLite's limit on the file's size answers a write as a full disk does (SQLITE_FULL).
    path = tmp_path / "saga.db"
    with saga.Orchestrator(f"sqlite:///{path}", SAGAS) as orch:
        pages = orch.store.execute("PRAGMA page_count").fetchone()[0]
        orch.store.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(OSError) as info:
            for n in range(200):
                orch.start("s", {"padding": "x" * 2000}, run_id=f"r{n}")
    err = info.value
    assert err.errno == errno.ENOSPC and err.filename == str(path)
    assert "full" in str(err) and str(path) in str(err)
    assert orch.store.unavailable(err)  # a worker waits for space, as for a lost connection


# URLs the PostgreSQL driver refuses with a message that repeats what it could not read.
DRIVER_REFUSED = {
    "a bare % in the password": "postgresql://app:Xy7%q!Lp2-secret@127.0.0.1:1/db",
    "a mis-encoded query": "postgresql://127.0.0.1:1/db?password%3Dq-secret-9",
}


@pytest.mark.parametrize("url", DRIVER_REFUSED.values(), ids=DRIVER_REFUSED.keys())
def test_a_url_the_driver_cannot_read_is_not_repeated_with_its_secret(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    secrets = ("Xy7%q!Lp2-secret", "q-secret-9")
    with pytest.raises(ConnectionError) as info:
        saga.Orchestrator(url, [])
    shown = "".join(str(e) for e in (info.value, info.value.__cause__, info.value.__context__) if e)
    assert not any(s in shown for s in secrets), shown
    assert "[redacted]" in shown, shown
    assert info.value.__cause__ is None  # the driver's error, which holds the raw text
    assert main(["saga", "list", "--store", url]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot connect" in err, err
    assert not any(s in err for s in secrets), err


def test_a_directory_given_as_the_store_is_named_as_one(tmp_path: pathlib.Path) -> None:
    done = _command("saga", "list", "--store", f"sqlite:///{tmp_path}")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert str(tmp_path) in done.stderr and "is a directory" in done.stderr, done.stderr
