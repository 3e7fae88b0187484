"""Declarative policies: load retry policies from a dict, TOML or YAML, see and change them live.

The shape follows Envoy's route retry policy, which operators already know::

    [defaults.retry_policy]
    num_retries = 2

    [routes.users]
    timeout = "2s"

    [routes.users.retry_policy]
    retry_on = "connect-failure,reset,timeout,5xx"
    num_retries = 3
    per_try_timeout = "500ms"
    retry_back_off = { base_interval = "25ms", max_interval = "250ms" }
    budget = { percent_can_retry = 20, min_retries_per_sec = 1 }

Every field is validated, and errors name the field path
(``routes.users.retry_policy.num_retries: must be >= 0, got -1``). A :class:`PolicyRegistry`
holds the live policies; its :class:`PolicyHandle` objects always call through the current
policy, so :meth:`PolicyRegistry.reload` changes behaviour without a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import math
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, ParamSpec, TypeVar, overload

from seawall._core.classify import is_refused_stream, is_transient
from seawall._core.clock import Clock
from seawall._core.decorate import decorate
from seawall._core.public import public
from seawall._core.switch import is_enabled, set_enabled
from seawall._core.validate import MAX_SECONDS, MIN_WINDOW, shown
from seawall._strategies.backoff import DEFAULT_BACKOFF, Backoff
from seawall._strategies.budget import DEFAULT_MIN_PER_SECOND, DEFAULT_WINDOW, RetryBudget
from seawall._strategies.hedge import Hedge, HedgeHook
from seawall._strategies.latency import LatencyTracker
from seawall._strategies.retry import Attempts, Hook, Outcome, RetryPolicy

if TYPE_CHECKING:
    from seawall._policy.http import HttpRules

__all__ = [
    "BudgetConfig",
    "ConfigError",
    "HedgeConfig",
    "HedgeHandle",
    "PolicyHandle",
    "PolicyRegistry",
    "RouteConfig",
    "load_config",
    "parse_config",
]

P = ParamSpec("P")
T = TypeVar("T")


@public("seawall.config")
class ConfigError(ValueError):
    """A policy file or mapping is invalid.

    Attributes:
        path: the dotted path of the offending field (``routes.users.retry_policy.num_retries``).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path


# -- retry_on conditions ------------------------------------------------------------------------
#
# Envoy's router docs (x-envoy-retry-on): "5xx" retries any 5xx response *or no response at all*
# (disconnect, reset, read timeout), connect failures and refused streams included;
# "gateway-error" is the same for 502/503/504 (Envoy counts a reset as the 503 it answers);
# "reset" retries no response at all; "connect-failure" a connection that could not be made
# (refused, connect timeout). Python's clients raise their own classes for these: they are
# recognised by name, as the default retry_on does, so none is imported.

# Connection-level errnos of a connection that was never made.
_CONNECT_ERRNOS: Final = frozenset(
    getattr(errno, name)
    for name in ("ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH", "ENETDOWN", "EHOSTDOWN")
    if hasattr(errno, name)
)
_CONNECT_CLASSES: Final = frozenset(
    {
        ("httpx", "ConnectError"),
        ("httpx", "ConnectTimeout"),
        ("requests", "ConnectTimeout"),
        ("urllib3", "NewConnectionError"),
        ("urllib3", "ConnectTimeoutError"),
        ("aiohttp", "ClientConnectorError"),
        ("aiohttp", "ConnectionTimeoutError"),
    }
)
_TIMEOUT_CLASSES: Final = frozenset(
    {
        ("httpx", "TimeoutException"),
        ("requests", "Timeout"),
        ("urllib3", "TimeoutError"),
        ("aiohttp", "ServerTimeoutError"),
    }
)
# A retry repeats these, whatever their base classes say.
_NEVER: Final = ("SSLError", "Certificate", "InvalidURL", "UnsupportedProtocol")


_NAMES: dict[type, frozenset[tuple[str, str]]] = {}
_NAMES_LIMIT: Final = 4096  # classes made at runtime must not grow the cache without bound


def _names(cls: type) -> frozenset[tuple[str, str]]:
    """``(top-level package, class name)`` of every class in *cls*'s hierarchy."""
    names = _NAMES.get(cls)
    if names is None:
        names = frozenset((c.__module__.partition(".")[0], c.__name__) for c in cls.__mro__)
        if len(_NAMES) < _NAMES_LIMIT:
            _NAMES[cls] = names
    return names


def _excluded(names: frozenset[tuple[str, str]]) -> bool:
    """Errors no condition retries: those a retry repeats, and gRPC's (its statuses are not
    HTTP conditions)."""
    if any(module == "grpc" for module, _ in names):
        return True
    return any(bad in name for _, name in names for bad in _NEVER)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """*error*, then what it wraps, a few levels deep: requests raises ``ConnectionError``
    around urllib3's ``MaxRetryError`` around the ``NewConnectionError`` that says what
    happened."""
    seen: list[BaseException] = []
    todo = [error]
    while todo and len(seen) < 8:
        e = todo.pop(0)
        if any(e is s for s in seen):
            continue
        seen.append(e)
        yield e
        nested = [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args[:2]]
        todo.extend(n for n in nested if isinstance(n, BaseException))


def is_connect_failure(error: BaseException) -> bool:
    """``connect-failure``: the connection could not be made (refused, unreachable, connect
    timeout); the request never reached the server."""
    for e in _causes(error):
        names = _names(type(e))
        if _excluded(names):
            return False
        if isinstance(e, ConnectionRefusedError) or names & _CONNECT_CLASSES:
            return True
        if isinstance(e, OSError) and getattr(e, "errno", None) in _CONNECT_ERRNOS:
            return True
    return False


