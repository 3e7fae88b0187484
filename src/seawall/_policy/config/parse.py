"""Reading a policy file: its fields, checked one by one, into :class:`RouteConfig` objects."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from seawall._core.validate import MAX_SECONDS, MIN_WINDOW, key_path, shown, unknown_key
from seawall._policy.config.conditions import (
    _NO_RESPONSE_TOO,
    _UNSUPPORTED,
    ERROR_CONDITIONS,
    STATUS_CONDITIONS,
)
from seawall._policy.config.schema import BudgetConfig, ConfigError, HedgeConfig, RouteConfig
from seawall._strategies.backoff import DEFAULT_BACKOFF, Backoff
from seawall._strategies.budget import DEFAULT_MIN_PER_SECOND, DEFAULT_WINDOW

if TYPE_CHECKING:
    pass


__all__ = ["load_config", "parse_config"]


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


def _known(
    table: Mapping[str, Any],
    path: str,
    allowed: Sequence[str],
    aliases: Mapping[str, str] | None = None,
) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(key_path(path, key), unknown_key(key, allowed, aliases=aliases))


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
# Other libraries' words for a field (and seawall's own keyword arguments), suggested as the
# field when an unknown key is near one: ``attempts`` means ``num_retries`` + 1.
_ROUTE_ALIASES: Final = {
    "retry": "retry_policy",
    "retries": "retry_policy",
    "policy": "retry_policy",
}
_RETRY_ALIASES: Final = {
    "attempts": "num_retries",
    "max_attempts": "num_retries",
    "retries": "num_retries",
    "max_retries": "num_retries",
    "timeout": "per_try_timeout",
    "attempt_timeout": "per_try_timeout",
    "retry_budget": "budget",
}


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
    _known(table, path, _ROUTE_FIELDS, _ROUTE_ALIASES)
    timeout = _duration(table["timeout"], _join(path, "timeout")) if "timeout" in table else None
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(_join(path, "enabled"), f"must be true or false, got {shown(enabled)}")
    hedge = _hedge(table["hedge"], _join(path, "hedge")) if "hedge" in table else None
    rpath = _join(path, "retry_policy")
    retry = _mapping(table.get("retry_policy", {}), rpath)
    _known(retry, rpath, _RETRY_FIELDS, _RETRY_ALIASES)
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
    _known(defaults, "defaults", _ROUTE_FIELDS, _ROUTE_ALIASES)
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
