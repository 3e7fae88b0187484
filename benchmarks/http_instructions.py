"""Instructions per request of the HTTP integrations, counted under valgrind's cachegrind.

The timing benchmark (``http_overhead.py``) runs on a shared machine, where a ratio moves by a
percent or two between runs. The instructions a request executes do not depend on the
neighbours. This script counts them for the same contenders: it runs itself under
``valgrind --tool=cachegrind`` twice per contender (a warm-up of ``--warmup`` requests, then
that plus ``--requests`` more) and gives the difference per request. Each row gives the count
and its excess over the bare client. httpx and requests run in-process, as in the timing
benchmark (no socket), and count exactly the same from run to run. aiohttp talks to an aiohttp
server in the same process, whose event loop makes the count move by a thousand or so.

Instructions are not time: an instruction of the interpreter's own loop costs more than one
of a C routine, so a small excess in instructions can weigh more in time. The two benchmarks
are read together.

Usage: python benchmarks/http_instructions.py [--requests 2000] [--warmup 100]
(needs ``valgrind`` on the PATH).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from typing import Any

import _cachegrind as cachegrind

CONTENDERS = {
    "httpx.Client (MockTransport)": ("httpx:bare", "httpx:seawall", "httpx:httpx-retries"),
    "requests.Session (prepared urllib3 response)": (
        "requests:bare",
        "requests:seawall",
        "requests:urllib3 Retry",
    ),
    "aiohttp.ClientSession (aiohttp server on 127.0.0.1)": (
        "aiohttp:bare",
        "aiohttp:seawall",
        "aiohttp:a middleware passing it on",
    ),
}


def child(kind: str, number: int) -> None:
    """Send *number* requests through the contender *kind* ("library:name")."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import http_overhead as bench

    library, name = kind.split(":", 1)
    if library == "httpx":
        send = bench.httpx_sync()[name]
        gc.disable()
        for _ in range(number):
            send()
    elif library == "requests":
        send = bench.requests_sync()[name]
        gc.disable()
        for _ in range(number):
            send()
    else:
        asyncio.run(_aiohttp(name, number))


async def _aiohttp(name: str, number: int) -> None:
    import aiohttp
    import http_overhead as bench

    import seawall.aiohttp

    async def passing(request: Any, handler: Any) -> Any:
        return await handler(request)

    middlewares: dict[str, Any] = {
        "bare": (),
        "seawall": (seawall.aiohttp.RetryMiddleware(),),
        "a middleware passing it on": (passing,),
    }
    runner, url = await bench._serve()
    try:
        async with aiohttp.ClientSession(middlewares=middlewares[name]) as session:
            gc.disable()
            for _ in range(number):
                async with session.get(url) as response:
                    await response.read()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    cachegrind.require_valgrind()
    print(f"instructions per request, {args.requests} requests after {args.warmup}")
    cachegrind.warm(__file__, [kind for kinds in CONTENDERS.values() for kind in kinds])
    for title, kinds in CONTENDERS.items():
        print()
        print(f"| {title} | instructions/request | over bare |")
        print("|---|---:|---:|")
        bare = None
        for kind in kinds:
            each = cachegrind.per_call(__file__, kind, args.requests, args.warmup)
            bare = each if bare is None else bare
            print(f"| {kind.split(':', 1)[1]} | {each:,.0f} | {each - bare:+,.0f} |")


if __name__ == "__main__":
    main()
