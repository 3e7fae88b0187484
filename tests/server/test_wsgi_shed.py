"""seawall.server.wsgi.LoadShedder around a Flask app under waitress, on 127.0.0.1."""

from __future__ import annotations

import threading
from typing import Any

import flask
import httpx
import pytest
from wsgi_serving import serve_wsgi

import seawall
from seawall.server.wsgi import OVERLOADED_HEADER, LoadShedder

__all__ = ["serve_wsgi"]  # the fixture, imported for pytest


class Held:
    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = 0
        self.remaining: list[float] = []
        self.lock = threading.Lock()


def flask_app(held: Held) -> flask.Flask:
    app = flask.Flask("test")

    @app.get("/hold")
    def hold() -> str:
        with held.lock:
            held.entered += 1
        held.gate.wait(10)
        return "held"

    @app.get("/left")
    def left() -> str:
        held.remaining.append(seawall.remaining())
        return "ok"

    return app


def wait_for(predicate: Any) -> None:
    import time

    limit = time.monotonic() + 30  # a bound for a failure only
    while not predicate():
        assert time.monotonic() < limit, "timed out"
        time.sleep(0.005)


def test_limit_queue_and_cheap_rejection(serve_wsgi: Any) -> None:
    held = Held()
    app = flask_app(held)
    shedder = LoadShedder(app.wsgi_app, max_concurrency=1, max_queue=1, max_queue_wait=5.0)
    app.wsgi_app = shedder  # type: ignore[method-assign]
    url = f"http://127.0.0.1:{serve_wsgi(app)}"
    results: dict[str, httpx.Response] = {}

    def get(name: str) -> None:
        results[name] = httpx.get(url + "/hold", timeout=10)

    first = threading.Thread(target=get, args=("first",))
    first.start()
    wait_for(lambda: held.entered == 1)
    second = threading.Thread(target=get, args=("second",))
    second.start()
    wait_for(lambda: shedder.stats.queued == 1)
    third = threading.Thread(target=get, args=("third",))
    third.start()
    second.join(5)  # newest first: the oldest waiter is shed to make room
    rejected = results["second"]
    assert rejected.status_code == 503
    assert rejected.headers["retry-after"] == "1"
    assert rejected.headers[OVERLOADED_HEADER] == "1"
    held.gate.set()
    first.join(5)
    third.join(5)
    assert (results["first"].text, results["third"].text) == ("held", "held")
    assert held.entered == 2
    assert shedder.stats.admitted == 2
    assert shedder.stats.shed["queue_full"] == 1
    # The server closes the response (freeing the slot) just after the client has read it.
    wait_for(lambda: (shedder.stats.in_flight, shedder.stats.queued) == (0, 0))


def test_queue_wait_is_bounded(serve_wsgi: Any) -> None:
    held = Held()
    app = flask_app(held)
    shedder = LoadShedder(app.wsgi_app, max_concurrency=1, max_queue_wait=0.1, status=429)
    url = f"http://127.0.0.1:{serve_wsgi(shedder)}"
    first = threading.Thread(target=httpx.get, args=(url + "/hold",), kwargs={"timeout": 10})
    first.start()
    wait_for(lambda: held.entered == 1)
    r = httpx.get(url + "/hold", timeout=5)
    assert r.status_code == 429
    assert shedder.stats.shed["queue_timeout"] == 1
    held.gate.set()
    first.join(5)
    wait_for(lambda: shedder.stats.in_flight == 0)


def test_deadline_intake(serve_wsgi: Any) -> None:
    held = Held()
    shedder = LoadShedder(flask_app(held).wsgi_app, max_concurrency=4, max_request_time=3.0)
    url = f"http://127.0.0.1:{serve_wsgi(shedder)}"
    with httpx.Client(base_url=url, timeout=5) as client:
        assert client.get("/left", headers={"x-request-deadline": "1500"}).status_code == 200
        assert client.get("/left").status_code == 200
        assert client.get("/left", headers={"grpc-timeout": "0n"}).status_code == 504
        assert client.get("/left", headers={"grpc-timeout": "garbage"}).status_code == 200
    a, b, c = held.remaining
    assert 1.0 < a <= 1.5
    assert 2.5 < b <= 3.0
    assert 2.5 < c <= 3.0  # a malformed header is ignored: the server's own limit
    assert shedder.stats.shed["deadline"] == 1


def test_no_deadline_and_no_limit_installs_nothing(serve_wsgi: Any) -> None:
    held = Held()
    shedder = LoadShedder(flask_app(held).wsgi_app, max_concurrency=1)
    url = f"http://127.0.0.1:{serve_wsgi(shedder)}"
    assert httpx.get(url + "/left", timeout=5).text == "ok"
    assert held.remaining == [float("inf")]


def test_bad_arguments_name_the_parameter() -> None:
    app = flask.Flask("bad").wsgi_app
    with pytest.raises(ValueError, match="max_concurrency"):
        LoadShedder(app, max_concurrency=0)
    with pytest.raises(ValueError, match="status"):
        LoadShedder(app, max_concurrency=1, status=500)
    with pytest.raises(TypeError, match="app"):
        LoadShedder(3, max_concurrency=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_queue_wait"):
        LoadShedder(app, max_concurrency=1, max_queue_wait=-1)
