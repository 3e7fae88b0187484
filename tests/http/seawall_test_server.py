"""A real HTTP server on 127.0.0.1 for the integration tests (stdlib, threaded, random port).

Behaviours are chosen by path; counts are per (method, path) so that each test sees its own:

- ``/ok``: 200 with body ``ok``.
- ``/status/<code>``: always that status.
- ``/flaky/<n>/<code>``: the first n requests get <code>, then 200. Query: ``retry_after=<value>``
  (sent verbatim as Retry-After), ``overloaded=envoy|seawall``.
- ``/reset-head/<n>``: the first n requests: half a status line, then a TCP reset.
- ``/reset-body/<n>``: the first n requests: headers declaring 100 bytes, 10 bytes, then a reset.
- ``/stall/<n>``: the first n requests: no answer for up to ``STALL_SECONDS`` (then the
  connection is closed); later ones: 200.
- ``/drip-head/<n>``: the first n requests: the whole response (status line, headers, body) one
  byte every ``DRIP_INTERVAL`` (``DRIP_SECONDS`` in all, each read answered well within any
  read timeout).
- ``/drip-body/<n>``: the first n requests: the headers at once (``Content-Length:
  DRIP_BYTES``), then the body one byte every ``DRIP_INTERVAL``.
- ``/odd-length``: 200 whose ``Content-Length`` is ``\xb2`` (a superscript two: a "digit" to
  ``str.isdigit`` that ``int()`` refuses), then the body ``ok`` and a close.
- ``/huge-length/<digits>``: 200 whose ``Content-Length`` is that many nines (past 4,300 digits
  ``int()`` refuses to convert), then the body ``ok`` and a close.

Every request is recorded (method, path, headers, body).
"""

from __future__ import annotations

import dataclasses
import http.server
import socket
import struct
import sys
import threading
import urllib.parse
from typing import Any

# A stalled or dripping answer lasts 10 s (the test's end releases it at once), and a test that
# times how soon its client gave up bounds it at WELL_BEFORE: at load 10 on two cores a client
# cut at 0.3 s is free well within 5 s, and one that waited for the server is not.
STALL_SECONDS = 10.0
DRIP_INTERVAL = 0.05
DRIP_BYTES = 200
DRIP_SECONDS = DRIP_BYTES * DRIP_INTERVAL
WELL_BEFORE = min(STALL_SECONDS, DRIP_SECONDS) / 2
# The hedge delay of tests that need a quick answer to come before the copy, and a copy sent
# after the first request to reach the server after it: loopback answers here take milliseconds,
# but at load 10 on two cores one in a hundred takes half a second.
HEDGE_DELAY = 1.0
# The read timeout that turns a stall into a retry, when the retry must then be answered within
# it: far shorter than the stall, longer than a loaded machine's slowest loopback answer.
READ_TIMEOUT = 1.0
#: The head /drip-head/<n> drips: DRIP_BYTES long, padded with a header.
_DRIP_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX-Pad: \r\n\r\ndripped"
DRIP_HEAD = _DRIP_HEAD.replace(b"X-Pad: ", b"X-Pad: " + b"p" * (DRIP_BYTES - len(_DRIP_HEAD)))


@dataclasses.dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HTTPServer(http.server.ThreadingHTTPServer):
    """The standard threading server, silent when a client hung up before its answer was
    written (a test whose attempt timed out): only other errors are printed."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Server:
    """The test server's address and what it received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.release = threading.Event()
        self.httpd: HTTPServer | None = None
        self.url = ""

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return self.counts.get((method, path), 0)

    def requests_to(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so that connection reuse is exercised
    disable_nagle_algorithm = True  # headers and body go out at once (no delayed-ACK stalls)
    server_state: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self, status: int, body: bytes = b"ok", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self, partial: bytes) -> None:
        self.wfile.write(partial)
        self.wfile.flush()
        # SO_LINGER with a zero timeout: close() sends a TCP RST instead of a FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _drip(self, head: bytes, body: bytes) -> None:
        """Send *head* at once and *body* a byte at a time; stop when the client hangs up."""
        release = self.server_state.release
        try:
            self.wfile.write(head)
            self.wfile.flush()
            for i in range(len(body)):
                if release.wait(DRIP_INTERVAL):
                    break  # the test is over
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
        except OSError:
            pass  # the client gave up and closed the connection: what the tests expect
        self.close_connection = True

    def _handle(self) -> None:
        state = self.server_state
        body = self._body()
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        with state.lock:
            key = (self.command, path)
            n = state.counts[key] = state.counts.get(key, 0) + 1
            state.received.append(
                Received(self.command, path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
        parts = path.strip("/").split("/")
        kind = parts[0]
        if kind == "ok":
            self._send(200, b"ok")
        elif kind == "status":
            self._send(int(parts[1]), b"status")
        elif kind == "flaky":
            fails, code = int(parts[1]), int(parts[2])
            if n <= fails:
                headers = {}
                if "retry_after" in query:
                    headers["Retry-After"] = query["retry_after"]
                if query.get("overloaded") == "envoy":
                    headers["x-envoy-overloaded"] = "true"
                elif query.get("overloaded") == "seawall":
                    headers["x-seawall-overloaded"] = "1"
                self._send(code, b"fail", headers)
            else:
                self._send(200, f"ok after {n}".encode())
        elif kind == "reset-head" and n <= int(parts[1]):
            self._reset(b"HTTP/1.1 2")
        elif kind == "reset-body" and n <= int(parts[1]):
            self._reset(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        elif kind == "stall" and n <= int(parts[1]):
            state.release.wait(STALL_SECONDS)  # bounded: the client's read timeout is far shorter
            self.close_connection = True
        elif kind == "drip-head" and n <= int(parts[1]):
            self._drip(b"", DRIP_HEAD)
        elif kind == "drip-body" and n <= int(parts[1]):
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % DRIP_BYTES
            self._drip(head, b"d" * DRIP_BYTES)
        elif kind == "huge-length":
            length = b"9" * int(parts[1])
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: " + length + b"\r\n\r\nok")
            self.close_connection = True
        elif kind == "odd-length":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nok")
            self.close_connection = True
        elif kind in ("reset-head", "reset-body", "stall", "drip-head", "drip-body"):
            self._send(200, f"ok after {n}".encode())
        else:
            self._send(404, b"no such test route")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle
