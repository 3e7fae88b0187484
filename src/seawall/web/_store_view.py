"""The store view: a user's saga store in a browser (``seawall web --store URL``).

Pages rendered on the server, from the store, as HTML in which everything read from the store
is escaped (names, errors, inputs and results are what services and users wrote: untrusted),
under a Content-Security-Policy that allows no inline script. The overview shows the counts by
saga and status, the stuck runs (NEEDS_ATTENTION, or overdue on the store's clock) and the
latest runs, filtered as ``seawall saga list`` filters them; a run's page shows its lease, its
steps and its latest history.

Actions (retry, compensate, cancel) are refused unless the view was started with
*allow_actions*; each is a POST carrying the view's CSRF token (a random value the server made
at start and puts in its own forms only), from a page on the same origin, answered with a
redirect to the run's page. The store is read and changed in one worker thread at a time, a few
requests waiting; everything shown is bounded (runs per table, history lines, cell lengths).
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import html
import json
import secrets
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from seawall._core.redact import escape_controls, redact_text
from seawall.saga._model import Status, utc
from seawall.saga._operations import (
    OVERDUE_AFTER,
    is_overdue,
    lease_of,
    operate,
    parse_duration,
    run_status,
)
from seawall.saga._rows import Loaded, to_history, to_run
from seawall.saga._store import Store
from seawall.saga._stores import open_store
from seawall.web._limits import Bounded, Busy, Gate

__all__ = ["ACTIONS", "MAX_BODY", "StoreView", "create_store_app"]

#: The actions a page offers, by the name the form sends, with the operation each applies.
ACTIONS: Final = {"retry": "retry_now", "compensate": "compensate", "cancel": "cancel"}
#: The longest form body accepted (an action's form is under 400 bytes).
MAX_BODY: Final = 2048
#: Runs per table, history lines per run, characters per cell.
MAX_RUNS: Final = 100
MAX_HISTORY: Final = 500
MAX_CELL: Final = 300
#: Seconds a request may take, waiting in line included.
REQUEST_TIME_LIMIT: Final = 30.0
#: The host names a request may give (a DNS-rebinding page gives its own: refused).
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})

_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Not no-referrer: under it a browser sends "Origin: null" with a form, and the same-origin
    # check of an action could not tell the view's own page from a sandboxed one.
    "Referrer-Policy": "same-origin",
}


def text(value: object, limit: int = MAX_CELL) -> str:
    """*value* as HTML text: control characters shown escaped, cut at *limit* characters,
    HTML's special characters escaped."""
    shown = escape_controls("-" if value is None else str(value))
    if len(shown) > limit:
        shown = shown[: limit - 3] + "..."
    return html.escape(shown, quote=True)


def _when(value: float | None) -> str:
    moment = utc(value)
    if moment is None:
        return "-"
    return (
        moment.astimezone(datetime.timezone.utc)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )


