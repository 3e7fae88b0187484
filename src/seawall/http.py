"""The HTTP rules that every HTTP integration applies, independent of the client library.

Which methods are idempotent, which statuses are retried, how ``Retry-After`` and the
"overloaded" headers are read, the ``Idempotency-Key``, and the per-host budgets. The
integrations (:mod:`seawall.httpx`, :mod:`seawall.requests`) take these as arguments.
"""

from seawall._core.public import show_public_module
from seawall._policy.http import (
    DEFAULT_RETRY_STATUSES,
    DEFAULT_TOTAL_TIMEOUT,
    EXTENSION_KEY,
    HISTORY_ATTRIBUTE,
    HISTORY_KEY,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENT_METHODS,
    MIN_ATTEMPT_TIME,
    OVERLOADED_HEADERS,
    PER_HOST,
    HttpAttempt,
    HttpOptions,
    HttpRules,
    LivePolicy,
    budget_for_host,
    is_overloaded,
    new_idempotency_key,
    override,
    parse_retry_after,
)

__all__ = [
    "DEFAULT_RETRY_STATUSES",
    "DEFAULT_TOTAL_TIMEOUT",
    "EXTENSION_KEY",
    "HISTORY_ATTRIBUTE",
    "HISTORY_KEY",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENT_METHODS",
    "MIN_ATTEMPT_TIME",
    "OVERLOADED_HEADERS",
    "PER_HOST",
    "HttpAttempt",
    "HttpOptions",
    "HttpRules",
    "LivePolicy",
    "budget_for_host",
    "is_overloaded",
    "new_idempotency_key",
    "override",
    "parse_retry_after",
]

show_public_module(__name__, globals())
