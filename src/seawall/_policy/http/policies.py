"""What a transport retries with now (:class:`Policies`): the policy (fixed, or followed
through a handle), the derived policy of each host, the options, and the first-attempt records."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, MutableMapping
from typing import Any, Final, Protocol, TypedDict, runtime_checkable

from seawall._core.public import public
from seawall._policy.http.call import HostPolicy, HttpCall, stateless_first
from seawall._policy.http.first import FirstAttemptPath
from seawall._policy.http.hosts import (
    MAX_HOSTS,
    PER_HOST,
    HostKey,
    PerHost,
    budget_for_host,
    check_budget,
    origin,
)
from seawall._policy.http.overrides import OVERRIDE, OVERRIDES, policy_changes
from seawall._policy.http.rules import (
    DEFAULT_RETRY_STATUSES,
    IDEMPOTENCY_KEY_HEADER,
    MIN_ATTEMPT_TIME,
    HttpRules,
    exception_classes,
    new_idempotency_key,
)
from seawall._policy.http.wire import RetryOnErrors, RouteRules, Wire, route_errors
from seawall._strategies.budget import Budget
from seawall._strategies.deadline import SCOPES
from seawall._strategies.deadline import current_deadline as _ambient_deadline
from seawall._strategies.retry import RetryPolicy


@public("seawall.http")
@runtime_checkable
class LivePolicy(Protocol):
    """A policy that can change at runtime (:class:`seawall.config.PolicyHandle`): the HTTP
    layer reads ``policy`` and ``route`` on each request and rebuilds when either changed.

    Declared here so that this layer does not import the configuration layer above it.
    """

    @property
    def policy(self) -> RetryPolicy: ...

    @property
    def route(self) -> RouteRules | None: ...


def derive_policy(policy: RetryPolicy, budget: Budget | None) -> RetryPolicy:
    """The policy the transport drives: the caller's, classifying through the HTTP rules."""
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
    # retry_on=(): every decision comes from HttpCall through on_error(retry=True|False); an error
    # it leaves to the policy (retry=None) is one the HTTP rules do not retry. retry_if_result is
    # applied by HttpCall to the response (see PolicyCache.predicate), not by the state.
    return policy.replace(
        retry_on=(),
        retry_if_result=None,
        budget=budget,
        min_attempt_time=max(policy.min_attempt_time, MIN_ATTEMPT_TIME),
    )


class PolicyCache:
    """The derived policy for each host (the budget differs per host), bounded in size.

    Hosts are looked up by the key the integration gives (its own spelling of scheme and
    authority); :func:`origin` normalises a key only the first time it is seen.
    """

    __slots__ = ("_budget", "_by_host", "_lock", "_policy", "_single", "predicate")

    def __init__(self, policy: RetryPolicy, budget: object) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
        budget = check_budget(budget)
        self._policy = policy
        self._budget = budget
        self._lock = threading.Lock()
        self._by_host: dict[HostKey, HostPolicy] = {}
        self._single: HostPolicy | None = None
        #: The policy's ``retry_if_result``, applied to responses (``None``: none).
        self.predicate = policy.retry_if_result
        if budget is PER_HOST and policy.budget is not None:
            budget = policy.budget  # the policy brought its own budget: use it everywhere
        if budget is not PER_HOST:
            self._single = HostPolicy(derive_policy(policy, budget))  # type: ignore[arg-type]
        else:
            derive_policy(policy, None)  # validate now, not on the first request

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    def for_host(self, host: HostKey) -> HostPolicy:
        if self._single is not None:
            return self._single
        found = self._by_host.get(host)
        if found is None:
            with self._lock:
                if len(self._by_host) >= MAX_HOSTS:
                    self._by_host.clear()
                key = origin(host)
                derived = derive_policy(self._policy, budget_for_host(key))
                if derived.name is None:
                    # Logs and notes say which host's budget refused a retry, or gave up.
                    derived = derived.replace(name=key)
                found = self._by_host[host] = HostPolicy(derived)
        return found


