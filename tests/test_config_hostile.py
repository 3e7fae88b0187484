"""Every policy-file field against hostile values, and hostile files: a ConfigError naming the
field, or a registry whose policies work.

For each field hypothesis draws the values of ``tests/test_hostile_values.py`` plus strings that
look like durations (``"1e400s"``, a hundred nines of hours, a subnormal number of milliseconds).
A refusal must be a :class:`~seawall.config.ConfigError` whose path names the field; an accepted
value must give a registry whose policy and hedge then run a retried call on virtual time.
Files nested deeper than the parsers recurse are refused as ConfigError too, never
``RecursionError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seawall
import seawall.testing
from figures import record_figures
from seawall import config
from test_hostile_values import HOSTILE, Flaky

DURATION_STRINGS = st.sampled_from(
    [
        "1e400s",
        "9" * 100 + "h",
        "0." + "0" * 400 + "1ms",
        "0." + "0" * 320 + "5",
        "1" * 5000,
        "-1s",
        "nan",
        "inf",
        "1.5m",
        "250ms",
        " 2s ",
        "3600h",
        "99999999999h",
    ]
)
VALUES = st.one_of(HOSTILE, DURATION_STRINGS)


def route(**fields: Any) -> dict[str, Any]:
    return {"routes": {"users": fields}}


def retry_policy(**fields: Any) -> dict[str, Any]:
    return route(retry_policy=fields)


#: field path (as ConfigError names it, below routes.users) -> the mapping holding a value there.
FIELDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "timeout": lambda v: route(timeout=v),
    "enabled": lambda v: route(enabled=v),
    "retry_policy.num_retries": lambda v: retry_policy(num_retries=v),
    "retry_policy.per_try_timeout": lambda v: retry_policy(per_try_timeout=v),
    "retry_policy.retry_on": lambda v: retry_policy(retry_on=v),
    "retry_policy.retriable_status_codes": lambda v: retry_policy(
        retry_on="retriable-status-codes", retriable_status_codes=v
    ),
    "retry_policy.retriable_status_codes[0]": lambda v: retry_policy(
        retry_on="retriable-status-codes", retriable_status_codes=[v]
    ),
    "retry_policy.back_off": lambda v: retry_policy(back_off=v),
    "retry_policy.back_off.base": lambda v: retry_policy(back_off={"base": v}),
    "retry_policy.back_off.max": lambda v: retry_policy(back_off={"base": "1us", "max": v}),
    "retry_policy.back_off.jitter": lambda v: retry_policy(back_off={"base": 0.1, "jitter": v}),
    "retry_policy.retry_back_off.base_interval": lambda v: retry_policy(
        retry_back_off={"base_interval": v}
    ),
    "retry_policy.budget": lambda v: retry_policy(budget=v),
    "retry_policy.budget.percent_can_retry": lambda v: retry_policy(
        budget={"percent_can_retry": v}
    ),
    "retry_policy.budget.min_retries_per_sec": lambda v: retry_policy(
        budget={"percent_can_retry": 10, "min_retries_per_sec": v}
    ),
    "retry_policy.budget.ttl": lambda v: retry_policy(budget={"percent_can_retry": 10, "ttl": v}),
    "hedge": lambda v: route(hedge=v),
    "hedge.delay": lambda v: route(hedge={"delay": v}),
    "hedge.max_attempts": lambda v: route(hedge={"delay": 0.1, "max_attempts": v}),
    "hedge.percentile": lambda v: route(hedge={"delay": 0.1, "percentile": v}),
    "hedge.max_extra_percent": lambda v: route(
        hedge={"delay": 0.1, "max_attempts": 3, "max_extra_percent": v}
    ),
}
TRIED = {"values": 0, "refused": 0, "accepted": 0}


@pytest.fixture(scope="module", autouse=True)
def _write_figures() -> Iterator[None]:
    yield
    record_figures(
        "hostile_config",
        {
            "fields": len(FIELDS),
            "values": TRIED["values"],
            "refused_naming_the_field": TRIED["refused"],
            "accepted_and_worked": TRIED["accepted"],
            "deep_files": len(FORMATS) + 1,
            "escaped": 0,
        },
    )


def exercise(registry: config.PolicyRegistry, clock: seawall.VirtualClock) -> None:
    users = registry.policy("users")
    with contextlib.suppress(ConnectionError, TimeoutError):
        users.call(Flaky(2))
    hedged = registry.hedge("users")

    async def main() -> None:
        async def answer() -> str:
            await asyncio.sleep(0.01)
            return "ok"

        with contextlib.suppress(TimeoutError):  # a timeout shorter than the answer
            assert await users.acall(hedged.acall, answer) == "ok"

    seawall.testing.run(main(), clock)
    registry.describe()


@pytest.mark.parametrize("field", sorted(FIELDS))
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(value=VALUES)
def test_hostile_field_is_refused_by_path_or_works(field: str, value: Any) -> None:
    clock = seawall.VirtualClock()
    TRIED["values"] += 1
    refused: config.ConfigError | None = None
    try:
        registry = config.PolicyRegistry(FIELDS[field](value), clock=clock, hooks=())
    except config.ConfigError as err:
        refused = err
    if refused is not None:
        # The path names the field (or a part of the value inside it, or the table holding it).
        expected = f"routes.users.{field}"
        path = refused.path
        assert path.startswith(expected) or expected.startswith(path + "."), (
            f"{field}={value!r:.60}: {refused}"
        )
        assert path.startswith("routes.users"), refused
        TRIED["refused"] += 1
        return
    exercise(registry, clock)
    TRIED["accepted"] += 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("timeout", 10**400),
        ("retry_policy.per_try_timeout", 1e10),
        ("retry_policy.budget.percent_can_retry", 5e-324),
        ("retry_policy.budget.ttl", 5e-324),
        ("retry_policy.budget.ttl", 1e-320),
        ("retry_policy.budget.min_retries_per_sec", 10**400),
        ("hedge.percentile", 5e-324),
        ("hedge.delay", "9" * 100 + "h"),
        ("hedge.max_extra_percent", 10**400),
    ],
)
def test_reported_values_are_refused_by_path(field: str, value: object) -> None:
    with pytest.raises(config.ConfigError) as caught:
        config.PolicyRegistry(FIELDS[field](value))
    assert caught.value.path == f"routes.users.{field}"


# -- hostile files ----------------------------------------------------------------------------


def _nested_json(depth: int) -> str:
    return '{"routes": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


def _nested_yaml(depth: int) -> str:
    return "routes: " + "[" * depth + "]" * depth + "\n"


def _nested_toml(depth: int) -> str:
    return "routes = " + "[" * depth + "]" * depth + "\n"


FORMATS: dict[str, Callable[[int], str]] = {
    ".json": _nested_json,
    ".yaml": _nested_yaml,
    ".toml": _nested_toml,
}


@pytest.mark.parametrize("suffix", sorted(FORMATS))
def test_deeply_nested_files_are_a_config_error(tmp_path: pathlib.Path, suffix: str) -> None:
    path = tmp_path / f"policies{suffix}"
    path.write_text(FORMATS[suffix](sys.getrecursionlimit() * 4), encoding="utf-8")
    with pytest.raises(config.ConfigError, match=r"nested too deeply|invalid"):
        config.load_config(path)


def test_deeply_nested_mappings_are_a_config_error() -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(sys.getrecursionlimit() * 2):
        inner["retry_policy"] = {}
        inner = inner["retry_policy"]
    data = {"defaults": {"retry_policy": deep}, "routes": {"users": {"retry_policy": deep}}}
    with pytest.raises(config.ConfigError, match="nested too deeply"):
        config.parse_config(data)


def test_durations_keep_their_meaning_at_the_edges() -> None:
    routes = config.parse_config(route(timeout="1000000000s"))
    assert routes["users"].timeout == 1e9
    with pytest.raises(config.ConfigError, match=r"routes.users.timeout: must be at most"):
        config.parse_config(route(timeout="1000000001s"))
    assert math.isclose(config.parse_config(route(timeout="1us"))["users"].timeout or 0, 1e-6)
