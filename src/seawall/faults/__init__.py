"""Fault injection: latency, errors, resets, refused connections, slow drips and status codes,
at a rate or on a schedule, seeded (after Polly's chaos strategies and Envoy's fault filter).

A :class:`FaultPlan` says what to inject; a layer carries it out where requests pass:

- :class:`FaultTransport` / :class:`AsyncFaultTransport` for httpx (extra ``httpx``),
- :class:`FaultAdapter` for requests (extra ``requests``),
- :class:`FaultMiddleware` for any ASGI application (no dependency).

Example:
    >>> from seawall import faults
    >>> plan = faults.FaultPlan(
    ...     [faults.Latency(0.2, rate=0.1), faults.Status(503, rate=0.05), faults.Reset(rate=0.01)],
    ...     seed=7,
    ... )

Put the client layers under the retry layer, so that each attempt meets the faults:
``RetryTransport(policy, FaultTransport(plan))``. See ``docs/reliability.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from seawall.faults._asgi import FaultMiddleware, InjectedReset
from seawall.faults._plan import (
    Decision,
    Drip,
    Error,
    Fault,
    FaultPlan,
    Latency,
    Refuse,
    Reset,
    Schedule,
    Status,
    nth,
    window,
)

if TYPE_CHECKING:
    from seawall.faults._httpx import AsyncFaultTransport, FaultTransport
    from seawall.faults._requests import FaultAdapter

# The client layers import their library only when used.
_LAZY = {
    "AsyncFaultTransport": "seawall.faults._httpx",
    "FaultTransport": "seawall.faults._httpx",
    "FaultAdapter": "seawall.faults._requests",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'seawall.faults' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AsyncFaultTransport",
    "Decision",
    "Drip",
    "Error",
    "Fault",
    "FaultAdapter",
    "FaultMiddleware",
    "FaultPlan",
    "FaultTransport",
    "InjectedReset",
    "Latency",
    "Refuse",
    "Reset",
    "Schedule",
    "Status",
    "nth",
    "window",
]