@public("seawall.http")
class HttpOptions(TypedDict, total=False):
    """The keyword arguments every seawall HTTP integration takes (all optional).

    Attributes:
        budget: ``PER_HOST`` (default): one :class:`~seawall.RetryBudget` per host, shared by
            every seawall HTTP client in the process, unless the policy has its own budget; a
            :class:`~seawall.Budget` for every host; or ``None`` for no budget.
        retry_statuses: statuses worth retrying (by default 408, 429, 502, 503, 504, or those
            a :class:`~seawall.config.PolicyHandle`'s route names in its ``retry_on``).
        retry_on: the client library's exception classes worth retrying (its
            ``DEFAULT_RETRY_EXCEPTIONS`` by default; with a
            :class:`~seawall.config.PolicyHandle` whose route names error conditions in its
            ``retry_on``, such as ``connect-failure`` or ``reset``, those conditions).
        idempotent_methods: methods retried without an ``Idempotency-Key``.
        idempotency_key: add an ``Idempotency-Key`` to non-idempotent requests (generated once
            per request, the same on every attempt) so that they can be retried.
        deadline_headers: send the time left downstream (``grpc-timeout``,
            ``x-request-deadline``).
        buffer_limit: read bodies declared (``Content-Length``) up to this many bytes within
            the attempt, so that a reset mid-body is retried (0: never).
        total_timeout: seconds for the whole request, attempts and waits included, when
            neither the policy's ``timeout`` nor an ambient :func:`seawall.deadline` sets one
            (30 s by default; ``None``: no limit). It bounds each attempt but is not sent
            downstream.
    """

    budget: Budget | PerHost | None
    retry_statuses: Collection[int] | None
    retry_on: tuple[type[Exception], ...]
    idempotent_methods: Collection[str]
    idempotency_key: bool
    deadline_headers: bool
    buffer_limit: int
    total_timeout: float | None


#: The names of :class:`HttpOptions`.
OPTION_NAMES: Final = frozenset(HttpOptions.__annotations__)


