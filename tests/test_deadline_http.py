"""Deadline headers over a real socket: a stdlib server on 127.0.0.1 reads what a client sent."""

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import seawall

SERVER_MAX = 10.0


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        # self.headers is an email.message.Message: not a Mapping, but it has items().
        allowed = seawall.propagation.timeout_from_headers(self.headers, max_seconds=SERVER_MAX)
        with seawall.propagation.deadline_from_headers(self.headers, max_seconds=SERVER_MAX):
            left = seawall.remaining()
        body = json.dumps({"allowed": allowed, "left": left}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def get(url: str, headers: dict[str, str]) -> dict[str, float]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=5) as response:
        result: dict[str, float] = json.loads(response.read())
        return result


def test_the_server_sees_the_clients_time_left(url: str) -> None:
    with seawall.deadline(5.0):
        headers = seawall.propagation.deadline_headers(margin=0.01)
        seen = get(url, headers)
    # The client had 5 s, kept back 0.01 s; a local round trip takes far less than 2 s, on a
    # loaded machine too.
    assert 2.99 < seen["allowed"] <= 4.99
    assert seen["left"] <= seen["allowed"]


def test_the_server_clamps_a_greedy_client(url: str) -> None:
    before = seawall.propagation.deadline_header_counts()
    seen = get(url, {"grpc-timeout": "99999999H", "x-request-deadline": "99999999"})
    assert seen["allowed"] == SERVER_MAX
    after = seawall.propagation.deadline_header_counts()
    # Read twice per request (timeout_from_headers and deadline_from_headers).
    assert after.clamped == before.clamped + 2


def test_the_server_ignores_garbage_and_uses_its_own_maximum(url: str) -> None:
    before = seawall.propagation.deadline_header_counts()
    seen = get(url, {"grpc-timeout": "-1S", "x-request-deadline": "soon"})
    assert seen["allowed"] == SERVER_MAX
    after = seawall.propagation.deadline_header_counts()
    assert after.invalid == before.invalid + 4
