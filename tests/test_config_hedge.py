"""Hedging from the policy file: validation with field paths, live Hedge objects, reloads."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

import seawall
from backends import Run
from seawall import VirtualClock
from seawall.config import ConfigError, HedgeConfig, PolicyRegistry
from seawall.instrumentation import Counters, MetricsHook


class Stalls:
    """A dependency on virtual time: the first attempt of each call stalls, the second is fast."""

    def __init__(self) -> None:
        self.started = 0

    async def __call__(self) -> int:
        self.started += 1
        n = self.started
        await anyio.sleep(1.0 if n % 2 else 0.01)
        return n


def test_percentile_and_extra_load_are_parsed() -> None:
    routes = seawall.config.parse_config(
        {
            "routes": {
                "users": {
                    "hedge": {"delay": "5ms", "percentile": 95, "max_extra_percent": 10},
                }
            }
        }
    )
    assert routes["users"].hedge == HedgeConfig(0.005, 2, 95.0, 10.0)
    assert routes["users"].describe()["hedge"] == {
        "delay": 0.005,
        "max_attempts": 2,
        "percentile": 95.0,
        "max_extra_percent": 10.0,
    }


@pytest.mark.parametrize(
    ("hedge", "message"),
    [
        ({"delay": 0.1, "percentile": 100}, "routes.users.hedge.percentile: must be < 100"),
        ({"delay": 0.1, "percentile": 0}, "routes.users.hedge.percentile: must be > 0"),
        ({"delay": 0.1, "percentile": "p95"}, "routes.users.hedge.percentile: must be a number"),
        (
            {"delay": 0.1, "max_extra_percent": 150},
            "routes.users.hedge.max_extra_percent: must be <= 100 x (max_attempts - 1) = 100",
        ),
        ({"delay": 0.1, "max_extra_percent": -1}, "routes.users.hedge.max_extra_percent"),
        ({"delay": 0.1, "quantile": 0.9}, "routes.users.hedge.quantile: unknown field"),
    ],
)
def test_invalid_hedge_settings_name_the_field(hedge: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        seawall.config.parse_config({"routes": {"users": {"hedge": hedge}}})


def test_config_builds_the_hedge_it_describes() -> None:
    fixed = HedgeConfig(0.05, 3, None, 10.0).build(name="users")
    assert (fixed.delay, fixed.max_attempts, fixed.max_extra_load) == (0.05, 3, 0.1)
    adaptive = HedgeConfig(0.005, 2, 99.0).build(name="users")
    assert adaptive.quantile == 0.99 and adaptive.min_delay == 0.005
    assert isinstance(adaptive.delay, float)  # inf until the tracker has samples


def test_registry_hedge_follows_reloads(tmp_path: Path, run: Run) -> None:
    path = tmp_path / "policies.toml"
    path.write_text('[routes.users]\nhedge = { delay = "50ms" }\n')
    clock = VirtualClock()
    counters = Counters()
    registry = PolicyRegistry(path, clock=clock, hooks=[MetricsHook(counters)])
    hedged = registry.hedge("users")
    first = hedged.policy
    assert first is not None and first.name == "users" and first.delay == 0.05
    server = Stalls()

    async def main() -> None:
        start = clock.now()
        assert await hedged.acall(server) == 2  # the hedge at 50 ms answered 10 ms later
        assert clock.now() - start == pytest.approx(0.06)

    run(main(), clock)
    assert counters.get("hedges", "users") == 1
    assert counters.get("hedge_wins", "users") == 1

    # An unrelated change keeps the live hedge (its counters, tracker and tokens).
    path.write_text('[routes.users]\nhedge = { delay = "50ms" }\nretry_policy.num_retries = 4\n')
    assert registry.reload()
    assert hedged.policy is first

    # A new delay builds a new hedge, which the handle uses at once.
    path.write_text('[routes.users]\nhedge = { delay = "200ms", max_attempts = 3 }\n')
    assert registry.reload()
    assert hedged.policy is not first
    assert hedged.policy is not None and hedged.policy.delay == 0.2

    # Without hedge settings, calls go through once.
    path.write_text("[routes.users]\n")
    assert registry.reload()
    assert hedged.policy is None
    server = Stalls()
    run(hedged.acall(server), clock)
    assert server.started == 1


def test_invalid_reload_keeps_the_live_hedge(tmp_path: Path) -> None:
    path = tmp_path / "policies.toml"
    path.write_text('[routes.users]\nhedge = { delay = "50ms" }\n')
    registry = PolicyRegistry(path)
    hedged = registry.hedge("users")
    live = hedged.policy
    path.write_text('[routes.users]\nhedge = { delay = "50ms", max_attempts = 0 }\n')
    with pytest.raises(ConfigError, match=r"routes\.users\.hedge\.max_attempts: must be >= 1"):
        registry.reload()
    assert hedged.policy is live


def test_hedge_shares_the_route_budget_without_counting_requests_twice() -> None:
    registry = PolicyRegistry(
        {
            "routes": {
                "users": {
                    "hedge": {"delay": "50ms"},
                    "retry_policy": {"budget": {"percent_can_retry": 20}},
                }
            }
        }
    )
    users = registry.policy("users")
    hedge = registry.hedge("users").policy
    assert hedge is not None and hedge.budget is users.policy.budget
    assert hedge.reports_to_budget is False


def test_adaptive_hedge_from_the_file_learns_the_latency(run: Run) -> None:
    clock = VirtualClock()
    registry = PolicyRegistry(
        {"routes": {"users": {"hedge": {"delay": "1ms", "percentile": 50}}}}, clock=clock
    )
    hedged = registry.hedge("users")

    @hedged
    async def fetch() -> str:
        await anyio.sleep(0.02)
        return "ok"

    async def main() -> None:
        for _ in range(25):
            assert await fetch() == "ok"

    run(main(), clock)
    policy = hedged.policy
    assert policy is not None
    assert policy.delay == pytest.approx(0.02, rel=0.03)


def test_unknown_route_and_sync_functions_are_refused() -> None:
    registry = PolicyRegistry({"routes": {"users": {}}})
    with pytest.raises(KeyError, match="users"):
        registry.hedge("nope")
    with pytest.raises(TypeError, match="async def"):
        registry.hedge("users")(lambda: None)  # type: ignore[arg-type,return-value]
