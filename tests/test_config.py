"""Declarative policies: parsing, validation with field paths, files, and the live registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import seawall
from seawall.config import ConfigError, PolicyRegistry, load_config, parse_config
from seawall.instrumentation import Counters, MetricsHook
from seawall.testing import VirtualClock, run

USERS: dict[str, Any] = {
    "routes": {
        "users": {
            "timeout": "2s",
            "retry_policy": {
                "retry_on": "connect-failure,reset,timeout,5xx",
                "num_retries": 3,
                "per_try_timeout": "500ms",
                "back_off": {"base": "25ms", "max": "250ms"},
                "budget": {"percent_can_retry": 20, "min_retries_per_sec": 3},
            },
            "hedge": {"delay": "50ms", "max_attempts": 2},
        }
    }
}

TOML = """
[defaults.retry_policy]
num_retries = 1

[routes.users]
timeout = "2s"
hedge = { delay = "50ms", max_attempts = 2 }

[routes.users.retry_policy]
retry_on = "connect-failure,reset,timeout,5xx"
num_retries = 3
per_try_timeout = "500ms"
back_off = { base = "25ms", max = "250ms" }
budget = { percent_can_retry = 20, min_retries_per_sec = 3 }

[routes.search]
"""

YAML = """
defaults:
  retry_policy:
    num_retries: 1
routes:
  users:
    timeout: 2s
    hedge: {delay: 50ms, max_attempts: 2}
    retry_policy:
      retry_on: [connect-failure, reset, timeout, 5xx]
      num_retries: 3
      per_try_timeout: 500ms
      back_off: {base: 25ms, max: 250ms}
      budget: {percent_can_retry: 20, min_retries_per_sec: 3}
  search: {}
