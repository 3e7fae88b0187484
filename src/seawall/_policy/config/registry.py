"""The live policies: :class:`PolicyRegistry` and the handles that call through it."""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from seawall._core.clock import Clock
from seawall._core.decorate import decorate
from seawall._core.public import public
from seawall._core.switch import is_enabled, set_enabled
from seawall._policy.config.parse import _decode, _join, _read, parse_config
from seawall._policy.config.schema import (
    BudgetConfig,
    ConfigError,
    HedgeConfig,
    RouteConfig,
    _describe_back_off,
)
from seawall._strategies.budget import RetryBudget
from seawall._strategies.hedge import Hedge, HedgeHook
from seawall._strategies.retry import Attempts, Hook, Outcome, RetryPolicy

if TYPE_CHECKING:
    pass


__all__ = ["HedgeHandle", "PolicyHandle", "PolicyRegistry"]

P = ParamSpec("P")
T = TypeVar("T")


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
