"""Budgets and breakers shared by a fleet of processes, on Redis (extra ``seawall[redis]``).

A :class:`Fleet` is one Redis connection and one sync thread per process. The shared objects
keep the semantics of the local ones, for the whole fleet::

    import seawall
    from seawall import redis as fleet_redis

    fleet = fleet_redis.Fleet("redis://localhost:6379/0", namespace="shop")
    budget = fleet_redis.SharedRetryBudget(fleet, "payments")      # one budget, every process
    breaker = fleet_redis.SharedCircuitBreaker(fleet, "payments", minimum_calls=20)
    policy = seawall.RetryPolicy(budget=budget)

Healthy calls never wait for Redis (they bump local counters, sent in batches every
``interval``); a retry decision costs at most one round trip (tokens are leased); when Redis is
down or slow every object decides with its local twin until Redis answers again. See
``docs/fleet.md`` for the model, its bounds and its failure modes.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterable

from seawall._core.redact import redact_repr
from seawall._policy.http import budget_for_host, origin
from seawall._strategies.budget import RetryBudget
from seawall.redis._breaker import SharedCircuitBreaker
from seawall.redis._budgets import (
    SharedAdaptiveThrottle,
    SharedRetryBudget,
    SharedRetryQuota,
    SharedTokenBucket,
)
from seawall.redis._fleet import Fleet, FleetEvent, FleetStats

__all__ = [
    "Fleet",
    "FleetEvent",
    "FleetStats",
    "SharedAdaptiveThrottle",
    "SharedCircuitBreaker",
    "SharedRetryBudget",
    "SharedRetryQuota",
    "SharedTokenBucket",
    "host_budgets",
    "share_hosts",
]


def host_budgets(
    fleet: Fleet, ratio: float = 0.1, min_per_second: float = 10.0, window: float = 10.0
) -> Callable[[str], SharedRetryBudget]:
    """A factory of per-host budgets shared by the fleet: ``factory(host)`` is the fleet's
    :class:`SharedRetryBudget` for that URL's origin (``"scheme://host[:port]"``; a path, query
    or fragment is dropped).

    Args:
        fleet: the :class:`Fleet`.
        ratio: as :class:`~seawall.RetryBudget`, per host, for the fleet.
        min_per_second: as :class:`~seawall.RetryBudget`, per host, for the fleet.
        window: as :class:`~seawall.RetryBudget`, per host, for the fleet.
    """
    if not isinstance(fleet, Fleet):
        raise TypeError(f"fleet must be a seawall.redis.Fleet, got {fleet!r}")
    RetryBudget(ratio, min_per_second, window)  # check the parameters now

    def factory(host: str) -> SharedRetryBudget:
        return SharedRetryBudget(fleet, f"host:{_origin(host)}", ratio, min_per_second, window)

    return factory


def share_hosts(
    fleet: Fleet,
    hosts: Iterable[str],
    ratio: float = 0.1,
    min_per_second: float = 10.0,
    window: float = 10.0,
) -> list[SharedRetryBudget]:
    """Make the per-host budgets (``budget=PER_HOST``, the default of the HTTP transports) of
    *hosts* the fleet's: each host's process-wide budget becomes a :class:`SharedRetryBudget`.

    Call it at start-up, before the first request to those hosts. Hosts not listed keep local
    per-host budgets. Each URL stands for its origin, in the spelling the transports use:
    ``"https://api.example.com/"``, ``"HTTPS://api.example.com:443/v1"`` and
    ``"https://api.example.com"`` are one host.

    Returns:
        The shared budgets, in the order of *hosts* (calling it again returns the same ones).

    Raises:
        TypeError: *hosts* is one string, or holds something else than strings.
        ValueError: a URL without a scheme and a host, or a host that already has a local
            budget in this process (a request was sent to it before).
    """
    factory = host_budgets(fleet, ratio, min_per_second, window)
    if isinstance(hosts, str):
        raise TypeError(f"hosts must be an iterable of URLs, not one str, got {redact_repr(hosts)}")
    shared = []
    for host in hosts:
        key = _origin(host)
        budget = budget_for_host(key, factory=lambda key=key: factory(key))  # type: ignore[misc]
        if isinstance(budget, SharedRetryBudget):
            shared.append(budget)
        else:
            raise ValueError(f"host {redact_repr(host)} already has a local budget in this process")
    return shared


def _origin(url: str) -> str:
    """The origin of *url*, spelled as the per-host budgets' keys (``"scheme://host[:port]"``)."""
    if not isinstance(url, str):
        raise TypeError(f"hosts must hold URLs (str), got {redact_repr(url)}")
    parts = urllib.parse.urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"hosts must hold URLs with a scheme and a host, got {redact_repr(url)}")
    return origin(f"{parts.scheme}://{parts.netloc}")