"""


class Failing:
    def __init__(self, exc: BaseException | None = None, failures: int = 10**9) -> None:
        self.exc = exc or ConnectionError("refused")
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc
        return "ok"

    async def acall(self) -> str:
        return self()


def test_a_route_maps_onto_a_retry_policy() -> None:
    route = parse_config(USERS)["users"]
    clock = VirtualClock()
    budget = route.budget.build(clock) if route.budget else None
    policy = route.build(budget=budget, clock=clock)
    assert policy.name == "users"
    assert policy.max_attempts == 4
    assert policy.timeout == 2.0
    assert policy.attempt_timeout == 0.5
    assert (policy.backoff.base, policy.backoff.cap, policy.backoff.jitter) == (0.025, 0.25, "full")
    assert isinstance(policy.budget, seawall.RetryBudget)
    assert policy.budget.ratio == pytest.approx(0.2)
    assert policy.budget.min_per_second == 3
    assert route.hedge == seawall.config.HedgeConfig(delay=0.05, max_attempts=2)
    assert route.retry_statuses == frozenset(range(500, 600))
    assert route.http_rules().retry_statuses == frozenset(range(500, 600))
    # "reset" and "connect-failure" retry connection errors, "timeout" timeouts; nothing else.
    flaky = Failing(ConnectionResetError("reset"), failures=2)
    assert policy.call(flaky) == "ok"
    assert flaky.calls == 3
    wrong = Failing(ValueError("bad"))
    with pytest.raises(ValueError):
        policy.call(wrong)
    assert wrong.calls == 1


def test_defaults_apply_under_every_route_and_routes_override_them() -> None:
    routes = parse_config(
        {
            "defaults": {"timeout": 5, "retry_policy": {"num_retries": 1, "per_try_timeout": 1}},
            "routes": {"users": {"retry_policy": {"num_retries": 4}}, "search": {}},
        }
    )
    assert routes["users"].num_retries == 4
    assert routes["users"].per_try_timeout == 1.0
    assert routes["search"].num_retries == 1
    assert routes["search"].timeout == 5.0
    # Without back_off the engine's default backoff applies; Envoy's spelling works too.
    assert routes["search"].back_off == seawall.Backoff()
    envoy = parse_config(
        {
            "routes": {
                "x": {"retry_policy": {"retry_back_off": {"base_interval": "100ms"}}},
            }
        }
    )["x"]
    assert (envoy.back_off.base, envoy.back_off.cap) == (0.1, pytest.approx(1.0))


@pytest.mark.parametrize(("suffix", "text"), [(".toml", TOML), (".yaml", YAML), (".yml", YAML)])
def test_toml_yaml_and_json_files_give_the_same_routes(
    tmp_path: Path, suffix: str, text: str
) -> None:
    path = tmp_path / f"policies{suffix}"
    path.write_text(text)
    routes = load_config(path)
    as_json = tmp_path / "policies.json"
    as_json.write_text(
        json.dumps(
            {
                "defaults": {"retry_policy": {"num_retries": 1}},
                "routes": {**USERS["routes"], "search": {}},
            }
        )
    )
    assert routes == load_config(as_json)
    assert routes["search"].num_retries == 1
    assert routes["users"].num_retries == 3


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"routes": {"users": {"retry_policy": {"num_retries": -1}}}},
            "routes.users.retry_policy.num_retries: must be >= 0, got -1",
        ),
        (
            {"routes": {"users": {"retry_policy": {"num_retries": 1.5}}}},
            "routes.users.retry_policy.num_retries: must be an integer, got 1.5",
        ),
        (
            {"routes": {"users": {"retry_policy": {"num_retrys": 1}}}},
            "routes.users.retry_policy.num_retrys: unknown field",
        ),
        ({"route": {}}, "route: unknown field"),
        ({"routes": []}, "routes: must be a table/mapping"),
        ({"routes": {"users": {"timeout": "2 weeks"}}}, "routes.users.timeout: must be a duration"),
        ({"routes": {"users": {"timeout": 0}}}, "routes.users.timeout: must be > 0, got 0"),
        ({"routes": {"users": {"timeout": float("nan")}}}, "routes.users.timeout: must be > 0"),
        ({"routes": {"users": {"timeout": True}}}, "routes.users.timeout: must be a duration"),
        (
            {"routes": {"users": {"retry_policy": {"per_try_timeout": "-1s"}}}},
            "routes.users.retry_policy.per_try_timeout: must be a duration",
        ),
        (
            {"routes": {"users": {"retry_policy": {"retry_on": "connect-failure,teapot"}}}},
            "routes.users.retry_policy.retry_on: unknown condition 'teapot'",
        ),
        (
            {"routes": {"users": {"retry_policy": {"retry_on": ""}}}},
            "routes.users.retry_policy.retry_on: must name at least one condition",
        ),
        (
            {"routes": {"users": {"retry_policy": {"retry_on": 5}}}},
            "routes.users.retry_policy.retry_on: must be a list",
        ),
        (
            {"routes": {"users": {"retry_policy": {"back_off": {"base": "1s", "max": "10ms"}}}}},
            "routes.users.retry_policy.back_off.max: must be >= base",
        ),
        (
            {"routes": {"users": {"retry_policy": {"back_off": {"max": "10ms"}}}}},
            "routes.users.retry_policy.back_off.base: required",
        ),
        (
            {"routes": {"users": {"retry_policy": {"back_off": {"base": 1, "jitter": "x"}}}}},
            "routes.users.retry_policy.back_off.jitter: must be none, full, equal or decorrelated",
        ),
        (
            {
                "routes": {
                    "users": {
                        "retry_policy": {
                            "back_off": {"base": 1},
                            "retry_back_off": {"base_interval": 1},
                        }
                    }
                }
            },
            "routes.users.retry_policy.retry_back_off: give back_off or retry_back_off",
        ),
        (
            {"routes": {"users": {"retry_policy": {"budget": {"percent_can_retry": 0}}}}},
            "routes.users.retry_policy.budget.percent_can_retry: must be > 0, got 0",
        ),
        (
            {
                "routes": {
                    "users": {
                        "retry_policy": {
                            "budget": {"percent_can_retry": 10, "min_retries_per_sec": -1}
                        }
                    }
                }
            },
            "routes.users.retry_policy.budget.min_retries_per_sec: must be >= 0, got -1",
        ),
        (
            {"routes": {"users": {"retry_policy": {"budget": {"min_retries_per_sec": 1}}}}},
            "routes.users.retry_policy.budget.percent_can_retry: required",
        ),
        (
            {"routes": {"users": {"hedge": {"delay": "fast"}}}},
            "routes.users.hedge.delay: must be a duration",
        ),
        (
            {"routes": {"users": {"hedge": {"delay": 0.1, "max_attempts": 0}}}},
            "routes.users.hedge.max_attempts: must be >= 1, got 0",
        ),
        ({"routes": {"users": {"enabled": "no"}}}, "routes.users.enabled: must be true or false"),
        (
            {"routes": {"users": {"retry_policy": {"retriable_status_codes": [503]}}}},
            "routes.users.retry_policy.retriable_status_codes: needs 'retriable-status-codes'",
        ),
        (
            {
                "routes": {
                    "users": {
                        "retry_policy": {
                            "retry_on": "retriable-status-codes",
                            "retriable_status_codes": [503, 99],
                        }
                    }
                }
            },
            "routes.users.retry_policy.retriable_status_codes[1]: must be an HTTP status",
        ),
        (
            {"defaults": {"retries": 1}, "routes": {}},
            "defaults.retries: unknown field",
        ),
        # The nearest valid name, by spelling or by another library's word for it.
        (
            {"defaults": {"retry": {"atempts": 3}}},
            "defaults.retry: unknown field; did you mean 'retry_policy'?",
        ),
        (
            {"defaults": {"retry_policy": {"atempts": 3}}},
            "defaults.retry_policy.atempts: unknown field; did you mean 'num_retries'?",
        ),
        (
            {"routes": {"users": {"retry_policy": {"max_retries": 3}}}},
            "routes.users.retry_policy.max_retries: unknown field; did you mean 'num_retries'?",
        ),
        (
            {"defaults": {"retry_policy": {"retry_back_off": {"base_intervall": 1}}}},
            "defaults.retry_policy.retry_back_off.base_intervall: unknown field; did you mean "
            "'base_interval'?",
        ),
        (
            {"defaults": {"hedge": {"dleay": 1}}},
            "defaults.hedge.dleay: unknown field; did you mean 'delay'?",
        ),
        ({"defualts": {}}, "defualts: unknown field; did you mean 'defaults'?"),
        (
            {"defaults": {"zzz": 1}},
            "defaults.zzz: unknown field (expected one of: timeout, retry_policy, hedge, enabled)",
        ),
    ],
)
def test_errors_name_the_field_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.path == message.split(":")[0]
    assert isinstance(info.value, ValueError)


def test_an_unknown_key_is_shown_escaped() -> None:
    # A key comes from a file: shown, never sent to the terminal as it is.
    with pytest.raises(ConfigError) as info:
        parse_config({"defaults": {"tim\x1b[2Jeout": 1}})
    assert "\x1b" not in str(info.value) and "\\x1b" in str(info.value)
    assert "did you mean 'timeout'?" in str(info.value)


def test_status_conditions_and_application_errors() -> None:
    class DatabaseUnavailable(Exception):
        pass

    routes = parse_config(
        {
            "routes": {
                "orders": {
                    "retry_policy": {
                        "retry_on": ["gateway-error", "retriable-status-codes", "db-unavailable"],
                        "retriable_status_codes": [429],
                    }
                }
            }
        },
        errors={"db-unavailable": DatabaseUnavailable},
    )
    orders = routes["orders"]
    assert orders.retry_statuses == frozenset({429, 502, 503, 504})
    flaky = Failing(DatabaseUnavailable(), failures=1)
    policy = orders.build(clock=VirtualClock())
    assert policy.call(flaky) == "ok"
    with pytest.raises(TypeError, match="errors"):
        parse_config({}, errors={"x": "not a class"})  # type: ignore[dict-item]


def test_bad_files_raise_config_errors(tmp_path: Path) -> None:
    cases = {
        "broken.toml": "[routes\n",
        "broken.yaml": "routes: [unclosed\n",
        "broken.json": "{",
        "list.yaml": "- 1\n",
        "policies.ini": "[routes]\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError, match=name):
            load_config(path)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_config(empty) == {}


def test_registry_handles_follow_reloads(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text('[routes.users.retry_policy]\nnum_retries = 1\nback_off = { base = "1s" }\n')
    clock = VirtualClock()
    registry = PolicyRegistry(path, clock=clock)
    users = registry.policy("users")

    @users
    def fetch(flaky: Failing) -> str:
        return flaky()

    @users
    async def afetch(flaky: Failing) -> str:
        return await flaky.acall()

    first = Failing()
    with pytest.raises(ConnectionError):
        fetch(first)
    assert first.calls == 2
    assert registry.reload() is False  # unchanged file: nothing to do

    path.write_text('[routes.users.retry_policy]\nnum_retries = 4\nback_off = { base = "1s" }\n')
    assert registry.reload() is True
    second = Failing()
    with pytest.raises(ConnectionError):
        fetch(second)
    assert second.calls == 5
    third = Failing()
    with pytest.raises(ConnectionError):
        run(afetch(third), clock)
    assert third.calls == 5
    assert users.call(Failing(failures=3)) == "ok"
    assert registry["users"] is users.policy
    assert users.run(Failing(failures=1)).attempts == 2


def test_invalid_reload_keeps_the_live_policies(tmp_path: Path) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text("routes: {users: {retry_policy: {num_retries: 2}}}\n")
    registry = PolicyRegistry(path)
    users = registry.policy("users")
    before = users.policy
    path.write_text("routes: {users: {retry_policy: {num_retries: -3}}}\n")
    with pytest.raises(ConfigError, match=r"routes\.users\.retry_policy\.num_retries"):
        registry.reload()
    assert users.policy is before
    # A route the application holds cannot disappear; one nobody asked for can.
    path.write_text("routes: {search: {}}\n")
    with pytest.raises(ConfigError, match=r"routes\.users: missing"):
        registry.reload()
    assert list(registry) == ["users"]
    path.write_text("routes: {users: {}, search: {enabled: false}}\n")
    registry.reload()
    assert seawall.is_enabled("search") is False
    path.write_text("routes: {users: {}}\n")
    registry.reload()
    assert list(registry) == ["users"]
    assert seawall.is_enabled("search") is True


def test_kill_switch_per_name_from_the_file_and_at_runtime() -> None:
    clock = VirtualClock()
    registry = PolicyRegistry({"routes": {"users": {"enabled": False}, "search": {}}}, clock=clock)
    users = registry.policy("users")
    once = Failing()
    with pytest.raises(ConnectionError):
        users.call(once)
    assert once.calls == 1
    assert seawall.is_enabled("users") is False
    assert registry.describe()["users"]["enabled"] is False
    registry.set_enabled(True, name="users")
    again = Failing()
    with pytest.raises(ConnectionError):
        users.call(again)
    assert again.calls == 3
    registry.set_enabled(False, name="search")
    assert seawall.is_enabled("search") is False
    with pytest.raises(KeyError, match="known: search, users"):
        registry.set_enabled(False, name="nope")


def test_budgets_survive_reloads_that_do_not_change_them() -> None:
    registry = PolicyRegistry(
        {"routes": {"users": {"retry_policy": {"budget": {"percent_can_retry": 10}}}}}
    )
    kept = registry["users"].budget
    registry.load(
        {"routes": {"users": {"timeout": 3, "retry_policy": {"budget": {"percent_can_retry": 10}}}}}
    )
    assert registry["users"].budget is kept
    assert registry["users"].timeout == 3
    registry.load({"routes": {"users": {"retry_policy": {"budget": {"percent_can_retry": 50}}}}})
    assert registry["users"].budget is not kept
    registry.load({"routes": {"users": {}}})
    assert registry["users"].budget is None


def test_one_place_to_see_and_change_every_policy() -> None:
    counters = Counters()
    registry = PolicyRegistry(USERS, hooks=[MetricsHook(counters)], clock=VirtualClock())
    orders = registry.register("orders", seawall.RetryPolicy(max_attempts=2))
    assert orders.policy.name == "orders"
    assert "orders" in registry
    assert len(registry) == 2
    view = registry.describe()
    assert view["users"]["source"] == "config"
    assert view["users"]["max_attempts"] == 4
    assert view["users"]["budget"] == {
        "percent_can_retry": 20,
        "min_retries_per_sec": 3,
        "ttl": 10.0,
    }
    assert view["users"]["hedge"] == {"delay": 0.05, "max_attempts": 2}
    assert view["orders"] == {
        "source": "code",
        "enabled": True,
        "max_attempts": 2,
        "timeout": None,
        "per_try_timeout": None,
        "back_off": {"base": 0.1, "max": 20.0, "jitter": "full"},
        "budget": None,
    }
    registry.replace("orders", max_attempts=5)
    assert registry.describe()["orders"]["max_attempts"] == 5
    assert orders.policy.max_attempts == 5
    assert registry.policy("users").hedge_config == seawall.config.HedgeConfig(0.05, 2)
    # Policies built from the configuration carry the registry's hooks: metrics for every route.
    registry.policy("users").call(lambda: "ok")
    assert counters.get("attempts", "users", "success") == 1
    with pytest.raises(KeyError, match="no policy named 'nope'"):
        registry.policy("nope")
    with pytest.raises(TypeError, match="policy"):
        registry.register("x", object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="file"):
        registry.reload()
