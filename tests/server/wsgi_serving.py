"""Start a waitress server for a WSGI app on a random 127.0.0.1 port, in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import waitress.server
import waitress.wasyncore


@pytest.fixture
def serve_wsgi() -> Iterator[Any]:
    started: list[tuple[Any, threading.Thread]] = []
    stopping = threading.Event()

    def start(app: Any, threads: int = 8) -> int:
        server = waitress.server.create_server(
            app,
            host="127.0.0.1",
            port=0,
            threads=threads,
            backlog=1024,
            connection_limit=1000,
            channel_timeout=5,
            clear_untrusted_proxy_headers=True,
            asyncore_loop_timeout=0.05,  # a prompt shutdown
        )

        def run() -> None:
            try:
                server.run()
            except OSError:
                # close() from the test's thread can pull a socket from under the loop's poll.
                if not stopping.is_set():
                    raise

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.append((server, thread))
        port: int = server.effective_port  # type: ignore[union-attr]
        return port

    yield start
    stopping.set()
    for server, thread in started:
        # A single-socket server's close() closes only its socket: stop the worker threads
        # (cancelling the requests still queued) and every channel too, so that nothing keeps
        # serving into later tests.
        dispatcher = server.task_dispatcher
        dispatcher.shutdown(cancel_pending=True, timeout=10)
        server.close()
        waitress.wasyncore.close_all(server._map)
        thread.join(10)
        assert not thread.is_alive()
        assert not dispatcher.threads, "waitress worker threads still running"
