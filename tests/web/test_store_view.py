"""The store view over plain HTTP: what it shows (escaped), read-only refusals, the CSRF token
on every action, the loopback-only host check, and its bounds."""

from __future__ import annotations

import contextlib
import html
import http.client
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from seawall.saga._stores import open_store
from seawall.web import create_store_app

pytest_plugins = ("store_fixtures",)


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self.body = response.read().decode()


def request(
    url: str,
    method: str = "GET",
    path: str = "/",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        return Answer(conn.getresponse())
    finally:
        conn.close()


def post(url: str, fields: dict[str, str], **headers: str) -> Answer:
    body = urllib.parse.urlencode(fields).encode()
    sent = {"Content-Type": "application/x-www-form-urlencoded", **headers}
    return request(url, "POST", "/action", body, sent)


def token_of(page: str) -> str:
    found = re.search(r"name='csrf' value='([^']+)'", page)
    assert found, "the page has no action form"
    return found.group(1)


def status_of(url: str, run_id: str) -> str:
    store = open_store(url, create=False)
    try:
        loaded = store.load(run_id)
        assert loaded is not None
        return loaded.run.status
    finally:
        store.close()


@pytest.fixture
def readonly(store_file: str, serve_view: Any) -> Iterator[str]:
    with serve_view(create_store_app(store_file)) as url:
        yield url


@pytest.fixture
def acting(store_file: str, serve_view: Any) -> Iterator[str]:
    with serve_view(create_store_app(store_file, allow_actions=True)) as url:
        yield url


def test_the_overview_shows_counts_and_stuck_runs_escaped(readonly: str, hostile: str) -> None:
    answer = request(readonly)
    assert answer.status == 200
    page = answer.body
    assert "<script>alert" not in page and "<img src=x" not in page
    assert html.escape(hostile, quote=True) in page
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; &lt;/td&gt;&lt;script&gt;" in page
    counts = page[page.index("id='counts'") : page.index("id='stuck'")]
    # order: NEEDS_ATTENTION 2, RETRYING 1, RUNNING 1 (held), SUCCEEDED 1; overdue: waiting
    # (due years ago) and held (its lease expired).
    cells = re.findall(r"<td>(?:<span class='[^']*'>)?([^<]*)", counts)
    assert cells == ["order", "2", "1", "1", "1", "2"]
    stuck = page[page.index("id='stuck'") : page.index("id='latest'")]
    for run_id in ("parked", "hostile", "waiting", "held"):
        assert f">{run_id}</a>" in stuck
    assert ">done</a>" not in stuck
    assert stuck.count("overdue</strong>") == 2
    csp = answer.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["referrer-policy"] == "same-origin"  # a form's Origin is sent
    assert "read-only" in page and "name='csrf'" not in page


def test_the_overview_filters_like_the_command(readonly: str) -> None:
    def listed(query: dict[str, str]) -> list[str]:
        page = request(readonly, path="/?" + urllib.parse.urlencode(query)).body
        latest = page[page.index("id='latest'") :]
        return re.findall(r"<a href='/run\?id=[^']*'>([^<]*)</a>", latest)

    assert sorted(listed({})) == ["done", "held", "hostile", "parked", "waiting"]
    assert listed({"error": "CARD"}) == ["parked"]
    assert sorted(listed({"status": "needs_attention"})) == ["hostile", "parked"]
    assert sorted(listed({"stuck": "1", "error": "reset"})) == ["waiting"]
    assert listed({"older": "1d", "saga": "nope"}) == []
    bad = request(readonly, path="/?older=soon")
    assert bad.status == 400 and "older must be a duration" in bad.body
    typo = request(readonly, path="/?status=BOGUS")
    assert typo.status == 400 and "status must be one of RUNNING" in typo.body
    unknown = request(readonly, path="/?drop=table")
    assert unknown.status == 400 and "unknown parameter" in unknown.body


def test_a_runs_page_shows_its_lease_steps_and_history(readonly: str) -> None:
    page = request(readonly, path="/run?id=held").body
    assert "w-1 until 2023-11-14T22:13:50Z (expired)" in page
    assert "<dt>overdue</dt><dd><strong class='bad'>yes</strong>" in page
    assert "<td>reserve</td><td>SUCCEEDED</td>" in page
    assert "<td>started</td>" in page and "<td>attempt</td>" in page
    hostile = request(readonly, path="/run?id=hostile").body
    assert "<script>alert" not in hostile
    assert "Permanent: &lt;img src=x onerror=alert(1)&gt;" in hostile
    missing = request(readonly, path="/run?id=%3Cb%3Enope")
    assert missing.status == 404 and "&lt;b&gt;nope" in missing.body


def test_read_only_refuses_every_action(readonly: str, store_file: str) -> None:
    answer = post(readonly, {"csrf": "x", "run": "parked", "op": "retry"})
    assert answer.status == 403
    assert "read-only" in answer.body and "--allow-actions" in answer.body
    assert status_of(store_file, "parked") == "NEEDS_ATTENTION"
    page = request(readonly, path="/run?id=parked").body
    assert "<form class='action'" not in page


def test_an_action_needs_the_pages_csrf_token(acting: str, store_file: str) -> None:
    page = request(acting, path="/run?id=parked").body
    token = token_of(page)
    assert "name='csrf'" not in request(acting).body  # the overview has no action forms
    for fields in (
        {"run": "parked", "op": "retry"},  # no token
        {"csrf": "", "run": "parked", "op": "retry"},
        {"csrf": token[:-1] + ("A" if token[-1] != "A" else "B"), "run": "parked", "op": "retry"},
    ):
        answer = post(acting, fields)
        assert answer.status == 403 and "CSRF" in answer.body
    assert status_of(store_file, "parked") == "NEEDS_ATTENTION"
    # The right token, from another site's page: refused too.
    answer = post(
        acting, {"csrf": token, "run": "parked", "op": "retry"}, Origin="http://evil.example"
    )
    assert answer.status == 403
    sandboxed = post(acting, {"csrf": token, "run": "parked", "op": "retry"}, Origin="null")
    assert sandboxed.status == 403
    assert status_of(store_file, "parked") == "NEEDS_ATTENTION"
    host = acting.split("//")[1].rstrip("/")
    answer = post(acting, {"csrf": token, "run": "parked", "op": "retry"}, Origin=f"http://{host}")
    assert answer.status == 303
    assert answer.headers["location"] == "/run?id=parked&done=applied"
    assert status_of(store_file, "parked") == "RETRYING"
    shown = request(acting, path=answer.headers["location"]).body
    assert "id='notice'" in shown and "Done." in shown


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"run": "done", "op": "cancel"}, 409, "SUCCEEDED"),
        ({"run": "nope", "op": "cancel"}, 404, "no run"),
        ({"run": "parked", "op": "drop"}, 400, "op must be one of"),
    ],
)
def test_actions_that_do_not_apply(
    acting: str, fields: dict[str, str], status: int, message: str
) -> None:
    token = token_of(request(acting, path="/run?id=parked").body)
    answer = post(acting, {"csrf": token, **fields})
    assert answer.status == status and message in answer.body


