"""Real servers on 127.0.0.1 for the tests: an ASGI application under uvicorn, in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


@contextlib.contextmanager
def serve_asgi(app: Any, *, backlog: int = 1024) -> Iterator[str]:
    """Serve *app* with uvicorn on a random port of 127.0.0.1; yield its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        loop="asyncio",
        http="h11",
        ws="none",
        lifespan="off",
        log_level="critical",  # injected resets are logged as application errors otherwise
        access_log=False,
        backlog=backlog,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        limit = time.monotonic() + 60  # a bound for a failure only: a loaded machine is slow
        while not server.started:
            assert time.monotonic() < limit, "server did not start"
            assert thread.is_alive(), "server thread died"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive()
