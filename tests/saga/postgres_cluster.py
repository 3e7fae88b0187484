"""A throwaway PostgreSQL cluster on a loopback port, run as the user ``postgres``.

The session fixture is in ``conftest.py``; a test that needs a cluster of its own (to restart
it) imports :class:`Cluster` from here (``from postgres_cluster import Cluster``), and so does
``benchmarks/saga.py``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile


def _pg_bin() -> pathlib.Path | None:
    chosen = os.environ.get("SEAWALL_PG_BINDIR")  # where initdb and pg_ctl are, if not Debian's
    if chosen:
        return pathlib.Path(chosen)
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(pathlib.Path(p).parts[-3]) if pathlib.Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return pathlib.Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return pathlib.Path(which).parent if which else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A PostgreSQL server in a temporary directory; *durable* keeps fsync on (benchmarks)."""

    def __init__(self, durable: bool = False) -> None:
        bindir = _pg_bin()
        if bindir is None:
            raise RuntimeError("PostgreSQL is not installed (no pg_ctl; `make test` installs it)")
        if not (bindir / "initdb").exists():
            raise RuntimeError(f"no initdb in {bindir}")
        self.bindir = bindir
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="seawall-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
        options += "-c max_connections=200"
        if not durable:
            # A test cluster: nothing here survives a power loss anyway, and the suite commits
            # a lot. The worker processes' crashes the tests cause are not the server's.
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, check=False)
        if done.returncode != 0:
            log = self.root / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}{tail}")

    def restart(self) -> None:
        """Restart the server as ``pg_ctl restart -m fast`` does: every session is ended,
        whatever it was doing (a commit too)."""
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-m", "fast", "-w", "restart")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
