"""Retry budgets: bound the total load that retries add when a dependency is sick.

A per-call attempt cap does not bound load: when every call fails, ``max_attempts=3`` triples
the traffic exactly when the dependency is weakest. The objects here are shared by every policy
that talks to one dependency and bound the extra load system-wide:

* :class:`RetryBudget`: retries may add at most ``ratio`` of the requests over a sliding window,
  plus a small floor (Finagle and Linkerd retry budgets).
* :class:`TokenBucket`: gRPC retry throttling; retries stop while most recent attempts fail.
* :class:`RetryQuota`: the AWS SDKs' "standard" retry quota (:meth:`RetryQuota.aws_standard`).
* :class:`AdaptiveThrottle`: client-side adaptive throttling (Google SRE book): when the
  dependency rejects most requests, reject some first attempts locally, with :class:`Throttled`.

Every one implements :class:`Budget`, so each works as ``RetryPolicy(budget=...)``; each can also
be driven by hand. All are thread-safe: a short lock guards a few counters and is never held
around the caller's function.

One job per module: ``protocol`` (what a policy asks of a budget), ``window``
(:class:`RetryBudget`), ``tokens`` (:class:`TokenBucket`, :class:`RetryQuota`), ``throttle``
(:class:`AdaptiveThrottle`), ``common`` (validation and counters they share).
"""

from __future__ import annotations

from seawall._strategies.budget.common import milli_tokens
from seawall._strategies.budget.protocol import (
    Budget,
    FirstAttempt,
    Throttled,
    answer_callback,
    first_attempt_callables,
)
from seawall._strategies.budget.throttle import AdaptiveThrottle
from seawall._strategies.budget.tokens import RetryQuota, TokenBucket
from seawall._strategies.budget.tokens import _aws_standard_cost as _aws_standard_cost
from seawall._strategies.budget.window import (
    DEFAULT_MIN_PER_SECOND,
    DEFAULT_RATIO,
    DEFAULT_WINDOW,
    RetryBudget,
    budget_state,
)

__all__ = [
    "DEFAULT_MIN_PER_SECOND",
    "DEFAULT_RATIO",
    "DEFAULT_WINDOW",
    "AdaptiveThrottle",
    "Budget",
    "FirstAttempt",
    "RetryBudget",
    "RetryQuota",
    "Throttled",
    "TokenBucket",
    "answer_callback",
    "budget_state",
    "first_attempt_callables",
    "milli_tokens",
]
