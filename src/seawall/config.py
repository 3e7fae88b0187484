"""Policies from files: Envoy-shaped route policies, validated, reloadable, shared by name.

``load_config(path)`` reads a TOML, JSON or YAML file into :class:`RouteConfig` objects;
:class:`PolicyRegistry` holds the live policies, and its :class:`PolicyHandle` and
:class:`HedgeHandle` objects always call through the current version, so a reload changes
running code without a restart. See ``docs/config.md``.
"""

from seawall._core.public import show_public_module
from seawall._policy.config import (
    BudgetConfig,
    ConfigError,
    HedgeConfig,
    HedgeHandle,
    PolicyHandle,
    PolicyRegistry,
    RouteConfig,
    load_config,
    parse_config,
)

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

show_public_module(__name__, globals())
