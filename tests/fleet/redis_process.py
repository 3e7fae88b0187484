"""A real redis-server process on a free loopback port: started, killed, paused, restarted.

The fixtures that start one for the tests are in ``conftest.py``; test modules import
:class:`RedisServer` from here (``from redis_process import RedisServer``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str:
    # SEAWALL_REDIS_SERVER names another binary (the fixture's own test points it nowhere).
    return (
        os.environ.get("SEAWALL_REDIS_SERVER")
        or shutil.which("redis-server")
        or "/usr/bin/redis-server"
    )


class RedisServer:
    """One redis-server process: started, killed (SIGKILL), paused and restarted on one port."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self) -> None:
        """Start redis-server on this port, with no persistence."""
        self.process = subprocess.Popen(
            [
                _binary(),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                self.directory,
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def start(self) -> None:
        for _ in range(5):
            self._spawn()
            if self._wait_ready():
                return
            self.stop()
            self.port = _free_port()  # the port was taken meanwhile: another one
        raise RuntimeError("redis-server did not start")

    def _wait_ready(self) -> bool:
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.2)
        try:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                if self.process is None or self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.RedisError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def restart(self) -> None:
        """Start again on the same port (after :meth:`kill`), with an empty dataset."""
        self._spawn()
        assert self._wait_ready(), "redis-server did not restart on its port"

    def pause(self) -> None:
        """SIGSTOP: the server holds its connections but answers nothing (a slow Redis)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the server dies with its state, as in a crash."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_redis(directory: str) -> RedisServer:
    """A started server in *directory*: skips the test where none can start, fails under CI."""
    server = RedisServer(directory)
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"redis-server could not start under CI: {exc}")
        pytest.skip(f"redis-server could not start: {exc}")
    return server
