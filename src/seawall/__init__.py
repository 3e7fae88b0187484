"""seawall: safe retries.

Jittered exponential backoff, permanent-error classification, one deadline per call, retry
budgets, and virtual time for tests and simulation. See the README and ``docs/``.
"""

from seawall import testing
from seawall._backoff import Backoff, Jitter
from seawall._budget import Budget
from seawall._clock import Clock, SystemClock, VirtualClock
from seawall._deadline import Deadline, deadline, remaining
from seawall._errors import (
    DeadlineExceeded,
    Overloaded,
    Permanent,
    RetryAfter,
    is_permanent,
    permanent,
)
from seawall._retry import (
    Attempt,
    AttemptRecord,
    Hook,
    Outcome,
    RetryEvent,
    RetryPolicy,
    RetryState,
    logging_hook,
    retry,
)
from seawall._switch import is_enabled, set_enabled

__all__ = [
    "Attempt",
    "AttemptRecord",
    "Backoff",
    "Budget",
    "Clock",
    "Deadline",
    "DeadlineExceeded",
    "Hook",
    "Jitter",
    "Outcome",
    "Overloaded",
    "Permanent",
    "RetryAfter",
    "RetryEvent",
    "RetryPolicy",
    "RetryState",
    "SystemClock",
    "VirtualClock",
    "deadline",
    "is_enabled",
    "is_permanent",
    "logging_hook",
    "permanent",
    "remaining",
    "retry",
    "set_enabled",
    "testing",
]

__version__ = "0.1.0.dev0"