def _table(
    header: Sequence[str], rows: Iterable[Sequence[str]], css: str = "", caption: str = ""
) -> str:
    """A table of cells already in HTML (each escaped by the caller)."""
    head = "".join(f"<th scope='col'>{html.escape(escape_controls(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{caption}</caption>" if caption else ""
    return (
        f"<div class='scroll'><table class='{css}'>{cap}<thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def _run_link(run_id: str) -> str:
    href = "/run?" + urllib.parse.urlencode({"id": run_id})
    return f"<a href='{html.escape(href, quote=True)}'>{text(run_id, 80)}</a>"


class Unavailable(Exception):
    """The store cannot be reached now (a reconnection is under way)."""


class Refused(Exception):
    """An action refused: its status code and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StoreView:
    """The pages of one store; see the module's docstring.

    Args:
        url: the store's URL (opened without creating or migrating it).
        allow_actions: offer and accept retry, compensate and cancel.
        overdue_after: seconds due work may wait unclaimed before its run is overdue.
        refresh: seconds between the overview's reloads in the browser (0: never).
        clock: the store's clock (tests); by default the store's own.
    """

    def __init__(
        self,
        url: str,
        *,
        allow_actions: bool = False,
        overdue_after: float = OVERDUE_AFTER,
        refresh: float = 5.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(allow_actions, bool):
            raise TypeError(f"allow_actions must be a bool, got {allow_actions!r}")
        for name, value in (("overdue_after", overdue_after), ("refresh", refresh)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number of seconds, got {value!r}")
            if not 0 <= value < 86400 * 365:
                raise ValueError(f"{name} must be between 0 and a year, got {value!r}")
        self.store: Store = open_store(url, clock, create=False)
        self.where = redact_text(url)
        self.allow_actions = allow_actions
        self.overdue_after = float(overdue_after)
        self.refresh = float(refresh)
        #: The token every action's form carries; made once per server, never shown elsewhere.
        self.token = secrets.token_urlsafe(32)
        # One connection, used by one thread at a time; a few requests wait, the rest are busy.
        self.gate = Gate("store", running=1, waiting=16)

    def close(self) -> None:
        self.store.close()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """*fn* on the store; a store that went away (a restart, a failover) is reconnected to
        for the next request, and this one raises :class:`Unavailable`."""
        try:
            return fn(*args)
        except Exception as exc:
            if self.store.conflict(exc):  # another transaction holds the rows for a moment
                raise Unavailable(
                    f"the saga store {self.where} is busy with these runs; try again shortly"
                ) from None
            if not self.store.unavailable(exc):
                raise
            try:
                fresh = self.store.clone()
            except Exception:
                fresh = None  # still down: the next request tries again
            if fresh is not None:
                old, self.store = self.store, fresh
                with contextlib.suppress(Exception):
                    old.close()
            raise Unavailable(
                f"the saga store {self.where} cannot be reached now; try again shortly"
            ) from None

    # -- pages ------------------------------------------------------------------------------

    def _page(self, title: str, body: str, *, live: bool = False) -> str:
        mode = (
            "<p class='mode'>actions allowed</p>"
            if self.allow_actions
            else "<p class='mode'>read-only (start with --allow-actions to act on runs)</p>"
        )
        refresh = f" data-refresh='{self.refresh:g}'" if live and self.refresh else ""
        return (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{text(title)}</title><link rel='icon' href='data:,'>"
            "<link rel='stylesheet' href='/static/style.css'>"
            "<link rel='stylesheet' href='/static/store.css'>"
            "<script src='/static/store.js' defer></script></head>"
            f"<body{refresh}><header><h1><a href='/'>seawall</a> "
            f"<span class='sub'>saga store {text(self.where)}</span></h1>{mode}</header>"
            f"<main id='main'>{body}</main></body></html>"
        )

    def overview(self, params: dict[str, str]) -> str:
        """Counts by saga and status, the stuck runs, and the latest runs (filtered)."""
        status = params.get("status") or None
        saga = params.get("saga") or None
        error = params.get("error") or None
        older = params.get("older") or None
        older_than = None if older is None else parse_duration(older, "older")
        if status is not None:
            status = run_status(status).value
        store = self.store
        now = store.now()
        counts = store.counts_by_saga(now, self.overdue_after)
        stuck = store.find_runs(now, stuck_after=self.overdue_after, limit=MAX_RUNS)
        latest = store.find_runs(
            now,
            status=status,
            saga=saga,
            error_contains=error,
            older_than=older_than,
            stuck_after=self.overdue_after if params.get("stuck") else None,
            limit=MAX_RUNS,
        )
        statuses = sorted({k for by in counts.values() for k in by if k != "overdue"})
        count_rows = [
            [
                text(name),
                *(text(by.get(k, 0)) for k in statuses),
                f"<span class='{'bad' if by.get('overdue') else ''}'>{by.get('overdue', 0)}</span>",
            ]
            for name, by in sorted(counts.items())
        ]
        parts = [
            f"<p class='now'>store time {text(_when(now))}; overdue: due work unclaimed for "
            f"{self.overdue_after:g} s, or an expired lease</p>",
            "<section id='counts'><h2>Runs by saga and status</h2>",
            _table(["saga", *statuses, "overdue"], count_rows, "counts")
            if count_rows
            else "<p>no runs</p>",
            "</section><section id='stuck'><h2>Stuck and overdue runs</h2>",
            self._runs_table(stuck, now) if stuck else "<p>none</p>",
            "</section><section id='latest'><h2>Latest runs</h2>",
            self._filter_form(params),
            self._runs_table(latest, now) if latest else "<p>no runs match</p>",
            "</section>",
        ]
        return self._page("seawall saga store", "".join(parts), live=True)

    def _filter_form(self, params: dict[str, str]) -> str:
        def field(name: str, label: str) -> str:
            value = text(params.get(name, ""), 200)
            return f"<label>{label}<input name='{name}' value='{value}'></label>"

        checked = " checked" if params.get("stuck") else ""
        return (
            "<form id='filters' class='controls' method='get' action='/'>"
            + field("status", "status")
            + field("saga", "saga")
            + field("error", "error contains")
            + field("older", "older than (90s, 5m, 2h)")
            + f"<label><span>stuck only</span><input type='checkbox' name='stuck' value='1'"
            f"{checked}></label><button type='submit'>Filter</button></form>"
        )

    def _runs_table(self, found: Sequence[Loaded], now: float) -> str:
        rows = []
        for item in found:
            run = item.run
            current = next(
                (s for s in item.steps if s.status not in ("SUCCEEDED", "COMPENSATED")),
                None,
            )
            overdue = is_overdue(run, now, self.overdue_after)
            rows.append(
                [
                    _run_link(run.run_id),
                    text(run.saga, 80),
                    f"<span class='status'>{text(run.status, 40)}</span>",
                    text(current.name if current else "-", 80),
                    text(current.last_error if current else None),
                    text(run.reason),
                    text(_when(run.updated_at)),
                    "<strong class='bad'>overdue</strong>" if overdue else "",
                ]
            )
        return _table(
            ["run", "saga", "status", "step", "last error", "reason", "updated", ""],
            rows,
            "runs",
        )

    def run_page(self, run_id: str, done: str | None = None) -> str | None:
        """One run: its lease, steps, latest history and actions; ``None`` if there is none."""
        store = self.store
        loaded = store.load(run_id)
        if loaded is None:
            return None
        now = store.now()
        rows, total = store.latest_history(run_id, MAX_HISTORY)
        run = to_run(loaded)
        history = to_history(rows)
        lease = lease_of(loaded.run, now)
        overdue = is_overdue(loaded.run, now, self.overdue_after)
        facts = [
            ("run", text(run.run_id)),
            ("saga", text(run.saga)),
            ("status", f"<span id='run-status' class='status'>{text(run.status.value)}</span>"),
            ("reason", text(run.reason)),
            ("created", text(_when(loaded.run.created_at))),
            ("updated", text(_when(loaded.run.updated_at))),
            (
                "lease",
                "none"
                if lease is None
                else f"{text(lease.owner)} until {text(_when(lease.expires_at))}"
                + (" (expired)" if lease.expired else ""),
            ),
            ("overdue", "<strong class='bad'>yes</strong>" if overdue else "no"),
            ("store time", text(_when(now))),
            ("input", f"<code>{text(json.dumps(run.input), 1000)}</code>"),
        ]
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
        steps = _table(
            ["step", "status", "attempts", "next retry", "last error", "result"],
            [
                [
                    text(s.name),
                    text(s.status.value),
                    text(
                        f"{s.attempt_count}"
                        + (
                            f" (+{s.compensation_attempt_count} compensation)"
                            if s.compensation_attempt_count
                            else ""
                        )
                    ),
                    text(_when(None if s.next_retry_at is None else s.next_retry_at.timestamp())),
                    text(s.last_error),
                    text(None if s.result is None else json.dumps(s.result)),
                ]
                for s in run.steps
            ],
            "steps",
        )
        hist = _table(
            ["at", "event", "step", "phase", "attempt", "delay", "error", "detail"],
            [
                [
                    text(_when(h.at.timestamp())),
                    text(h.event),
                    text(h.step),
                    text(h.phase),
                    text(h.attempt),
                    text("-" if h.delay is None else f"{h.delay:.3f}"),
                    text(h.error),
                    text(", ".join(f"{k}={v}" for k, v in h.detail.items()) or "-"),
                ]
                for h in history
            ],
            "history",
            caption=(f"the last {len(history)} of {total} lines" if total > len(history) else ""),
        )
        notice = ""
        if done in ("applied", "requested"):
            notice = (
                "<p id='notice' role='status'>"
                + (
                    "Done."
                    if done == "applied"
                    else "Requested: the worker holding the run applies it after its attempt."
                )
                + "</p>"
            )
        body = (
            f"<p><a href='/'>all runs</a></p>{notice}<section><h2>Run</h2><dl class='facts'>"
            f"{dl}</dl>{self._actions(run.run_id, run.status)}</section>"
            f"<section><h2>Steps</h2>{steps}</section>"
            f"<section><h2>History</h2>{hist}</section>"
        )
        return self._page(f"run {run.run_id}", body)

    def _actions(self, run_id: str, status: Status) -> str:
        if not self.allow_actions:
            return ""
        if status.final:
            return "<p>the run is over: no action applies</p>"
        buttons = []
        for name, question in (
            ("retry", "Retry this run now?"),
            ("compensate", "Stop this run and compensate its finished steps?"),
            ("cancel", "Stop this run without compensating (FAILED)?"),
        ):
            buttons.append(
                "<form class='action' method='post' action='/action' "
                f"data-confirm='{html.escape(question, quote=True)}'>"
                f"<input type='hidden' name='csrf' value='{html.escape(self.token)}'>"
                # The id as it is (escaped for HTML only): the form sends it back.
                f"<input type='hidden' name='run' value='{html.escape(run_id, quote=True)}'>"
                f"<input type='hidden' name='op' value='{name}'>"
                f"<button type='submit' id='action-{name}'>{name.capitalize()}</button></form>"
            )
        return f"<div class='actions'>{''.join(buttons)}</div>"

    # -- actions ----------------------------------------------------------------------------

    def act(self, form: dict[str, str]) -> tuple[str, str]:
        """Apply the form's action (the token already checked); the run id and the outcome.

        Raises:
            Refused: an unknown action, an unknown run, or one the action does not apply to.
        """
        run_id = form.get("run", "")
        operation = ACTIONS.get(form.get("op", ""))
        if operation is None:
            raise Refused(400, "op must be one of " + ", ".join(ACTIONS))
        try:
            return run_id, operate(self.store, run_id, operation)
        except KeyError:
            raise Refused(404, f"no run {run_id!r} in the store") from None
        except ValueError as err:
            raise Refused(409, str(err)) from None

    def check_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


def _message(status: int, message: str) -> HTMLResponse:
    body = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>seawall</title>"
        "<link rel='icon' href='data:,'><link rel='stylesheet' href='/static/style.css'>"
        "</head><body><main>"
        f"<h1>{status}</h1><p id='error'>{text(message, 2000)}</p><p><a href='/'>all runs</a>"
        "</p></main></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def _host_allowed(request: Request) -> bool:
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name.lower() in LOOPBACK


def _same_origin(request: Request) -> bool:
    """A browser names the page a POST comes from (``Origin``); another site's is refused."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    parsed = urllib.parse.urlsplit(origin)
    return parsed.netloc == request.headers.get("host", "") and parsed.scheme == "http"


def create_store_app(
    url: str,
    *,
    allow_actions: bool = False,
    overdue_after: float = OVERDUE_AFTER,
    refresh: float = 5.0,
    clock: Callable[[], float] | None = None,
) -> Starlette:
    """The store view's ASGI application: serve it on 127.0.0.1 (:func:`seawall.web.serve_store`
    does); close its store with ``app.state.store_view.close()`` when done.

    Args:
        url: the saga store (``sqlite:///path.db`` or ``postgresql://...``); it must exist: it
            is never created nor migrated.
        allow_actions: offer and accept retry, compensate and cancel (each a POST carrying the
            view's CSRF token); otherwise every action is refused with ``403``.
        overdue_after: seconds due work may wait unclaimed before its run shows as overdue.
        refresh: seconds between the overview's reloads in the browser (0: never).
        clock: the store's clock (seconds since the epoch), for tests on virtual time.

    Bounded like the demo page: a short query, a form body of at most 2 KiB, a time limit per
    request, and the store used by one request at a time with a short
    line behind (``503`` with ``Retry-After`` beyond it).

    Raises:
        ValueError: the store does not exist, or a parameter is out of range.
        TypeError: a parameter has the wrong type.
        SchemaVersionError: the store is of another schema version.
    """
    from seawall.web._app import STATIC

    view = StoreView(
        url,
        allow_actions=allow_actions,
        overdue_after=overdue_after,
        refresh=refresh,
        clock=clock,
    )

    async def guarded(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
        return await view.gate.run_sync(view.call, fn, *args)

    async def index(request: Request) -> Response:
        if not _host_allowed(request):
            return _message(403, "the store view answers to 127.0.0.1 and localhost only")
        params = {k: v for k, v in request.query_params.items() if k in _FILTERS}
        unknown = [k for k in request.query_params if k not in _FILTERS]
        if unknown:
            return _message(400, f"unknown parameter {unknown[0]!r}")
        try:
            page = await guarded(request, view.overview, params)
        except (Busy, Unavailable) as err:
            return _busy(err)
        except ValueError as err:
            return _message(400, str(err))
        return HTMLResponse(page, headers=_HEADERS)

    async def run(request: Request) -> Response:
        if not _host_allowed(request):
            return _message(403, "the store view answers to 127.0.0.1 and localhost only")
        run_id = request.query_params.get("id", "")
        done = request.query_params.get("done")
        try:
            page = await guarded(request, view.run_page, run_id, done)
        except (Busy, Unavailable) as err:
            return _busy(err)
        if page is None:
            return _message(404, f"no run {run_id!r} in the store")
        return HTMLResponse(page, headers=_HEADERS)

    async def action(request: Request) -> Response:
        if not _host_allowed(request):
            return _message(403, "the store view answers to 127.0.0.1 and localhost only")
        if not view.allow_actions:
            return _message(
                403, "the store view is read-only: start it with --allow-actions to act on runs"
            )
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return _message(415, "an action is a form (application/x-www-form-urlencoded)")
        raw = (await request.body()).decode("utf-8", "replace")
        try:
            form = dict(urllib.parse.parse_qsl(raw, keep_blank_values=True, max_num_fields=8))
        except ValueError:
            return _message(400, "an action's form has four fields")
        if not view.check_token(form.get("csrf")) or not _same_origin(request):
            return _message(403, "missing or wrong CSRF token: reload the page and try again")
        try:
            run_id, done = await guarded(request, view.act, form)
        except (Busy, Unavailable) as err:
            return _busy(err)
        except Refused as err:
            return _message(err.status, str(err))
        target = "/run?" + urllib.parse.urlencode({"id": run_id, "done": done})
        return RedirectResponse(target, status_code=303, headers=_HEADERS)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/run", run),
            Route("/action", action, methods=["POST"]),
            Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
        ],
        middleware=[
            Middleware(Bounded, time_limit=REQUEST_TIME_LIMIT, max_body=MAX_BODY),
        ],
    )
    app.state.store_view = view
    return app


_FILTERS: Final = frozenset({"status", "saga", "error", "older", "stuck"})


def _busy(err: Busy | Unavailable) -> Response:
    response = _message(503, str(err))
    retry_after = err.retry_after if isinstance(err, Busy) else 1.0
    response.headers["Retry-After"] = str(max(1, round(retry_after)))
    return response