class Policies:
    """What a transport retries with now: a fixed policy, or the current one of a PolicyHandle.

    With a :class:`~seawall.config.PolicyHandle`, a reload of its registry changes the live
    transport: the next request uses the new policy (attempts, backoff, timeouts, budget) and,
    unless *retry_statuses* were given, the route's statuses.

    Args:
        policy: a :class:`~seawall.RetryPolicy`, a :class:`~seawall.config.PolicyHandle` or
            ``None`` (``RetryPolicy()``).
        options: the integration's :class:`HttpOptions`.
        wire: how the integration's responses and errors are read.
        retry_on: the integration's default ``retry_on``.
    """

    __slots__ = (
        "_budget",
        "_explicit",
        "_handle",
        "_overrides",
        "_retry_on",
        "_rules",
        "_state",
        "_statuses",
        "ready",
        "wire",
    )

    def __init__(
        self,
        policy: object,
        options: Mapping[str, Any],
        wire: Wire[Any],
        retry_on: tuple[type[Exception], ...],
    ) -> None:
        for name in options:
            if name not in OPTION_NAMES:
                raise TypeError(f"unexpected keyword argument {name!r}")
        rules = dict(options)
        if policy is None:
            policy = RetryPolicy()
        if isinstance(policy, RetryPolicy):
            self._handle: LivePolicy | None = None
        elif isinstance(policy, LivePolicy):
            self._handle = policy
        else:
            raise TypeError(
                "policy must be a seawall.RetryPolicy or a seawall.config.PolicyHandle, "
                f"got {policy!r}"
            )
        self._budget = check_budget(rules.pop("budget", PER_HOST))
        self._statuses = rules.pop("retry_statuses", None)
        # Given retry_on wins over a route's conditions; the integration's default does not.
        self._explicit = "retry_on" in rules
        self._retry_on = exception_classes(rules.pop("retry_on", retry_on))
        self.wire = wire
        self._rules = rules
        self._overrides: dict[object, PolicyCache] = {}
        handle = self._handle
        if handle is None:
            assert isinstance(policy, RetryPolicy)
            self._state = self._build(policy, None)
        else:
            self._state = self._build(handle.policy, handle.route)
        #: The first-attempt records by host (see :meth:`first`) when no handle is followed (a
        #: reload would replace them), else ``None``.
        self.ready = self._state.firsts if handle is None else None

    def _build(self, policy: RetryPolicy, route: RouteRules | None) -> _Live:
        statuses = self._statuses
        if statuses is None:
            statuses = (
                DEFAULT_RETRY_STATUSES if route is None else route.http_rules().retry_statuses
            )
        rules = HttpRules(retry_statuses=statuses, **self._rules)
        retry_on: RetryOnErrors = self._retry_on
        if not self._explicit:
            retry_on = route_errors(route) or retry_on
        cache = PolicyCache(policy, self._budget)
        # The derived policies of every host differ in their budget only: one tells for all.
        derived = cache._single or HostPolicy(derive_policy(policy, None))
        stateless = cache.predicate is None and stateless_first(derived, rules)
        return _Live(policy, route, cache, rules, retry_on, {} if stateless else None)

    def current(self) -> tuple[PolicyCache, HttpRules]:
        """The derived policies and the rules for a request starting now."""
        state = self._state
        handle = self._handle
        if handle is not None and (
            handle.policy is not state.policy or handle.route is not state.route
        ):
            # The registry reloaded: rebuild once (two threads may both rebuild; the results are
            # equal and either one is kept).
            state = self._state = self._build(handle.policy, handle.route)
            self._overrides = {}
        return state.cache, state.rules

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now."""
        return self._handle.policy if self._handle is not None else self._state.policy

    @property
    def handle(self) -> LivePolicy | None:
        """The handle followed, if any."""
        return self._handle

    @property
    def retry_on(self) -> RetryOnErrors:
        """What decides which transport errors are retried now."""
        self.current()
        return self._state.retry_on

    @property
    def budget(self) -> Budget | PerHost | None:
        """The ``budget`` option."""
        return self._budget

    @property
    def rules(self) -> HttpRules:
        return self.current()[1]

    def _overridden(self, cache: PolicyCache, value: object) -> PolicyCache:
        """The policies for a request whose policy is overridden by *value* (cached: the same
        override on every request derives its policies once)."""
        key: object
        if isinstance(value, RetryPolicy):
            key = value
        elif isinstance(value, Mapping):
            value = policy_changes(value)
            key = (cache, tuple(sorted(value.items())))
        else:
            raise TypeError(
                "the seawall override must be a seawall.RetryPolicy or a dict of its fields, "
                f"got {value!r}"
            )
        try:
            found = self._overrides.get(key)
        except TypeError:  # an unhashable value: derived for this request only
            key, found = None, None
        if found is None:
            policy = value if isinstance(value, RetryPolicy) else cache.policy.replace(**value)
            found = PolicyCache(policy, self._budget)
            if key is not None:
                if len(self._overrides) >= 64:
                    self._overrides = {}  # bounded: overrides built per request stay few
                self._overrides[key] = found
        return found

    def start(
        self,
        method: str,
        headers: MutableMapping[str, str],
        host: HostKey,
        *,
        replayable: bool,
        override: object = None,
    ) -> HttpCall[Any]:
        """The decisions for one request starting now (to *host*, ``scheme://netloc``).

        With ``idempotency_key``, a request whose method is not idempotent gets an
        ``Idempotency-Key`` in *headers* (the caller's request: every attempt sends it).

        Args:
            method: the request method.
            headers: the request's headers.
            host: ``scheme://netloc`` or ``(scheme, host, port)`` (the per-host budget's key,
                see :func:`origin`).
            replayable: the body can be sent again.
            override: the request's own override (a policy or a dict of changes), if any;
                else that of an enclosing :func:`override` block applies.
        """
        live = self._state
        if self._handle is not None:
            self.current()
            live = self._state
        cache, rules = live.cache, live.rules
        if override is None:
            override = OVERRIDE.get(None)
        if override is not None:
            cache = self._overridden(cache, override)
        method, has_key = _keyed(rules, method, headers)
        return HttpCall(
            cache._single or cache._by_host.get(host) or cache.for_host(host),
            rules,
            method,
            has_key,
            replayable,
            self.wire,
            live.retry_on,
            cache.predicate,
        )

    def first(self, method: str, host: HostKey, override: object = None) -> FirstAttemptPath | None:
        """What a request starting now needs for a first attempt made without an
        :class:`HttpCall` (:func:`~seawall._policy.http.first.first_attempt`), or ``None``: it
        takes :meth:`start`'s path.

        The path then reads the clock (``now``), calls ``before`` (the budget's deposit, if
        any), sends the request as the caller built it, and returns a response whose status
        has a history in ``answers`` after calling ``after`` (if any), with that history
        (``first_try(status)``): all that :meth:`start`, :func:`drive` and :class:`HttpCall`
        do for such an answer. Any other outcome (an error, another status), or a request that
        cannot go as it is, goes on through :meth:`resume` (nothing is done twice).

        ``None`` unless the policy's first attempt needs no :class:`RetryState` (see
        :func:`stateless_first`) and the policy has no ``retry_if_result``; no override
        applies (the request's *override*, an :func:`override` block); no ambient deadline
        is set; and no ``Idempotency-Key`` is due.

        The path skips the call when it would only look the record up: while :attr:`ready` is
        a dict, no override block nor ambient deadline has been used in the process
        (``OVERRIDES.used``, ``SCOPES.used``), the request has no *override*, and ``ready``
        holds a record for *host* whose ``keyed`` is ``None``, that record is what this
        returns.
        """
        if self._handle is not None:
            self.current()
        live = self._state
        firsts = live.firsts
        if (
            firsts is None
            or override is not None
            or (OVERRIDES.used and OVERRIDE.get(None) is not None)
            or (SCOPES.used and _ambient_deadline() is not None)
        ):
            return None
        found = firsts.get(host)
        if found is None:
            found = self._first_for(live, firsts, host)
        keyed = found.keyed
        if keyed is not None and method not in keyed:
            return None  # an Idempotency-Key is due (see start())
        return found

    def _first_for(
        self, live: _Live, firsts: dict[HostKey, FirstAttemptPath], host: HostKey
    ) -> FirstAttemptPath:
        """The first-attempt record of *host* under *live*, built and kept."""
        cache = live.cache
        host_policy = cache._single or cache.for_host(host)
        found = FirstAttemptPath(host_policy, live.rules, live.retry_on, self.wire)
        if len(firsts) >= MAX_HOSTS:
            firsts.clear()  # bounded, as the per-host policies are
        firsts[host] = found
        return found

    def resume(
        self,
        path: FirstAttemptPath,
        method: str,
        headers: MutableMapping[str, str],
        *,
        replayable: bool,
        started: float,
    ) -> HttpCall[Any]:
        """The decisions for a request whose first attempt :meth:`first` allowed (*path*), and
        which started at *started* (``path.now()``, the budget's deposit made): the
        :class:`HttpCall` that :meth:`start` would have built then. Drive it with the first
        attempt's outcome in hand or, when nothing was sent yet, from the start."""
        rules = path.rules
        method, has_key = _keyed(rules, method, headers)
        return HttpCall(
            path.host,
            rules,
            method,
            has_key,
            replayable,
            self.wire,
            path.retry_on,
            None,
            first=started,
        )


def _keyed(rules: HttpRules, method: str, headers: MutableMapping[str, str]) -> tuple[str, bool]:
    """The method in upper case, and whether the request carries an ``Idempotency-Key`` (added
    to *headers* when the rules want one and the method is not idempotent)."""
    if method in rules.idempotent_methods:
        return method, False  # an idempotent method needs no key to be safe
    method = method.upper()
    if (
        rules.idempotency_key
        and method not in rules.idempotent_methods
        and IDEMPOTENCY_KEY_HEADER not in headers
    ):
        headers[IDEMPOTENCY_KEY_HEADER] = new_idempotency_key()
    return method, IDEMPOTENCY_KEY_HEADER in headers


class _Live:
    """What a transport retries with now (see Policies): slotted, as it is read on every
    request."""

    __slots__ = ("cache", "firsts", "policy", "retry_on", "route", "rules")

    def __init__(
        self,
        policy: RetryPolicy,
        route: RouteRules | None,
        cache: PolicyCache,
        rules: HttpRules,
        retry_on: RetryOnErrors,
        firsts: dict[HostKey, FirstAttemptPath] | None,
    ) -> None:
        self.policy = policy
        self.route = route
        self.cache = cache
        self.rules = rules
        self.retry_on = retry_on
        #: The first-attempt records by host (see Policies.first), or None: no such path.
        self.firsts = firsts