def is_refused(error: BaseException) -> bool:
    """``refused-stream``: the server refused the request before processing it: an HTTP/2
    stream reset with REFUSED_STREAM (httpx with ``http2=True``), or a refused connection."""
    return is_refused_stream(error) or any(
        isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED
        for e in _causes(error)
    )


def is_timeout(error: BaseException) -> bool:
    """``timeout``: an attempt timed out (connect, read, write or pool timeout)."""
    names = _names(type(error))
    if _excluded(names):
        return False
    return (
        isinstance(error, (TimeoutError, asyncio.TimeoutError))
        or bool(names & _TIMEOUT_CLASSES)
        or (isinstance(error, OSError) and getattr(error, "errno", None) == errno.ETIMEDOUT)
    )


def is_no_response(error: BaseException) -> bool:
    """``reset``: no response at all: a connect failure, a reset or closed connection, a read
    timeout (and the clients' forms of these: httpx, requests/urllib3, aiohttp)."""
    if _excluded(_names(type(error))):
        return False
    return is_transient(error) or is_timeout(error) or is_connect_failure(error)


#: Conditions that name failures without a response, and how each is recognised.
ERROR_CONDITIONS: Final[Mapping[str, Callable[[BaseException], bool]]] = {
    "connect-failure": is_connect_failure,
    "reset": is_no_response,
    "refused-stream": is_refused,
    "timeout": is_timeout,
}
#: Conditions that name HTTP statuses (Envoy's x-envoy-retry-on values), for HTTP integrations.
STATUS_CONDITIONS: Final[Mapping[str, frozenset[int]]] = {
    "5xx": frozenset(range(500, 600)),
    "gateway-error": frozenset({502, 503, 504}),
    "retriable-4xx": frozenset({409}),
    "retriable-status-codes": frozenset(),  # the codes come from retriable_status_codes
}
# Status conditions that also retry a request that got no response at all (Envoy: "5xx ...
# or does not respond at all (disconnect/reset/read timeout)").
_NO_RESPONSE_TOO: Final = frozenset({"5xx", "gateway-error"})
# Envoy conditions seawall does not offer, and why (a clear error beats a silent no-op).
_UNSUPPORTED: Final[Mapping[str, str]] = {
    "retriable-headers": "retrying on response headers is not supported; name the statuses "
    "(retriable-status-codes) instead",
    "envoy-ratelimited": "x-envoy-ratelimited responses are not retried by seawall",
    "http3-post-connect-failure": "HTTP/3 is not supported",
}


