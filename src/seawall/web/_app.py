"""The Starlette application: the page, its assets, and the JSON endpoints it draws from."""

from __future__ import annotations

import importlib.resources
import math
import os
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from seawall.web import _adapter, _views
from seawall.web._limits import Bounded, Busy, Gate
from seawall.web._runs import ExperimentRunner, RunFailed, RunTimedOut

__all__ = ["REQUEST_TIME_LIMIT", "RUN_TIME_LIMIT", "create_app"]

STATIC = importlib.resources.files("seawall.web") / "static"

REQUEST_TIME_LIMIT = 60.0
"""Seconds a request may take, waiting in line included, before it is answered ``503``."""
RUN_TIME_LIMIT = 30.0
"""Seconds one experiment may run (alone it takes one or two) before its process is stopped."""

# Query parameters each endpoint takes, with their types. Anything else is refused by name.
_BACKOFF: dict[str, Callable[[str], Any]] = {
    "base": float,
    "multiplier": float,
    "cap": float,
    "jitter": str,
    "max_attempts": int,
    "failures": int,
    "permanent_at": int,
    "timeout": float,
    "attempt_time": float,
    "seed": int,
}
_STORM: dict[str, Callable[[str], Any]] = {
    "clients": int,
    "base": float,
    "multiplier": float,
    "cap": float,
    "jitter": str,
    "max_attempts": int,
    "bins": int,
    "seed": int,
}
_SEED: dict[str, Callable[[str], Any]] = {"seed": int}


class BadParameter(ValueError):
    """A query parameter the endpoint cannot use."""


def _params(request: Request, types: dict[str, Callable[[str], Any]]) -> dict[str, Any]:
    """The query parameters as keyword arguments; a :class:`BadParameter` naming the first
    unknown or malformed one."""
    out: dict[str, Any] = {}
    for name, text in request.query_params.items():
        convert = types.get(name)
        if convert is None:
            raise BadParameter(f"unknown parameter {name!r}")
        if len(text) > 64:
            raise BadParameter(f"{name} is too long")
        try:
            value = convert(text)
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise BadParameter(f"{name} must be {kind}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise BadParameter(f"{name} must be finite, got {text!r}")
        out[name] = value
    return out


def _error(message: str, status: int = 400, retry_after: float | None = None) -> JSONResponse:
    headers = {"Cache-Control": "no-store"}
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _seed(seed: int = 0) -> int:
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be between 0 and {2**32 - 1}, got {seed}")
    return seed


def _experiment_workers() -> int:
    # One run per two cores: the rest of the machine (and the server itself) stays responsive.
    return max(1, min(4, (os.cpu_count() or 1) // 2))


class _Page:
    """The endpoints, each kind of work behind its own bounds."""

    def __init__(self) -> None:
        # The cheap views run in threads, a few at a time per kind: a flood of large storms
        # waits in its own line, not in front of the backoff view.
        self.backoff_gate = Gate("backoff", running=4, waiting=32)
        self.storm_gate = Gate("storm", running=2, waiting=6)
        self.saga_gate = Gate("saga", running=2, waiting=6)
        self.runner = ExperimentRunner(
            workers=_experiment_workers(), waiting=4, time_limit=RUN_TIME_LIMIT
        )

    async def _compute(
        self,
        request: Request,
        types: dict[str, Callable[[str], Any]],
        gate: Gate,
        fn: Callable[..., dict[str, Any]],
    ) -> Response:
        try:
            kwargs = _params(request, types)
            # Off the event loop: a storm of many clients takes a while.
            data = await gate.run_sync(fn, **kwargs)
        except Busy as err:
            return _error(str(err), 503, err.retry_after)
        except (ValueError, TypeError) as err:
            return _error(str(err))
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    async def index(self, request: Request) -> Response:
        return FileResponse(str(STATIC / "index.html"), media_type="text/html")

    async def backoff(self, request: Request) -> Response:
        return await self._compute(request, _BACKOFF, self.backoff_gate, _views.backoff_trace)

    async def storm(self, request: Request) -> Response:
        return await self._compute(request, _STORM, self.storm_gate, _views.storm_histogram)

    async def experiments(self, request: Request) -> Response:
        return JSONResponse(
            [
                {"name": e.name, "title": e.title, "summary": e.summary}
                for e in _adapter.EXPERIMENTS.values()
            ]
        )

    async def experiment(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _adapter.EXPERIMENTS:
            return _error(f"no experiment named {name!r}", 404)
        try:
            seed = _seed(**_params(request, _SEED))
            data = await self.runner.run(name, seed)
        except (Busy, RunTimedOut) as err:
            # Refused, or cut at its time limit: the server is busy, not broken.
            return _error(str(err), 503, err.retry_after)
        except RunFailed as err:
            return _error(str(err), 500)
        except (ValueError, TypeError) as err:
            return _error(str(err))
        return JSONResponse(data, headers={"Cache-Control": "no-store"})

    async def saga(self, request: Request) -> Response:
        def run(seed: int = 0) -> dict[str, Any]:
            return _adapter.saga_log(_seed(seed))

        return await self._compute(request, _SEED, self.saga_gate, run)


def create_app() -> Starlette:
    """The demo page's ASGI application (serve it with any ASGI server, or :func:`serve`).

    Every request is bounded: a query over 1 KiB or a request body is refused, a request takes at
    most a minute, and a client that leaves cancels its work. Each kind of work runs a few at a
    time with a short line behind; a request beyond that is answered ``503`` with a
    ``Retry-After``. The experiments run in child processes, one per two cores.
    """
    page = _Page()
    return Starlette(
        routes=[
            Route("/", page.index),
            Route("/api/backoff", page.backoff),
            Route("/api/storm", page.storm),
            Route("/api/experiments", page.experiments),
            Route("/api/experiments/{name}", page.experiment),
            Route("/api/saga", page.saga),
            Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
        ],
        middleware=[Middleware(Bounded, time_limit=REQUEST_TIME_LIMIT)],
    )
