"""The bounds the store view adds to the page server's: a small form body is passed on whole,
a larger one or one of no declared length is refused, and a body that never arrives in full
does not hold the request (real uvicorn on a loopback port, raw sockets for what a browser would
not send)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from seawall.web._limits import Bounded


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """Answers with the body it received."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    payload = b"got:" + body
    headers = [(b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def address() -> Iterator[tuple[str, int]]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    app = Bounded(echo, time_limit=1.0, max_body=64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def exchange(address: tuple[str, int], raw: bytes) -> bytes:
    """Send *raw*, keep the connection open, and read the answer (the server closes it)."""
    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(raw)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.split(b"\r\n\r\n", 1)[1]:
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def post(length: int, body: bytes, extra: str = "") -> bytes:
    head = (
        f"POST /action HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{extra}\r\n"
    )
    return head.encode() + body


def test_a_small_body_is_passed_on_whole(address: tuple[str, int]) -> None:
    answer = exchange(address, post(11, b"csrf=abc&x="))
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"got:csrf=abc&x=")


def test_a_body_over_the_bound_is_refused_before_it_is_read(address: tuple[str, int]) -> None:
    answer = exchange(address, post(65, b"x" * 65))
    assert answer.startswith(b"HTTP/1.1 413") and b"over 64 bytes" in answer


def test_a_body_of_no_declared_length_is_refused(address: tuple[str, int]) -> None:
    raw = (
        b"POST /action HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n0\r\n\r\n"
    )
    assert exchange(address, raw).startswith(b"HTTP/1.1 413")


def test_a_body_that_never_arrives_does_not_hold_the_request(address: tuple[str, int]) -> None:
    # Ten bytes of the forty declared, then nothing: answered once the time limit passes.
    answer = exchange(address, post(40, b"csrf=abcde"))
    assert answer.startswith(b"HTTP/1.1 400") and b"cut short" in answer


def test_max_body_is_checked_by_name() -> None:
    with pytest.raises(ValueError, match="max_body"):
        Bounded(echo, time_limit=1.0, max_body=-1)
    with pytest.raises(TypeError, match="max_body"):
        Bounded(echo, time_limit=1.0, max_body=1.5)  # type: ignore[arg-type]