@dataclasses.dataclass(frozen=True, slots=True)
class _RetryOn:
    """A route's ``retry_on``: the named failure conditions, then the application's classes."""

    conditions: tuple[str, ...]
    classes: tuple[type[BaseException], ...]

    def __call__(self, error: BaseException) -> bool:
        if self.classes and isinstance(error, self.classes):
            return True
        return any(ERROR_CONDITIONS[c](error) for c in self.conditions)


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class BudgetConfig:
    """``budget = {percent_can_retry, min_retries_per_sec, ttl}``: a route's
    :class:`~seawall.RetryBudget`, under Finagle's names with Finagle's meaning.

    Over any ``ttl`` seconds, retries may be at most ``percent_can_retry`` per 100 requests, plus
    ``min_retries_per_sec * ttl``. ``percent`` maps to ``ratio = percent / 100``,
    ``min_per_second`` is ``min_retries_per_sec`` and ``window`` is ``ttl``, in seconds.
    """

    percent: float
    min_per_second: float
    window: float

    def build(self, clock: Clock | None) -> RetryBudget:
        return RetryBudget(
            ratio=self.percent / 100.0,
            min_per_second=self.min_per_second,
            window=self.window,
            clock=clock,
        )


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class HedgeConfig:
    """``hedge = {delay, max_attempts, percentile, max_extra_percent}``: a route's hedging.

    Attributes:
        delay: seconds to wait before sending a hedged request; with ``percentile``, the
            shortest wait (``min_delay``).
        max_attempts: total requests, the first included.
        percentile: hedge at this live percentile of the route's latency (95 for p95): the
            delay follows a :class:`~seawall.LatencyTracker` (``None``: a fixed delay).
        max_extra_percent: at most this many hedges per 100 calls (``max_extra_load``).
    """

    delay: float
    max_attempts: int
    percentile: float | None = None
    max_extra_percent: float | None = None

    def build(
        self,
        *,
        name: str | None = None,
        budget: RetryBudget | None = None,
        clock: Clock | None = None,
        hooks: Sequence[HedgeHook] = (),
    ) -> Hedge:
        """The :class:`~seawall.Hedge` these settings describe."""
        delay: float | LatencyTracker = self.delay
        if self.percentile is not None:
            delay = LatencyTracker(clock=clock)
        return Hedge(
            delay,
            max_attempts=self.max_attempts,
            quantile=(self.percentile or 95.0) / 100.0,
            min_delay=self.delay if self.percentile is not None else 0.0,
            max_extra_load=(
                None if self.max_extra_percent is None else self.max_extra_percent / 100.0
            ),
            budget=budget,
            clock=clock,
            name=name,
            hooks=hooks,
        )

    def describe(self) -> dict[str, Any]:
        """The settings as a plain dict (unset optional fields left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@public("seawall.config")
@dataclasses.dataclass(frozen=True, slots=True)
class RouteConfig:
    """One validated route policy (see the module docs for the fields).

    Attributes:
        name: the route's name; also the policy's ``name`` (metrics, logs, kill switch).
        num_retries: retries after the first attempt (``max_attempts = num_retries + 1``).
        retry_on: the conditions, as written.
        retry_statuses: HTTP statuses to retry, when ``retry_on`` names any (else ``None``).
        timeout: seconds for the whole call, waits included (``None``: no limit).
        per_try_timeout: seconds per attempt (``None``: no limit).
        back_off: the delays between attempts.
        budget: the retry budget, if any.
        hedge: the hedging settings, if any.
        enabled: ``False`` turns retries off for this name (the per-name kill switch).
    """

    name: str
    num_retries: int
    retry_on: tuple[str, ...]
    retry_statuses: frozenset[int] | None
    timeout: float | None
    per_try_timeout: float | None
    back_off: Backoff
    budget: BudgetConfig | None
    hedge: HedgeConfig | None
    enabled: bool
    # When retry_on is given: the application's classes it names, and the failure conditions
    # (connect-failure, reset, ...; "5xx" and "gateway-error" bring "reset").
    _errors: tuple[type[BaseException], ...] | None = dataclasses.field(
        default=None, repr=False, compare=True
    )
    _conditions: tuple[str, ...] = dataclasses.field(default=(), repr=False, compare=True)

    def build(
        self,
        *,
        budget: RetryBudget | None = None,
        hooks: Sequence[Hook] | None = None,
        clock: Clock | None = None,
    ) -> RetryPolicy:
        """The :class:`~seawall.RetryPolicy` this route describes."""
        kwargs: dict[str, Any] = {}
        if self._errors is not None:
            kwargs["retry_on"] = self.retry_errors
        return RetryPolicy(
            max_attempts=self.num_retries + 1,
            backoff=self.back_off,
            timeout=self.timeout,
            attempt_timeout=self.per_try_timeout,
            budget=budget,
            clock=clock,
            name=self.name,
            hooks=hooks,
            **kwargs,
        )

    @property
    def retry_errors(
        self,
    ) -> tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None:
        """What ``retry_on`` retries among errors: the policy's ``retry_on`` (classes, or a
        predicate for conditions such as ``reset``), or ``None`` when ``retry_on`` is not given
        (the policy's default applies). An HTTP integration that decides on transport errors
        itself can ask it too."""
        if self._errors is None:
            return None
        return _RetryOn(self._conditions, self._errors) if self._conditions else self._errors

    def http_rules(self) -> HttpRules:
        """:class:`HttpRules` for the HTTP integrations, retrying this route's statuses."""
        from seawall._policy.http import HttpRules

        if self.retry_statuses is None:
            return HttpRules()
        return HttpRules(retry_statuses=self.retry_statuses)

    def describe(self) -> dict[str, Any]:
        """A plain dict of the settings, for admin pages and logs."""
        b = self.back_off
        return {
            "max_attempts": self.num_retries + 1,
            "retry_on": list(self.retry_on),
            "retry_statuses": sorted(self.retry_statuses) if self.retry_statuses else None,
            "timeout": self.timeout,
            "per_try_timeout": self.per_try_timeout,
            "back_off": _describe_back_off(b),
            "budget": _describe_budget(self.budget) if self.budget else None,
            "hedge": self.hedge.describe() if self.hedge else None,
        }


def _describe_budget(budget: BudgetConfig) -> dict[str, float]:
    """The budget under the names a policy file gives it today (not the deprecated ``percent``,
    ``min`` and ``window``), so that what is shown can be written back as it is."""
    return {
        "percent_can_retry": budget.percent,
        "min_retries_per_sec": budget.min_per_second,
        "ttl": budget.window,
    }


def _describe_back_off(b: Backoff) -> dict[str, Any]:
    view: dict[str, Any] = {"base": b.base, "max": b.cap, "jitter": b.jitter}
    if b.cumulative:
        view["curve"] = "envoy"  # (2**N - 1) * base, not base * 2**n
    return view


# -- field readers --------------------------------------------------------------------------

# Rates and percentages beyond this are mistakes (and would overflow the arithmetic on them).
_LARGEST: Final = 1e12
# The smallest percentage (of retries, of calls hedged) and percentile accepted: below it the
# fraction it stands for underflows to zero.
_SMALLEST_PERCENT: Final = 1e-6
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(us|ms|s|m|h)?\s*$")
_UNITS: Final = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a table/mapping, got {shown(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {shown(key)}")
    return value


def _known(table: Mapping[str, Any], path: str, allowed: Sequence[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                _join(path, key), f"unknown field (expected one of: {', '.join(allowed)})"
            )


def _duration(value: object, path: str, *, positive: bool = True, minimum: float = 0.0) -> float:
    """Seconds from a number or a string like ``"250ms"``, ``"2s"``, ``"1.5m"``.

    At most ``MAX_SECONDS`` (about 31 years: longer waits overflow the platform's timeouts), and
    at least *minimum* when given (a window that is divided into slices).
    """
    if isinstance(value, bool):
        raise ConfigError(path, f"must be a duration (seconds or '250ms'), got {shown(value)}")
    if isinstance(value, (int, float)):
        seconds = _float(value, path)
    elif isinstance(value, str):
        match = _DURATION.match(value) if len(value) <= 64 else None
        if match is None:
            raise ConfigError(
                path, f"must be a duration like '250ms', '2s' or 1.5, got {shown(value)}"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(path, f"must be a duration (seconds or '250ms'), got {shown(value)}")
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        raise ConfigError(path, f"must be {'> 0' if positive else '>= 0'}, got {shown(value)}")
    if seconds > MAX_SECONDS:
        raise ConfigError(path, f"must be at most {MAX_SECONDS:g} s, got {shown(value)}")
    if seconds < minimum:
        raise ConfigError(path, f"must be at least {minimum:g} s, got {shown(value)}")
    return seconds


def _float(value: int | float, path: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond float range (10**400)
        raise ConfigError(path, f"is out of range, got {shown(value)}") from None


def _number(
    value: object,
    path: str,
    *,
    minimum: float,
    strict: bool = False,
    maximum: float = _LARGEST,
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, f"must be a number, got {shown(value)}")
    v = _float(value, path)
    if not math.isfinite(v) or v < minimum or (strict and v == minimum):
        raise ConfigError(
            path, f"must be {'>' if strict else '>='} {minimum:g}, got {shown(value)}"
        )
    if v > maximum:
        raise ConfigError(path, f"must be <= {maximum:g}, got {shown(value)}")
    return v


def _percent(value: object, path: str, *, maximum: float) -> float:
    """A percentage > 0, not so small that the fraction it stands for underflows to zero."""
    v = _number(value, path, minimum=0.0, strict=True, maximum=maximum)
    if v < _SMALLEST_PERCENT:
        raise ConfigError(path, f"must be >= {_SMALLEST_PERCENT:g}, got {shown(value)}")
    return v


def _int(value: object, path: str, *, minimum: int, maximum: int = sys.maxsize) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer, got {shown(value)}")
    if value < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise ConfigError(path, f"must be <= {maximum}, got {shown(value)}")
    return value


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """*override* on top of *base*; nested tables merge, other values replace."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_ROUTE_FIELDS: Final = ("timeout", "retry_policy", "hedge", "enabled")
_RETRY_FIELDS: Final = (
    "retry_on",
    "num_retries",
    "per_try_timeout",
    "back_off",
    "retry_back_off",
    "budget",
    "retriable_status_codes",
)


class _RetryOnSpec(NamedTuple):
    names: tuple[str, ...]
    classes: tuple[type[BaseException], ...]
    conditions: tuple[str, ...]
    statuses: frozenset[int] | None


def _retry_on(
    value: object,
    path: str,
    errors: Mapping[str, type[BaseException]],
    statuses: object,
    statuses_path: str,
) -> _RetryOnSpec:
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",") if n.strip()]
    elif isinstance(value, Sequence) and all(isinstance(n, str) for n in value):
        names = [n.strip() for n in value]
    else:
        raise ConfigError(
            path, f"must be a list or comma-separated string of names, got {shown(value)}"
        )
    if not names:
        raise ConfigError(path, "must name at least one condition")
    classes: list[type[BaseException]] = []
    conditions: list[str] = []
    codes: set[int] = set()
    http = False
    for name in names:
        if name in errors:  # the application's own names come first
            classes.append(errors[name])
        elif name in ERROR_CONDITIONS:
            conditions.append(name)
        elif name in STATUS_CONDITIONS:
            http = True
            codes |= STATUS_CONDITIONS[name]
            if name in _NO_RESPONSE_TOO:
                conditions.append("reset")
        elif name in _UNSUPPORTED:
            raise ConfigError(path, f"{name!r}: {_UNSUPPORTED[name]}")
        else:
            known = sorted({*ERROR_CONDITIONS, *STATUS_CONDITIONS, *errors})
            raise ConfigError(path, f"unknown condition {name!r} (known: {', '.join(known)})")
    if statuses is not None:
        if "retriable-status-codes" not in names:
            raise ConfigError(statuses_path, "needs 'retriable-status-codes' in retry_on")
        if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Sequence):
            raise ConfigError(
                statuses_path, f"must be a list of HTTP statuses, got {shown(statuses)}"
            )
        for i, code in enumerate(statuses):
            if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
                raise ConfigError(
                    f"{statuses_path}[{i}]", f"must be an HTTP status (100-599), got {shown(code)}"
                )
            codes.add(code)
    elif "retriable-status-codes" in names:
        raise ConfigError(path, "'retriable-status-codes' needs retriable_status_codes = [...]")
    return _RetryOnSpec(
        tuple(names),
        tuple(dict.fromkeys(classes)),
        tuple(dict.fromkeys(conditions)),
        frozenset(codes) if http else None,
    )


def _back_off(table: Mapping[str, Any], path: str) -> Backoff:
    if "back_off" in table and "retry_back_off" in table:
        raise ConfigError(
            _join(path, "retry_back_off"), "give back_off or retry_back_off, not both"
        )
    envoy = "retry_back_off" in table
    if envoy:
        # Envoy's spelling, with Envoy's curve: retry_back_off = {base_interval, max_interval}.
        key, base_key, max_key = "retry_back_off", "base_interval", "max_interval"
    elif "back_off" in table:
        key, base_key, max_key = "back_off", "base", "max"
    else:
        return DEFAULT_BACKOFF
    bpath = _join(path, key)
    spec = _mapping(table[key], bpath)
    _known(spec, bpath, (base_key, max_key, "jitter"))
    if base_key not in spec:
        raise ConfigError(_join(bpath, base_key), "required")
    base = _duration(spec[base_key], _join(bpath, base_key))
    # Envoy: max_interval defaults to 10 times base_interval.
    if max_key in spec:
        cap = _duration(spec[max_key], _join(bpath, max_key))
    else:
        cap = min(10 * base, MAX_SECONDS)
    if cap < base:
        raise ConfigError(_join(bpath, max_key), f"must be >= {base_key} ({base:g} s), got {cap:g}")
    jitter = spec.get("jitter", "full")
    if jitter not in ("none", "full", "equal", "decorrelated"):
        raise ConfigError(
            _join(bpath, "jitter"),
            f"must be none, full, equal or decorrelated, got {shown(jitter)}",
        )
    if envoy:
        # Retry N waits U(0, (2**N - 1) * base_interval), capped: see Backoff.envoy.
        return Backoff.envoy(base, cap).replace(jitter=jitter)
    return Backoff(base=base, cap=cap, jitter=jitter)


# Finagle's RetryBudget(ttl, minRetriesPerSec, percentCanRetry), in the file's snake case; the
# former names (percent, min, window) still work, with a DeprecationWarning.
_BUDGET_FIELDS: Final = ("percent_can_retry", "min_retries_per_sec", "ttl")
_BUDGET_FORMER: Final = {
    "percent": "percent_can_retry",
    "min": "min_retries_per_sec",
    "window": "ttl",
}
# Envoy's retry_budget is another thing: a limit on *concurrent* retries, budget_percent of the
# requests in flight but at least min_retry_concurrency (cluster circuit_breakers.retry_budget).
_ENVOY_BUDGET: Final = ("budget_percent", "min_retry_concurrency")


def _budget(value: object, path: str) -> BudgetConfig:
    spec = dict(_mapping(value, path))
    for key in _ENVOY_BUDGET:
        if key in spec:
            raise ConfigError(
                _join(path, key),
                "is Envoy's budget of concurrent retries (a share of the requests in flight), "
                "which seawall does not have; seawall's budget is Finagle's: "
                "percent_can_retry (retries per 100 requests over ttl) plus min_retries_per_sec",
            )
    renamed = []
    for former, name in _BUDGET_FORMER.items():
        if former in spec:
            if name in spec:
                raise ConfigError(_join(path, former), f"give {name} or {former}, not both")
            spec[name] = spec.pop(former)
            renamed.append(f"{former} is now {name}")
    if renamed:
        import warnings

        warnings.warn(
            f"{path}: {', '.join(renamed)} (Finagle's names for the same settings)",
            DeprecationWarning,
            stacklevel=4,
        )
    _known(spec, path, _BUDGET_FIELDS)
    ppath, mpath, tpath = (_join(path, key) for key in _BUDGET_FIELDS)
    if "percent_can_retry" not in spec:
        raise ConfigError(ppath, "required")
    percent = _percent(spec["percent_can_retry"], ppath, maximum=1e14)
    minimum = _number(spec.get("min_retries_per_sec", DEFAULT_MIN_PER_SECOND), mpath, minimum=0.0)
    ttl = _duration(spec.get("ttl", DEFAULT_WINDOW), tpath, minimum=MIN_WINDOW)
    return BudgetConfig(percent, minimum, ttl)


def _hedge(value: object, path: str) -> HedgeConfig:
    spec = _mapping(value, path)
    _known(spec, path, ("delay", "max_attempts", "percentile", "max_extra_percent"))
    if "delay" not in spec:
        raise ConfigError(_join(path, "delay"), "required")
    delay = _duration(spec["delay"], _join(path, "delay"), positive=False)
    attempts = _int(spec.get("max_attempts", 2), _join(path, "max_attempts"), minimum=1)
    percentile = None
    if "percentile" in spec:
        ppath = _join(path, "percentile")
        percentile = _percent(spec["percentile"], ppath, maximum=100.0)
        if percentile >= 100:
            raise ConfigError(ppath, f"must be < 100, got {shown(spec['percentile'])}")
    extra = None
    if "max_extra_percent" in spec:
        epath = _join(path, "max_extra_percent")
        extra = _number(spec["max_extra_percent"], epath, minimum=0.0)
        if extra > 100 * (attempts - 1):
            most = 100 * (attempts - 1)
            raise ConfigError(epath, f"must be <= 100 x (max_attempts - 1) = {most}, got {extra:g}")
    return HedgeConfig(delay, attempts, percentile, extra)


def _route(
    name: str, table: Mapping[str, Any], path: str, errors: Mapping[str, type[BaseException]]
) -> RouteConfig:
    _known(table, path, _ROUTE_FIELDS)
    timeout = _duration(table["timeout"], _join(path, "timeout")) if "timeout" in table else None
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(_join(path, "enabled"), f"must be true or false, got {shown(enabled)}")
    hedge = _hedge(table["hedge"], _join(path, "hedge")) if "hedge" in table else None
    rpath = _join(path, "retry_policy")
    retry = _mapping(table.get("retry_policy", {}), rpath)
    _known(retry, rpath, _RETRY_FIELDS)
    num_retries = _int(
        retry.get("num_retries", 2),
        _join(rpath, "num_retries"),
        minimum=0,
        maximum=sys.maxsize - 1,  # max_attempts = num_retries + 1 must stay a machine int
    )
    per_try = retry.get("per_try_timeout")
    per_try_timeout = (
        None if per_try is None else _duration(per_try, _join(rpath, "per_try_timeout"))
    )
    conditions: tuple[str, ...] = ()
    if "retry_on" in retry:
        spec = _retry_on(
            retry["retry_on"],
            _join(rpath, "retry_on"),
            errors,
            retry.get("retriable_status_codes"),
            _join(rpath, "retriable_status_codes"),
        )
        retry_on, classes, conditions, statuses = spec
    elif "retriable_status_codes" in retry:
        raise ConfigError(
            _join(rpath, "retriable_status_codes"), "needs 'retriable-status-codes' in retry_on"
        )
    else:
        retry_on, classes, statuses = ("connect-failure", "timeout"), None, None
    back_off = _back_off(retry, rpath)
    budget = _budget(retry["budget"], _join(rpath, "budget")) if "budget" in retry else None
    route = RouteConfig(
        name=name,
        num_retries=num_retries,
        retry_on=retry_on,
        retry_statuses=statuses,
        timeout=timeout,
        per_try_timeout=per_try_timeout,
        back_off=back_off,
        budget=budget,
        hedge=hedge,
        enabled=enabled,
        _errors=classes,
        _conditions=conditions,
    )
    # Every field was checked above; building the objects once proves the combination works,
    # and a problem found only here still names the route.
    try:
        route.build(budget=None if budget is None else budget.build(None))
        if hedge is not None:
            hedge.build()
    except (TypeError, ValueError) as err:
        raise ConfigError(path, str(err)) from err
    return route


def parse_config(
    data: Mapping[str, Any], *, errors: Mapping[str, type[BaseException]] | None = None
) -> dict[str, RouteConfig]:
    """Validate a configuration mapping; the routes by name.

    Args:
        data: ``{"defaults": {...}, "routes": {name: {...}}}`` (``defaults`` is optional and
            is merged under every route).
        errors: application error classes that ``retry_on`` may name, e.g.
            ``{"db-unavailable": DatabaseUnavailable}``.

    Raises:
        ConfigError: a field is invalid; the message starts with its path.
    """
    errs = dict(errors or {})
    for key, cls in errs.items():
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError(
                f"errors must map names to exception classes, got {shown(key)}: {cls!r}"
            )
    root = _mapping(data, "")
    _known(root, "", ("defaults", "routes"))
    defaults = _mapping(root.get("defaults", {}), "defaults")
    _known(defaults, "defaults", _ROUTE_FIELDS)
    routes = _mapping(root.get("routes", {}), "routes")
    parsed: dict[str, RouteConfig] = {}
    for name, spec in routes.items():
        path = _join("routes", name)
        if not name or not name.strip():
            raise ConfigError(path, "route names must not be empty")
        try:
            merged = _merge(defaults, _mapping(spec, path))
        except RecursionError:
            raise ConfigError(path, _TOO_DEEP) from None
        parsed[name] = _route(name, merged, path, errs)
    _check_defaults(defaults, errs)
    return parsed


def _check_defaults(defaults: Mapping[str, Any], errors: Mapping[str, type[BaseException]]) -> None:
    """Validate ``defaults`` as a route of its own, so that a bad value there is refused even
    when every route overrides it (it would otherwise wait for the first route that does not).
    ``retriable_status_codes`` may wait there for the routes' ``retry_on``."""
    if not defaults:
        return
    retry = defaults.get("retry_policy")
    if isinstance(retry, Mapping) and "retriable_status_codes" in retry and "retry_on" not in retry:
        retry = {**retry, "retry_on": "retriable-status-codes"}
        defaults = {**defaults, "retry_policy": retry}
    _route("defaults", defaults, "defaults", errors)


def _top(loaded: object, name: str) -> Mapping[str, Any]:
    if not isinstance(loaded, Mapping):
        raise ConfigError("", f"{name}: the top level must be a table/mapping, got {shown(loaded)}")
    return _mapping(loaded, "")


_TOO_DEEP: Final = "tables are nested too deeply"


def _read(path: str | os.PathLike[str]) -> bytes:
    with open(os.fspath(path), "rb") as f:
        return f.read()


def _decode(raw: bytes, path: str | os.PathLike[str]) -> Mapping[str, Any]:
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower()
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            try:
                import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
            except ImportError as err:
                raise ConfigError(
                    "", f"{name}: reading TOML on Python 3.10 needs the tomli package"
                ) from err
        try:
            return _mapping(tomllib.loads(raw.decode("utf-8")), "")
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ConfigError("", f"{name}: invalid TOML: {err}") from err
        except RecursionError:
            raise ConfigError("", f"{name}: invalid TOML: {_TOO_DEEP}") from None
    if suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:
            raise ConfigError("", f"{name}: reading YAML needs seawall[yaml] (PyYAML)") from err
        try:
            loaded = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ConfigError("", f"{name}: invalid YAML: {err}") from err
        except RecursionError:
            raise ConfigError("", f"{name}: invalid YAML: {_TOO_DEEP}") from None
        return {} if loaded is None else _top(loaded, name)
    if suffix == ".json":
        import json

        try:
            loaded = json.loads(raw)
        except ValueError as err:
            raise ConfigError("", f"{name}: invalid JSON: {err}") from err
        except RecursionError:
            raise ConfigError("", f"{name}: invalid JSON: {_TOO_DEEP}") from None
        return _top(loaded, name)
    raise ConfigError("", f"{name}: unknown format {suffix!r} (use .toml, .yaml, .yml or .json)")


def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    errors: Mapping[str, type[BaseException]] | None = None,
) -> dict[str, RouteConfig]:
    """Read and validate a policy file (``.toml``, ``.yaml``/``.yml``, ``.json``) or mapping.

    Raises:
        ConfigError: the file cannot be parsed or a field is invalid (the path is named).
        OSError: the file cannot be read.
    """
    data = source if isinstance(source, Mapping) else _decode(_read(source), source)
    return parse_config(data, errors=errors)


# -- live policies ------------------------------------------------------------------------------


@public("seawall.config")
class PolicyHandle:
    """A named, reloadable policy: every call uses the registry's current policy for the name.

    Use it like a :class:`~seawall.RetryPolicy`: ``handle.call(fn)``, ``await
    handle.acall(fn)``, ``handle.run(fn)``, ``handle.attempts()`` or as a decorator. Holding a
    handle (instead of a policy) is what lets :meth:`PolicyRegistry.reload` change live
    behaviour.
    """

    __slots__ = ("_held", "_policy", "_route", "name")

    def __init__(self, name: str, policy: RetryPolicy, route: RouteConfig | None) -> None:
        self.name = name
        self._policy = policy
        self._route = route
        # Set once the application asked for the handle: its route cannot vanish on reload.
        self._held = False

    @property
    def policy(self) -> RetryPolicy:
        """The current policy (it changes on reload)."""
        return self._policy

    @property
    def route(self) -> RouteConfig | None:
        """The current route settings, or ``None`` for a policy registered in code."""
        return self._route

    @property
    def hedge_config(self) -> HedgeConfig | None:
        """The route's hedging settings, if configured (the live hedge itself is
        :meth:`PolicyRegistry.hedge`)."""
        return None if self._route is None else self._route.hedge

    @property
    def hedge(self) -> HedgeConfig | None:
        """The former name of :attr:`hedge_config`."""
        import warnings

        warnings.warn(
            "PolicyHandle.hedge is now PolicyHandle.hedge_config", DeprecationWarning, stacklevel=2
        )
        return self.hedge_config

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._policy._first(fn, args, kwargs)
        return result

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._policy._afirst(fn, args, kwargs)
        return result

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T]:
        return self._policy.run(fn, *args, **kwargs)

    async def arun(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Outcome[T]:
        return await self._policy.arun(fn, *args, **kwargs)

    def attempts(self) -> Attempts:
        return self._policy.attempts()

    # The current policy's own first-attempt paths, looked up at each call (a reload swaps it).
    def _run(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        return self._policy._first(fn, args, kwargs)

    async def _arun(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        return await self._policy._afirst(fn, args, kwargs)

    @overload
    def __call__(self, fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]: ...

    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        """Decorate ``def`` or ``async def``: each call goes through the current policy."""
        return decorate(fn, "retry", self._run, self._arun)

    def __repr__(self) -> str:
        return f"<PolicyHandle {self.name!r} {self._policy!r}>"


@public("seawall.config")
class HedgeHandle:
    """A route's live hedging policy: every call uses the registry's current :class:`Hedge`.

    ``await handle.acall(fn, *args)`` or ``@handle`` on an ``async def``. When the route has no
    ``hedge`` settings (or a reload removed them), calls go through once, unhedged. The hedge
    draws its extra attempts from the route's retry budget without reporting requests to it:
    run it inside the route's policy (``await users.acall(hedged.acall, fetch, 42)``), which
    reports them, so that nothing counts twice.
    """

    __slots__ = ("_registry", "name")

    def __init__(self, name: str, registry: PolicyRegistry) -> None:
        self.name = name
        self._registry = registry

    @property
    def policy(self) -> Hedge | None:
        """The current :class:`~seawall.Hedge` (it changes on reload), or ``None``."""
        return self._registry._hedges.get(self.name)

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        policy = self._registry._hedges.get(self.name)
        if policy is None:
            return await fn(*args, **kwargs)
        return await policy.acall(fn, *args, **kwargs)

    def __call__(self, fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        """Decorate an ``async def``: each call goes through the current hedge."""
        acall = self.acall

        async def run(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            return await acall(fn, *args, **kwargs)

        return decorate(fn, "hedge", None, run)

    def __repr__(self) -> str:
        return f"<HedgeHandle {self.name!r} {self.policy!r}>"


@public("seawall.config")
class PolicyRegistry:
    """One place for every retry policy of an application: see, change, reload, switch off.

    Args:
        source: a policy file path or mapping to load at once (optional).
        hooks: hooks given to every policy built from the configuration (e.g. a
            :class:`~seawall.instrumentation.MetricsHook`); ``None`` means the logging hook.
        clock: the clock for policies and budgets (the system clock by default).
        errors: application error classes ``retry_on`` may name.

    Example:
        ``registry = PolicyRegistry("policies.toml")``;
        ``users = registry.policy("users")``; ``users.call(fetch_user, 42)``;
        later ``registry.reload()`` (e.g. on SIGHUP): ``users`` follows the new file.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        hooks: Sequence[Hook] | None = None,
        clock: Clock | None = None,
        errors: Mapping[str, type[BaseException]] | None = None,
    ) -> None:
        self._hooks = None if hooks is None else tuple(hooks)
        self._clock = clock
        self._errors = dict(errors or {})
        self._lock = threading.RLock()
        self._handles: dict[str, PolicyHandle] = {}
        self._budgets: dict[str, tuple[BudgetConfig, RetryBudget]] = {}
        self._hedges: dict[str, Hedge] = {}
        # What each live hedge was built from: kept across reloads while unchanged, so that its
        # latency tracker and load tokens carry on.
        self._hedge_sources: dict[str, tuple[HedgeConfig, RetryBudget | None]] = {}
        self._source: str | os.PathLike[str] | None = None
        self._loaded: bytes | None = None  # the file content last loaded
        if source is not None:
            self.load(source)

    def _build(self, route: RouteConfig) -> RetryPolicy:
        budget = None
        if route.budget is not None:
            kept = self._budgets.get(route.name)
            if kept is not None and kept[0] == route.budget:
                budget = kept[1]  # unchanged settings: keep the budget's window of history
            else:
                budget = route.budget.build(self._clock)
        return route.build(budget=budget, hooks=self._hooks, clock=self._clock)

    def _build_hedge(self, route: RouteConfig, budget: object) -> Hedge | None:
        if route.hedge is None:
            return None
        shared = budget if isinstance(budget, RetryBudget) else None
        source = (route.hedge, shared)
        kept = self._hedges.get(route.name)
        if kept is not None and self._hedge_sources.get(route.name) == source:
            # Same settings and same budget object (a tuple compares budgets by identity).
            return kept
        hooks: list[HedgeHook] = []
        for hook in self._hooks or ():
            # A MetricsHook reports hedges too (seawall_hedges_total, seawall_hedge_wins_total).
            hedge_hook = getattr(hook, "hedge_hook", None)
            if callable(hedge_hook):
                hooks.append(hedge_hook)
        hedge = route.hedge.build(name=route.name, budget=shared, clock=self._clock, hooks=hooks)
        # The route's retry policy reports requests and outcomes to the shared budget; the hedge
        # only withdraws, as in a Pipeline, so nothing counts twice.
        return hedge.withdrawing_only()

    def load(self, source: str | os.PathLike[str] | Mapping[str, Any]) -> None:
        """Replace every configured policy with *source*'s, atomically.

        Everything is validated first: on any error nothing changes. Handles already given out
        follow the new policies; routes missing from *source* are removed unless a handle to
        them is held (then :class:`ConfigError`). Each route's ``enabled`` sets the per-name
        kill switch.

        Raises:
            ConfigError: invalid settings, or a held route missing from *source*.
        """
        raw: bytes | None = None
        if isinstance(source, Mapping):
            routes = parse_config(source, errors=self._errors)
        else:
            raw = _read(source)
            routes = parse_config(_decode(raw, source), errors=self._errors)
        with self._lock:
            for name, handle in self._handles.items():
                if handle._route is not None and name not in routes and handle._held:
                    raise ConfigError(
                        _join("routes", name), "missing, but the application holds its policy"
                    )
            policies = {name: self._build(route) for name, route in routes.items()}
            hedges = {
                name: self._build_hedge(route, policies[name].budget)
                for name, route in routes.items()
            }
            for name, route in routes.items():
                live = self._handles.get(name)
                if live is None:
                    self._handles[name] = PolicyHandle(name, policies[name], route)
                else:
                    live._policy, live._route = policies[name], route
                if route.budget is not None:
                    budget = policies[name].budget
                    assert isinstance(budget, RetryBudget)
                    self._budgets[name] = (route.budget, budget)
                else:
                    self._budgets.pop(name, None)
                hedge = hedges[name]
                if hedge is None:
                    self._hedges.pop(name, None)
                    self._hedge_sources.pop(name, None)
                else:
                    assert route.hedge is not None
                    self._hedges[name] = hedge
                    budget = policies[name].budget
                    shared = budget if isinstance(budget, RetryBudget) else None
                    self._hedge_sources[name] = (route.hedge, shared)
                set_enabled(route.enabled, name=name)
            for name in [n for n, h in self._handles.items() if h._route and n not in routes]:
                del self._handles[name]
                self._budgets.pop(name, None)
                self._hedges.pop(name, None)
                self._hedge_sources.pop(name, None)
                set_enabled(True, name=name)  # a switch the file set must not outlive the route
            if not isinstance(source, Mapping):
                self._source = source
            self._loaded = raw

    def reload(self) -> bool:
        """Load the file given to :meth:`load` again if its content changed; whether it did.

        Raises:
            ConfigError: the new content is invalid (the live policies are kept).
            RuntimeError: the registry was never loaded from a file.
        """
        if self._source is None:
            raise RuntimeError("reload() needs a registry loaded from a file")
        if _read(self._source) == self._loaded:
            return False
        self.load(self._source)
        return True

    def register(self, name: str, policy: RetryPolicy) -> PolicyHandle:
        """Add (or replace) a policy defined in code, so it shows up and can be changed here.

        The policy is renamed to *name* (its metrics, logs and kill switch use it).
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
        if policy.name != name:
            policy = policy.replace(name=name)
        with self._lock:
            handle = self._handles.get(name)
            if handle is None:
                handle = self._handles[name] = PolicyHandle(name, policy, None)
            else:
                handle._policy = policy
            return handle

    def replace(self, name: str, **changes: Any) -> RetryPolicy:
        """Change one live policy's parameters (as :meth:`RetryPolicy.replace`); the new policy.

        The change lasts until the next :meth:`load`/:meth:`reload` of a file that sets it.
        """
        with self._lock:
            handle = self._handle(name)
            handle._policy = handle._policy.replace(**changes)
            return handle._policy

    def _handle(self, name: str) -> PolicyHandle:
        handle = self._handles.get(name)
        if handle is None:
            known = ", ".join(sorted(self._handles)) or "none"
            raise KeyError(f"no policy named {name!r} (known: {known})")
        return handle

    def policy(self, name: str) -> PolicyHandle:
        """The handle for *name*: it always calls through the current policy of that name.

        Raises:
            KeyError: no such policy (the message lists the known names).
        """
        handle = self._handle(name)
        handle._held = True
        return handle

    def hedge(self, name: str) -> HedgeHandle:
        """The live hedging handle for route *name* (its ``hedge`` settings, following reloads).

        Raises:
            KeyError: no such policy (the message lists the known names).
        """
        self._handle(name)._held = True
        return HedgeHandle(name, self)

    def __getitem__(self, name: str) -> RetryPolicy:
        """The current :class:`~seawall.RetryPolicy` for *name* (a snapshot, not live)."""
        return self._handle(name)._policy

    def __contains__(self, name: object) -> bool:
        return name in self._handles

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handles))

    def __len__(self) -> int:
        return len(self._handles)

    def set_enabled(self, enabled: bool | str, name: str | bool | None = None) -> None:
        """The per-name kill switch: ``set_enabled(False, name="users")`` makes that policy
        try once, never retry. The same order as :func:`seawall.set_enabled`; the former
        ``set_enabled("users", False)`` still works, with a DeprecationWarning.

        Raises:
            KeyError: no policy has that name.
        """
        if isinstance(enabled, str):
            import warnings

            warnings.warn(
                "PolicyRegistry.set_enabled(name, enabled) is now set_enabled(enabled, name=name)",
                DeprecationWarning,
                stacklevel=2,
            )
            enabled, name = name, enabled  # type: ignore[assignment]
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        self._handle(name)
        set_enabled(enabled, name=name)  # type: ignore[arg-type]

    def describe(self) -> dict[str, dict[str, Any]]:
        """Every policy's settings and kill-switch state, as plain data (for an admin page)."""
        out: dict[str, dict[str, Any]] = {}
        for name in self:
            handle = self._handles[name]
            p = handle._policy
            b = p.backoff
            info: dict[str, Any] = {
                "source": "config" if handle._route is not None else "code",
                "enabled": is_enabled(name),
                "max_attempts": p.max_attempts,
                "timeout": p.timeout,
                "per_try_timeout": p.attempt_timeout,
                "back_off": _describe_back_off(b),
                "budget": type(p.budget).__name__ if p.budget is not None else None,
            }
            if handle._route is not None:
                route = handle._route.describe()
                info["retry_on"] = route["retry_on"]
                info["retry_statuses"] = route["retry_statuses"]
                info["budget"] = route["budget"]
                info["hedge"] = route["hedge"]
            out[name] = info
        return out

    def __repr__(self) -> str:
        return f"<PolicyRegistry {sorted(self._handles)}>"
