"""The interactive demo page: seawall's policies and simulator in a browser; and the store view,
a user's saga store in a browser (``seawall web --store URL``, :func:`serve_store`).

``seawall web`` (or ``seawall demo --web``) serves it on 127.0.0.1 and prints its URL. The
page has four views: one client's backoff stepped attempt by attempt; the retry times of many
clients that failed together, without jitter and with each kind; the simulator's experiments;
and a saga run's log. Every number comes from seawall itself through JSON endpoints
(``/api/backoff``, ``/api/storm``, ``/api/experiments/NAME``, ``/api/saga``); the page only
draws them, and every asset ships inside the package, so it works offline.

Needs the ``web`` extra (Starlette and Uvicorn) and, for the experiments, ``sim``:
``pip install -e '.[web,sim]'`` in a checkout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seawall._core.public import show_public_module
from seawall.web._app import create_app
from seawall.web._store_view import create_store_app

__all__ = ["create_app", "create_store_app", "serve", "serve_store"]

SHUTDOWN_SECONDS = 2
MAX_CONNECTIONS = 200


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    ready: Callable[[str], None] | None = None,
    app: Any = None,
) -> None:
    """Serve the page until interrupted; print its URL once the server listens.

    Args:
        host: the address to listen on (loopback by default: the page is a local tool).
        port: the TCP port; 0 picks a free one (the printed URL says which).
        ready: called with the URL once the server listens (default: print it).
        app: the ASGI application to serve (default: the demo page's).

    Raises:
        ValueError: *port* is not between 0 and 65535.
    """
    import socket

    import uvicorn

    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be between 0 and 65535, got {port!r}")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/"

    # Listening before uvicorn starts: a browser that opens the URL at once is queued, not
    # refused.
    sock.listen(128)
    (ready or _announce)(url)
    config = uvicorn.Config(
        create_app() if app is None else app,
        log_level="warning",
        lifespan="off",
        # SIGTERM or Ctrl-C: requests still open after this many seconds are cancelled (their
        # experiments' processes stopped), so the process exits promptly.
        timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        # Connections beyond this are answered 503 at once.
        limit_concurrency=MAX_CONNECTIONS,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def serve_store(
    url: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    allow_actions: bool = False,
    overdue_after: float = 60.0,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the store view of the saga store *url* until interrupted (see
    :func:`create_store_app`); print its URL once the server listens.

    Raises:
        ValueError: *host* is not a loopback address (the view shows and changes the store:
            it is served to this machine only), or the store does not exist.
    """
    from seawall._core.redact import redact_text

    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"host: the store view is served on 127.0.0.1 or ::1 only, got {host!r}")
    app = create_store_app(url, allow_actions=allow_actions, overdue_after=overdue_after)
    where = redact_text(url)

    def announce(page: str) -> None:
        mode = "actions allowed" if allow_actions else "read-only"
        print(
            f"seawall: serving the saga store {where} at {page} ({mode}; Ctrl-C stops)",
            flush=True,
        )

    try:
        serve(host, port, ready=ready or announce, app=app)
    finally:
        app.state.store_view.close()


def _announce(url: str) -> None:
    print(f"seawall: serving the demo page at {url} (Ctrl-C stops)", flush=True)


show_public_module(__name__, globals())
