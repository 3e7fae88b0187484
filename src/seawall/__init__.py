"""seawall: safe retries.

Jittered exponential backoff, permanent-error classification, one deadline per call, retry
budgets, hedging, circuit breaking, and virtual time for tests and simulation. See the README
and ``docs/``.

The top level holds what most code needs. The rest lives in named modules:
:mod:`seawall.lowlevel` (the sans-I/O core, for custom drivers), :mod:`seawall.propagation`
(deadline headers and intake), :mod:`seawall.config` (policy files and the registry),
:mod:`seawall.http` (the HTTP rules), and the integrations :mod:`seawall.httpx`,
:mod:`seawall.requests`, :mod:`seawall.server`, :mod:`seawall.instrumentation`,
:mod:`seawall.testing`, :mod:`seawall.faults` (fault injection), and the systems
:mod:`seawall.saga` (durable sagas) and :mod:`seawall.sim`. Every name, and every one of those
modules, is loaded on first use (PEP 562), so ``import seawall`` costs next to nothing.
"""

from __future__ import annotations

from seawall._version import __version__ as __version__

# Not `from typing import TYPE_CHECKING`: importing typing would cost more than the rest of
# this module (type checkers know the name either way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # what the names below resolve to, for type checkers and editors
    from seawall import (
        config,
        faults,
        http,
        httpx,
        instrumentation,
        lowlevel,
        propagation,
        requests,
        saga,
        server,
        sim,
        testing,
    )
    from seawall._core.clock import Clock, SystemClock, VirtualClock
    from seawall._core.errors import (
        DeadlineExceeded,
        Overloaded,
        Permanent,
        RetryAfter,
        is_permanent,
        permanent,
    )
    from seawall._core.switch import is_enabled, set_enabled
    from seawall._strategies.backoff import Backoff, Jitter
    from seawall._strategies.breaker import CircuitBreaker, CircuitOpen
    from seawall._strategies.budget import (
        AdaptiveThrottle,
        Budget,
        RetryBudget,
        RetryQuota,
        Throttled,
        TokenBucket,
    )
    from seawall._strategies.deadline import deadline, remaining
    from seawall._strategies.hedge import Hedge, hedge
    from seawall._strategies.latency import LatencyTracker
    from seawall._strategies.pipeline import Pipeline
    from seawall._strategies.retry import (
        Hook,
        Outcome,
        RetryEvent,
        RetryPolicy,
        logging_hook,
        retry,
    )

# name -> the module that defines it.
_NAMES: dict[str, str] = {
    # retry policies
    "RetryPolicy": "seawall._strategies.retry",
    "retry": "seawall._strategies.retry",
    "Outcome": "seawall._strategies.retry",
    "RetryEvent": "seawall._strategies.retry",
    "Hook": "seawall._strategies.retry",
    "logging_hook": "seawall._strategies.retry",
    "Backoff": "seawall._strategies.backoff",
    "Jitter": "seawall._strategies.backoff",
    # errors and classification
    "Permanent": "seawall._core.errors",
    "permanent": "seawall._core.errors",
    "is_permanent": "seawall._core.errors",
    "RetryAfter": "seawall._core.errors",
    "Overloaded": "seawall._core.errors",
    "DeadlineExceeded": "seawall._core.errors",
    "Throttled": "seawall._strategies.budget",
    "CircuitOpen": "seawall._strategies.breaker",
    # budgets
    "Budget": "seawall._strategies.budget",
    "RetryBudget": "seawall._strategies.budget",
    "TokenBucket": "seawall._strategies.budget",
    "RetryQuota": "seawall._strategies.budget",
    "AdaptiveThrottle": "seawall._strategies.budget",
    # the other strategies
    "CircuitBreaker": "seawall._strategies.breaker",
    "Hedge": "seawall._strategies.hedge",
    "hedge": "seawall._strategies.hedge",
    "Pipeline": "seawall._strategies.pipeline",
    # deadlines
    "deadline": "seawall._strategies.deadline",
    "remaining": "seawall._strategies.deadline",
    "LatencyTracker": "seawall._strategies.latency",
    # the kill switch and clocks
    "set_enabled": "seawall._core.switch",
    "is_enabled": "seawall._core.switch",
    "Clock": "seawall._core.clock",
    "SystemClock": "seawall._core.clock",
    "VirtualClock": "seawall._core.clock",
}

_MODULES = frozenset(
    {
        "aiohttp",
        "config",
        "faults",
        "grpc",
        "http",
        "httpx",
        "instrumentation",
        "lowlevel",
        "propagation",
        "redis",
        "requests",
        "saga",
        "server",
        "sim",
        "testing",
    }
)

# Names the first version exported here, and the module that holds them now. They still
# resolve, with a DeprecationWarning that says where to import them from.
_MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "Attempt",
            "AttemptRecord",
            "BreakerEvent",
            "BreakerState",
            "HedgeDelayPassed",
            "HedgeEvent",
            "HedgeHook",
            "RetryState",
        ),
        "seawall.lowlevel",
    ),
    **dict.fromkeys(
        (
            "BudgetConfig",
            "ConfigError",
            "HedgeConfig",
            "HedgeHandle",
            "PolicyHandle",
            "PolicyRegistry",
            "RouteConfig",
            "load_config",
            "parse_config",
        ),
        "seawall.config",
    ),
    **dict.fromkeys(
        (
            "DEFAULT_TRANSIT_MARGIN",
            "Deadline",
            "DeadlineHeaderCounts",
            "GRPC_TIMEOUT_HEADER",
            "REQUEST_DEADLINE_HEADER",
            "deadline_from_headers",
            "deadline_header_counts",
            "deadline_headers",
            "decode_grpc_timeout",
            "decode_request_deadline",
            "encode_grpc_timeout",
            "encode_request_deadline",
            "timeout_from_headers",
        ),
        "seawall.propagation",
    ),
}


def __getattr__(name: str) -> Any:
    import importlib

    module = _NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _MODULES:
        value = importlib.import_module(f"seawall.{name}")
    elif name in _MOVED:
        import warnings

        home = _MOVED[name]
        warnings.warn(
            f"seawall.{name} moved to {home}.{name}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    else:
        raise AttributeError(f"module 'seawall' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})


__all__ = [
    "AdaptiveThrottle",
    "Backoff",
    "Budget",
    "CircuitBreaker",
    "CircuitOpen",
    "Clock",
    "DeadlineExceeded",
    "Hedge",
    "Hook",
    "Jitter",
    "LatencyTracker",
    "Outcome",
    "Overloaded",
    "Permanent",
    "Pipeline",
    "RetryAfter",
    "RetryBudget",
    "RetryEvent",
    "RetryPolicy",
    "RetryQuota",
    "SystemClock",
    "Throttled",
    "TokenBucket",
    "VirtualClock",
    "aiohttp",
    "config",
    "deadline",
    "faults",
    "grpc",
    "hedge",
    "http",
    "httpx",
    "instrumentation",
    "is_enabled",
    "is_permanent",
    "logging_hook",
    "lowlevel",
    "permanent",
    "propagation",
    "redis",
    "remaining",
    "requests",
    "retry",
    "saga",
    "server",
    "set_enabled",
    "sim",
    "testing",
]
