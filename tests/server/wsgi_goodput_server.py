"""A waitress server of known capacity, in a process of its own, for the WSGI goodput proof.

    python wsgi_goodput_server.py shed|queue CONCURRENCY SERVICE MAX_QUEUE_WAIT THREADS

The application holds each request for SERVICE seconds behind CONCURRENCY slots; with ``shed``
it runs behind seawall's WSGI LoadShedder. The server prints its port on a line of its own, and
serves until its standard input closes. ``GET /in-flight`` answers the shedder's count of
requests still running, bypassing the shedder. A process of its own, as a WSGI server is in
production: its threads never compete with the load generator for one interpreter's lock.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

import waitress.server

from seawall.server.wsgi import LoadShedder


class CapacityApp:
    """Serves at most *concurrency* requests at once, each for *service* seconds."""

    def __init__(self, concurrency: int, service: float) -> None:
        self._slots = threading.Semaphore(concurrency)
        self._service = service

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self._slots:
            time.sleep(self._service)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]


def main() -> None:
    mode, concurrency, service, max_queue_wait, threads = sys.argv[1:6]
    app: Any = CapacityApp(int(concurrency), float(service))
    shedder = None
    if mode == "shed":
        shedder = app = LoadShedder(
            app,
            max_concurrency=int(concurrency),
            max_queue=int(concurrency),
            max_queue_wait=float(max_queue_wait),
        )

    def outer(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/in-flight":
            body = str(shedder.stats.in_flight if shedder else 0).encode()
            start_response("200 OK", [("Content-Length", str(len(body)))])
            return [body]
        result: Iterable[bytes] = app(environ, start_response)
        return result

    server = waitress.server.create_server(
        outer,
        host="127.0.0.1",
        port=0,
        threads=int(threads),
        backlog=1024,
        connection_limit=1000,
        channel_timeout=5,
        asyncore_loop_timeout=0.05,
    )
    print(server.effective_port, flush=True)  # type: ignore[union-attr]
    threading.Thread(target=server.run, daemon=True).start()
    sys.stdin.read()  # until the test closes the pipe (or dies)


if __name__ == "__main__":
    main()
