"""The web tests' servers on loopback ports: an application under uvicorn in a thread of this
process (so that coverage sees it), and a real ``seawall web`` process.

Imported by the fixture plugins ``web_fixtures`` and ``store_fixtures``.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """*app* under uvicorn in a thread of this process, on a loopback port; its URL."""
    from servers import serve_asgi

    with serve_asgi(app, backlog=64) as base:
        yield base + "/"


@contextlib.contextmanager
def seawall_web(*args: str) -> Iterator[str]:
    """A ``seawall web --port 0 ARGS`` process; the URL it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "seawall.cli", "web", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the server listens before it prints this line
        if not line:
            _, err = process.communicate(timeout=60)
            pytest.fail(f"seawall web printed nothing; stderr: {err}")
        words = [w for w in line.split() if w.startswith("http://127.0.0.1:")]
        assert words, line
        yield words[0]
    finally:
        # Ctrl-C, as a person stops it: the command exits cleanly (and coverage is saved).
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # pragma: no cover - a server that ignores SIGINT
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