def test_compensate_and_cancel(acting: str, store_file: str) -> None:
    token = token_of(request(acting, path="/run?id=parked").body)
    assert post(acting, {"csrf": token, "run": "parked", "op": "compensate"}).status == 303
    assert status_of(store_file, "parked") == "COMPENSATING"
    assert post(acting, {"csrf": token, "run": "waiting", "op": "cancel"}).status == 303
    assert status_of(store_file, "waiting") == "FAILED"
    # A finished run's page offers no action.
    assert "<form class='action'" not in request(acting, path="/run?id=waiting").body


def test_actions_are_post_only(acting: str, store_file: str) -> None:
    token = token_of(request(acting, path="/run?id=parked").body)
    query = urllib.parse.urlencode({"csrf": token, "run": "parked", "op": "cancel"})
    assert request(acting, path=f"/action?{query}").status == 405
    assert status_of(store_file, "parked") == "NEEDS_ATTENTION"


def test_a_foreign_host_name_is_refused(readonly: str) -> None:
    # A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) names its host.
    answer = request(readonly, headers={"Host": "evil.example"})
    assert answer.status == 403 and "127.0.0.1 and localhost only" in answer.body
    assert request(readonly, path="/run?id=parked", headers={"Host": "evil.example"}).status == 403
    assert request(readonly, headers={"Host": "localhost:1"}).status == 200


def test_bodies_are_bounded(acting: str) -> None:
    token = token_of(request(acting, path="/run?id=parked").body)
    big = post(acting, {"csrf": token, "run": "x" * 5000, "op": "retry"})
    assert big.status == 413
    chunked = request(
        acting,
        "POST",
        "/action",
        body=iter([b"csrf=", token.encode()]),  # type: ignore[arg-type]
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Transfer-Encoding": "chunked",
        },
    )
    assert chunked.status == 413
    text_body = request(
        acting,
        "POST",
        "/action",
        body=b'{"csrf": "x"}',
        headers={"Content-Type": "application/json"},
    )
    assert text_body.status == 415
    fields = "&".join(f"f{i}=1" for i in range(20))
    many = request(
        acting,
        "POST",
        "/action",
        body=fields.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert many.status == 400


def test_the_view_never_creates_a_store(tmp_path: Any) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(ValueError, match=r"typo\.db"):
        create_store_app(f"sqlite:///{path}")
    assert not path.exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"allow_actions": "yes"}, TypeError, "allow_actions"),
        ({"overdue_after": -1}, ValueError, "overdue_after"),
        ({"refresh": float("nan")}, ValueError, "refresh"),
    ],
)
def test_bad_parameters_are_refused_by_name(
    store_file: str, kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        create_store_app(store_file, **kwargs)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--allow-actions"], "--allow-actions: give the store"),
        (["--store", "sqlite:///{tmp}/typo.db"], "typo.db: the file does not exist"),
        (["--store", "{store}", "--host", "0.0.0.0"], "127.0.0.1 or ::1 only"),
        (["--store", "{store}", "--overdue-after", "soon"], "--overdue-after must be"),
        (
            ["--store", "postgresql://ops:hunter2@127.0.0.1:1/db"],
            "cannot connect to the saga store postgresql://[redacted]@127.0.0.1:1/db",
        ),
    ],
)
def test_seawall_web_store_errors(
    store_file: str,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    from seawall.cli import main

    args = [a.format(tmp=tmp_path, store=store_file) for a in argv]
    try:
        code = main(["web", "--port", "0", *args])
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    assert code != 0
    assert message in err and "hunter2" not in err
    assert not (tmp_path / "typo.db").exists()


def test_a_status_written_by_hand_is_shown_without_its_control_characters(
    store_file: str, serve_view: Any
) -> None:
    # Another writer of the store (or an edit by hand) left a status with an escape sequence;
    # the counts table makes a column of each status.
    path = store_file.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE seawall_saga_runs SET status = ? WHERE run_id = 'done'", ("OK\x1b[5m\u202e",)
        )
    with serve_view(create_store_app(store_file)) as url:
        page = request(url).body
    assert "OK\\x1b[5m\\u202e" in page
    assert not [
        c for c in page if (c < " " and c != "\n") or "\x7f" <= c <= "\x9f" or c == "\u202e"
    ]
