"""A deliberately metastable HTTP server for tests/sim/test_sim_probe.py, in a process of its own
(so that the probe's clients and the server do not share one interpreter's CPU).

Run: python tests/sim/metastable_server.py [--shed] [--work SECONDS]; it prints its port on
the first line.

Two slots of --work seconds each (50 ms: 40 requests/s at most) and a FIFO queue without a
limit, that finishes the work of requests whose clients have gone. With --shed the same
application runs behind seawall.server.LoadShedder (2 at a time, a queue of 4 for at most
0.1 s).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import uvicorn

from seawall.server import LoadShedder


def metastable_app(slots: int = 2, work: float = 0.05) -> Any:
    semaphore: asyncio.Semaphore | None = None

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal semaphore
        if scope["type"] != "http":
            return
        if semaphore is None:
            semaphore = asyncio.Semaphore(slots)
        async with semaphore:
            await asyncio.sleep(work)  # the work: done even when the client has gone
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def main() -> None:
    work = float(sys.argv[sys.argv.index("--work") + 1]) if "--work" in sys.argv else 0.05
    app = metastable_app(work=work)
    if "--shed" in sys.argv:
        app = LoadShedder(app, max_concurrency=2, max_queue=4, max_queue_wait=0.1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        app, loop="asyncio", http="h11", ws="none", lifespan="off", log_level="critical",
        access_log=False, backlog=2048, timeout_graceful_shutdown=1,
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
