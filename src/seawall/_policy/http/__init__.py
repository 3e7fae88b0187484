"""HTTP retry rules shared by the httpx, requests and aiohttp integrations, free of any HTTP
library.

What is safe to retry (methods, statuses, overload signals), Retry-After parsing, idempotency
keys, per-host budgets, and :class:`HttpCall`: the decisions for one logical HTTP request, driven
by a :class:`~seawall.RetryPolicy`'s sans-I/O :class:`~seawall.lowlevel.RetryState`. The
integrations only move bytes; every retry, wait and give-up is the policy's decision.

One job a module, each importing only those below it (``pyproject.toml`` checks the order):

- :mod:`.policies`: what a transport retries with now (:class:`Policies`), its options;
- :mod:`.first`: the first-attempt path every integration takes (:func:`first_attempt`);
- :mod:`.drive`: the retry loops (:func:`drive`, :func:`adrive`);
- :mod:`.call`: the decisions for one request (:class:`HttpCall`);
- :mod:`.wire`: how a client library's responses and errors are read (:class:`Wire`);
- :mod:`.overrides`: :func:`override` blocks;
- :mod:`.hosts`: the key of a host and its budget;
- :mod:`.rules`: statuses, methods, headers, :class:`HttpRules`, histories.
"""

from seawall._policy.http.call import HttpCall, settle, stateless_first
from seawall._policy.http.drive import adrive, drive, within
from seawall._policy.http.first import (
    AsyncExchange,
    Exchange,
    FirstAttemptPath,
    afirst_attempt,
    first_attempt,
)
from seawall._policy.http.hosts import (
    _HOST_BUDGETS,
    _HOST_BUDGETS_LOCK,
    HOST_KEY_SAMPLES,
    MAX_HOSTS,
    PER_HOST,
    HostKey,
    PerHost,
    budget_for_host,
    check_budget,
    origin,
)
from seawall._policy.http.overrides import OVERRIDE, OVERRIDES, current_override, override
from seawall._policy.http.policies import (
    OPTION_NAMES,
    HttpOptions,
    LivePolicy,
    Policies,
    PolicyCache,
    derive_policy,
)
from seawall._policy.http.rules import (
    DEFAULT_RETRY_STATUSES,
    DEFAULT_TOTAL_TIMEOUT,
    EXTENSION_KEY,
    FIRST_TRY,
    HISTORY_ATTRIBUTE,
    HISTORY_KEY,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENT_METHODS,
    MIN_ATTEMPT_TIME,
    OVERLOADED_HEADERS,
    History,
    HttpAttempt,
    HttpRules,
    RetryableResponse,
    capped,
    exception_classes,
    first_try,
    fits,
    is_overloaded,
    new_idempotency_key,
    parse_retry_after,
    read_within_attempt,
)
from seawall._policy.http.wire import RetryOnErrors, RouteRules, Wire, retryable_error, route_errors
from seawall._strategies.deadline import SCOPES

__all__ = [
    "DEFAULT_RETRY_STATUSES",
    "DEFAULT_TOTAL_TIMEOUT",
    "EXTENSION_KEY",
    "FIRST_TRY",
    "HISTORY_ATTRIBUTE",
    "HISTORY_KEY",
    "HOST_KEY_SAMPLES",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENT_METHODS",
    "MAX_HOSTS",
    "MIN_ATTEMPT_TIME",
    "OPTION_NAMES",
    "OVERLOADED_HEADERS",
    "OVERRIDE",
    "OVERRIDES",
    "PER_HOST",
    "SCOPES",
    "_HOST_BUDGETS",
    "_HOST_BUDGETS_LOCK",
    "AsyncExchange",
    "Exchange",
    "FirstAttemptPath",
    "History",
    "HostKey",
    "HttpAttempt",
    "HttpCall",
    "HttpOptions",
    "HttpRules",
    "LivePolicy",
    "PerHost",
    "Policies",
    "PolicyCache",
    "RetryOnErrors",
    "RetryableResponse",
    "RouteRules",
    "Wire",
    "adrive",
    "afirst_attempt",
    "budget_for_host",
    "capped",
    "check_budget",
    "current_override",
    "derive_policy",
    "drive",
    "exception_classes",
    "first_try",
    "first_attempt",
    "fits",
    "is_overloaded",
    "new_idempotency_key",
    "origin",
    "override",
    "parse_retry_after",
    "read_within_attempt",
    "retryable_error",
    "route_errors",
    "settle",
    "stateless_first",
    "within",
]
