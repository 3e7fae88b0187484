"""Retrying: the policy, its sans-I/O state, and the drivers over it.

One job per module:

- ``events``: what a hook receives (:class:`RetryEvent`), the default logging hook, and the
  records of a call's attempts (:class:`AttemptRecord`, :class:`Outcome`);
- ``state``: :class:`RetryState`, the retry decisions for one call, free of I/O;
- ``persist``: a state as stored data (``snapshot``/``restore``) for durable drivers;
- ``policy``: :class:`RetryPolicy`, its validation, its decorator, and :func:`retry`;
- ``drivers``: the synchronous and asyncio retry loops over the state;
- ``first_attempt``: the first attempt of a call without bookkeeping, and the generated
  variants of it that decorated functions run;
- ``attempts``: the block API (``for attempt in policy.attempts(): with attempt: ...``);
- ``statistics``: :class:`RetryStatistics`, the counts of a decorated function's calls.

The simulator's event engine, the saga orchestrator and the gRPC interceptors are further
drivers over :class:`RetryState`.
"""

from __future__ import annotations

from seawall._strategies.retry.attempts import Attempt, Attempts
from seawall._strategies.retry.events import (
    AttemptRecord,
    GiveUpReason,
    Hook,
    Outcome,
    RetryEvent,
    logging_hook,
)
from seawall._strategies.retry.persist import SNAPSHOT_VERSION
from seawall._strategies.retry.policy import (
    RetryingFunction,
    RetryingMethod,
    RetryPolicy,
    retry,
)
from seawall._strategies.retry.state import MIN_HOLD, RetryState
from seawall._strategies.retry.statistics import RetryStatistics

__all__ = [
    "MIN_HOLD",
    "SNAPSHOT_VERSION",
    "Attempt",
    "AttemptRecord",
    "Attempts",
    "GiveUpReason",
    "Hook",
    "Outcome",
    "RetryEvent",
    "RetryPolicy",
    "RetryState",
    "RetryStatistics",
    "RetryingFunction",
    "RetryingMethod",
    "logging_hook",
    "retry",
]
