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
policy, so :meth:`PolicyRegistry.reload` changes behaviour without a resta

One job per module: ``schema`` (what a file describes), ``conditions`` (Envoy's ``retry_on``
conditions as predicates), ``parse`` (reading and checking a file), ``registry`` (the live
policies and their handles).
"""

from __future__ import annotations

from seawall._policy.config.parse import _decode, _read, load_config, parse_config
from seawall._policy.config.registry import HedgeHandle, PolicyHandle, PolicyRegistry
from seawall._policy.config.schema import BudgetConfig, ConfigError, HedgeConfig, RouteConfig

__all__ = [
    "BudgetConfig",
    "ConfigError",
    "HedgeConfig",
    "HedgeHandle",
    "PolicyHandle",
    "PolicyRegistry",
    "RouteConfig",
    "_decode",
    "_read",
    "load_config",
    "parse_config",
]
