"""httpbin under waitress on 127.0.0.1, counted (the fixture is in conftest.py).

httpbin (from the package index) is an HTTP server nobody here wrote; waitress is a real WSGI
server. httpbin does not count requests, so a small WSGI middleware in front of it counts every
request that reaches the server, by a ``x-compat-key`` header the test sets (one key per client
and endpoint), before httpbin answers it.

The same middleware serves one path of its own, ``/_compat/pushback``, for the ``Retry-After``
forms httpbin cannot send (``/status/503`` has no ``Retry-After``): it answers
``?status=503&retry_after=<value>`` for the first ``fail`` requests of a key, then 200.
"""

from __future__ import annotations

import collections
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Counted:
    """WSGI middleware: count requests per ``x-compat-key``, then pass them to *app*."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    def count(self, key: str) -> int:
        with self.lock:
            return self.counts[key]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        key = environ.get("HTTP_X_COMPAT_KEY", "")
        with self.lock:
            self.counts[key] += 1
            seen = self.counts[key]
        if environ.get("PATH_INFO") == "/_compat/pushback":
            return _pushback(environ, start_response, seen)
        return self.app(environ, start_response)


def _pushback(environ: dict[str, Any], start_response: Callable[..., Any], seen: int) -> Any:
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    fail = int(query.get("fail", ["1"])[0])
    if seen <= fail:
        status = query.get("status", ["503"])[0]
        headers = [("Content-Type", "text/plain"), ("Content-Length", "4")]
        if "retry_after" in query:
            headers.append(("Retry-After", query["retry_after"][0]))
        start_response(f"{status} Pushback", headers)
        return [b"busy"]
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


class Httpbin:
    """A running httpbin: its base ``url`` and the request ``counter``."""

    def __init__(self, url: str, counter: Counted) -> None:
        self.url = url
        self.counter = counter

    def count(self, key: str) -> int:
        """Requests that reached the server with ``x-compat-key: key``."""
        return self.counter.count(key)
