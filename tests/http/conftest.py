"""Fixtures: a real HTTP server on 127.0.0.1 (see seawall_test_server) and a refused port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from seawall_test_server import Handler, HTTPServer, Server


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server()
    handler = type("BoundHandler", (Handler,), {"server_state": state})
    httpd = HTTPServer(("127.0.0.1", 0), handler)
    state.httpd = httpd
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def refused_url() -> str:
    """A URL on which nothing listens: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/ok"
