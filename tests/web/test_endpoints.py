"""The page's JSON endpoints, on the real ``seawall web`` process, and the functions behind them."""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest

import seawall
from seawall.web import _adapter, _views

# The fixtures (a conftest.py here would shadow the `conftest` other tests import).
pytest_plugins = ("web_fixtures",)


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.load(err)


@pytest.mark.parametrize("jitter", ["none", "full", "equal", "decorrelated"])
def test_the_backoff_trace_is_the_policys_seeded_backoff(jitter: str) -> None:
    trace = _views.backoff_trace(jitter=jitter, seed=11, failures=5, max_attempts=8, cap=1.0)
    backoff = seawall.Backoff(base=0.1, cap=1.0, jitter=jitter)  # type: ignore[arg-type]
    waits = [s["wait"] for s in trace["steps"]]
    assert waits[:-1] == list(itertools.islice(backoff.delays(random.Random(11)), 5))
    assert waits[-1] is None
    assert [s["raw"] for s in trace["steps"]] == [backoff.raw(n) for n in range(6)]
    assert trace["succeeded"] is True
    assert trace["reason"] is None
    starts = [s["started"] for s in trace["steps"]]
    assert starts[1] == pytest.approx(0.05 + waits[0])  # attempt time, then the wait


@pytest.mark.parametrize(
    ("changes", "attempts", "reason"),
    [
        ({"failures": 10, "max_attempts": 3}, 3, "attempts_exhausted"),
        ({"failures": 10, "permanent_at": 2}, 2, "not_retryable"),
        ({"failures": 10, "max_attempts": 20, "timeout": 1.0, "jitter": "none"}, 4, "deadline"),
    ],
)
def test_the_backoff_trace_says_why_it_stopped(
    changes: dict[str, Any], attempts: int, reason: str
) -> None:
    trace = _views.backoff_trace(**changes)
    assert len(trace["steps"]) == attempts
    assert trace["succeeded"] is False
    assert trace["reason"] == reason
    assert trace["steps"][-1]["wait"] is None


def test_without_jitter_every_client_retries_at_the_same_instants() -> None:
    data = _views.storm_histogram(clients=300, jitter="all", max_attempts=4)
    series = {s["jitter"]: s for s in data["series"]}
    assert list(series) == ["none", "full", "equal", "decorrelated"]
    for s in series.values():
        assert s["retries"] == 300 * 3 == sum(s["counts"]) + s["overflow"]
    assert series["none"]["peak"] == 300
    assert sorted(c for c in series["none"]["counts"] if c) == [300, 300, 300]
    assert series["full"]["peak"] < 300


def test_the_storm_views_compare_like_with_like() -> None:
    data = _views.storm_histogram(jitter="all")  # the page's defaults: 1,000 clients
    series = {s["jitter"]: s for s in data["series"]}
    # The bins end at the last retry without jitter: decorrelated jitter's long tail no longer
    # widens every bin (to 86 ms, where full jitter's first bin held 1,053 retries, more than
    # the spike without jitter).
    assert data["end"] == series["none"]["last"]
    assert data["bin_width"] == pytest.approx(data["end"] / data["params"]["bins"])
    assert data["bin_width"] <= data["params"]["base"] / 2
    # Without jitter the whole fleet lands in one bin: the highest of every view.
    assert series["none"]["peak"] == 1000
    for kind in ("full", "equal", "decorrelated"):
        assert series[kind]["peak"] < series["none"]["peak"] / 1.5, (kind, series[kind]["peak"])
    # Full and equal jitter never retry later than no jitter; decorrelated's tail is counted
    # apart, not dropped.
    assert series["full"]["overflow"] == series["equal"]["overflow"] == 0
    assert series["decorrelated"]["overflow"] > 0
    assert series["decorrelated"]["last"] > data["end"]
    for s in series.values():
        assert sum(s["counts"]) + s["overflow"] == s["retries"] == 4000


def test_the_saga_history_is_the_table_the_cli_prints() -> None:
    from seawall.saga._demo import demo

    data = _adapter.saga_log(seed=3)
    printed = demo(3)[0]
    history = data["history"]
    text = next(text for title, text in printed if title == history["title"])
    lines = text.splitlines()
    assert lines[0].split() == history["columns"]
    # Each row, its cells joined as the CLI pads them, is the printed line.
    assert len(lines) - 1 == len(history["rows"]) > 5
    for line, row in zip(lines[1:], history["rows"], strict=True):
        assert line.split() == " ".join(row).split()
    # The history comes once, as a table; the other tables stay as printed.
    assert [t["title"] for t in data["tables"]] == [
        title for title, _ in printed if title != history["title"]
    ]


