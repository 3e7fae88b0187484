"""The Starlette application: the page, its assets, and the JSON endpoints it draws from."""

from __future__ import annotations

import importlib.resources
import math
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from seawall.web import _adapter, _views

__all__ = ["create_app"]

STATIC = importlib.resources.files("seawall.web") / "static"

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


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _compute(
    request: Request,
    types: dict[str, Callable[[str], Any]],
    fn: Callable[..., dict[str, Any]],
    *args: Any,
) -> Response:
    try:
        kwargs = _params(request, types)
        # Off the event loop: a storm of many clients or an experiment takes a while.
        data = await run_in_threadpool(fn, *args, **kwargs)
    except (ValueError, TypeError) as err:
        return _error(str(err))
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


async def index(request: Request) -> Response:
    return FileResponse(str(STATIC / "index.html"), media_type="text/html")


async def backoff(request: Request) -> Response:
    return await _compute(request, _BACKOFF, _views.backoff_trace)


async def storm(request: Request) -> Response:
    return await _compute(request, _STORM, _views.storm_histogram)


async def experiments(request: Request) -> Response:
    return JSONResponse(
        [
            {"name": e.name, "title": e.title, "summary": e.summary}
            for e in _adapter.EXPERIMENTS.values()
        ]
    )


async def experiment(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _adapter.EXPERIMENTS:
        return _error(f"no experiment named {name!r}", 404)

    def run(seed: int = 0) -> dict[str, Any]:
        if not 0 <= seed < 2**32:
            raise ValueError(f"seed must be between 0 and {2**32 - 1}, got {seed}")
        return _adapter.run_experiment(name, seed)

    return await _compute(request, _SEED, run)


async def saga(request: Request) -> Response:
    def run(seed: int = 0) -> dict[str, Any]:
        if not 0 <= seed < 2**32:
            raise ValueError(f"seed must be between 0 and {2**32 - 1}, got {seed}")
        return _adapter.saga_log(seed)

    return await _compute(request, _SEED, run)


def create_app() -> Starlette:
    """The demo page's ASGI application (serve it with any ASGI server, or :func:`serve`)."""
    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/backoff", backoff),
            Route("/api/storm", storm),
            Route("/api/experiments", experiments),
            Route("/api/experiments/{name}", experiment),
            Route("/api/saga", saga),
            Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
        ]
    )
