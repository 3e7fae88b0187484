"""Fixtures of the compatibility suite (see compat_httpbin.py for the HTTP server)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from compat_httpbin import Counted, Httpbin


@pytest.fixture(scope="session")
def httpbin_server() -> Iterator[Httpbin]:
    import httpbin
    import waitress.server

    counter = Counted(httpbin.app)
    # Enough threads that a /delay request an impatient client left behind does not hold up the
    # next test's requests.
    server = waitress.server.create_server(
        counter, host="127.0.0.1", port=0, threads=16, asyncore_loop_timeout=0.1
    )
    port = server.effective_port  # type: ignore[union-attr]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield Httpbin(f"http://127.0.0.1:{port}", counter)
    finally:
        # The loop runs while its socket map holds channels (connections, the wake-up pipe):
        # close them all, from the loop's own thread, and the loop returns.
        from waitress import wasyncore

        server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))  # type: ignore[union-attr]
        thread.join(5)
        server.task_dispatcher.shutdown()  # type: ignore[union-attr]