def test_the_multiplier_changes_when_clients_retry() -> None:
    slow = _views.storm_histogram(clients=10, jitter="full", multiplier=3.0, cap=100.0)
    fast = _views.storm_histogram(clients=10, jitter="full", multiplier=1.5, cap=100.0)
    assert slow["end"] > fast["end"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"clients": 0}, "clients"),
        ({"clients": 10**9}, "clients"),
        ({"bins": 0}, "bins"),
        ({"jitter": "bogus"}, "jitter"),
        ({"cap": 0.01}, "cap"),
        ({"multiplier": 0.5}, "multiplier"),
    ],
)
def test_storm_parameters_out_of_range_are_refused_by_name(
    kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        _views.storm_histogram(**kwargs)


def test_the_adapter_makes_plain_json_of_results() -> None:
    assert _adapter.jsonable({"a": (1.0, float("inf")), 2: [float("nan")]}) == {
        "a": [1.0, None],
        "2": [None],
    }
    with pytest.raises(KeyError):
        _adapter.run_experiment("nope")


def test_the_endpoints_on_the_served_page(page_url: str) -> None:
    status, trace = get(page_url + "api/backoff?seed=5&jitter=equal")
    assert status == 200
    assert trace == _views.backoff_trace(seed=5, jitter="equal")
    status, storm = get(page_url + "api/storm?clients=50&jitter=decorrelated&multiplier=3")
    assert status == 200
    assert storm == _views.storm_histogram(clients=50, jitter="decorrelated", multiplier=3.0)
    status, names = get(page_url + "api/experiments")
    assert [n["name"] for n in names] == list(_adapter.EXPERIMENTS)
    with urllib.request.urlopen(page_url, timeout=60) as response:
        page = response.read().decode()
    assert '<script src="/static/app.js"' in page
    assert "http" not in page.split("<body>", 1)[1].replace("http://www.w3.org", "")


def test_the_page_and_its_assets_are_served(app_url: str) -> None:
    for path, kind in [
        ("", "text/html"),
        ("static/app.js", "javascript"),
        ("static/style.css", "css"),
    ]:
        with urllib.request.urlopen(app_url + path, timeout=60) as response:
            assert kind in response.headers["Content-Type"]
            assert response.read()
    status, data = get(app_url + "api/storm?clients=20&jitter=all&bins=10")
    assert status == 200
    assert [len(s["counts"]) for s in data["series"]] == [10, 10, 10, 10]
    status, data = get(app_url + "api/experiments/hedge?seed=2")
    assert status == 200
    assert data == _adapter.run_experiment("hedge", 2)


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("api/storm?clients=many", 400, "clients must be an integer"),
        ("api/storm?cap=inf", 400, "cap must be finite"),
        ("api/storm?clients=" + "9" * 100, 400, "clients is too long"),
        ("api/backoff?sleep=3600", 400, "unknown parameter 'sleep'"),
        ("api/backoff?max_attempts=1000000", 400, "max_attempts"),
        ("api/backoff?attempt_time=100000", 400, "attempt_time"),
        ("api/experiments/nope", 404, "no experiment named 'nope'"),
        ("api/experiments/hedge?seed=-1", 400, "seed"),
        ("api/saga?seed=x", 400, "seed must be an integer"),
    ],
)
def test_bad_input_is_refused_by_name(app_url: str, query: str, status: int, message: str) -> None:
    code, body = get(app_url + query)
    assert code == status
    assert message in body["error"]


@pytest.mark.slow
def test_the_saga_endpoint_shows_the_demo_runs_log(app_url: str) -> None:
    status, data = get(app_url + "api/saga")
    assert status == 200
    text = "\n".join(t["text"] for t in data["tables"])
    assert "RETRYING" in text
    assert "COMPENSATED" in text


def test_a_port_out_of_range_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "seawall.cli", "web", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "argument --port: must be a whole number >= 0 and <= 65535" in result.stderr


def test_serve_refuses_a_bad_port() -> None:
    from seawall.web import serve

    with pytest.raises(ValueError, match="port"):
        serve(port=-1)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_adapter.EXPERIMENTS))
def test_every_experiment_gives_what_the_page_draws(name: str) -> None:
    data = _adapter.run_experiment(name, seed=1)
    json.dumps(data, allow_nan=False)  # plain JSON: no inf or nan reaches the browser
    assert data["name"] == name
    assert data["charts"]
    for chart in data["charts"]:
        assert chart["series"]
        for series in chart["series"]:
            points = len(chart["categories"]) if chart.get("kind") == "bars" else len(series["x"])
            assert points == len(series["y"]) > 0
    table = data["table"]
    assert table["rows"]
    assert all(len(row) == len(table["columns"]) for row in table["rows"])
    assert _adapter.run_experiment(name, seed=1) is data  # cached: the page asks again cheaply


def test_demo_web_serves_the_page_too() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "seawall.cli", "demo", "--web", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = next(w for w in line.split() if w.startswith("http://127.0.0.1:"))
        status, names = get(url + "api/experiments")
        assert status == 200
        assert [n["name"] for n in names] == list(_adapter.EXPERIMENTS)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=60)
        finally:  # the pipe is closed whatever the exit (a leaked one fails a later test)
            if process.stdout is not None:
                process.stdout.close()
    assert code == 130  # Ctrl-C: stopped, as the shell reports it
