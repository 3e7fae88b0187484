"""seawall: safe retries.

Jittered exponential backoff, permanent-error classification, one deadline per call, retry
budgets, and virtual time for tests and simulation. See the README and ``docs/``.
"""

from seawall import testing
from seawall._backoff import Backoff, Jitter
from seawall._breaker import BreakerEvent, BreakerState, CircuitBreaker, CircuitOpen
from seawall._budget import (
    AdaptiveThrottle,
    Budget,
    RetryBudget,
    RetryQuota,
    Throttled,
    TokenBucket,
)
from seawall._clock import Clock, SystemClock, VirtualClock
from seawall._config import (
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
from seawall._deadline import (
    DEFAULT_TRANSIT_MARGIN,
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    Deadline,
    DeadlineHeaderCounts,
    deadline,
    deadline_from_headers,
    deadline_header_counts,
    deadline_headers,
    decode_grpc_timeout,
    decode_request_deadline,
    encode_grpc_timeout,
    encode_request_deadline,
    remaining,
    timeout_from_headers,
)
from seawall._errors import (
    DeadlineExceeded,
    Overloaded,
    Permanent,
    RetryAfter,
    is_permanent,
    permanent,
)
from seawall._hedge import Hedge, HedgeDelayPassed, HedgeEvent, HedgeHook, hedge
from seawall._latency import LatencyTracker
from seawall._pipeline import Pipeline
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
    "AdaptiveThrottle",
    "Attempt",
    "AttemptRecord",
    "Backoff",
    "BreakerEvent",
    "BreakerState",
    "Budget",
    "BudgetConfig",
    "CircuitBreaker",
    "CircuitOpen",
    "Clock",
    "ConfigError",
    "DEFAULT_TRANSIT_MARGIN",
    "Deadline",
    "DeadlineExceeded",
    "DeadlineHeaderCounts",
    "GRPC_TIMEOUT_HEADER",
    "Hedge",
    "HedgeConfig",
    "HedgeDelayPassed",
    "HedgeEvent",
    "HedgeHandle",
    "HedgeHook",
    "Hook",
    "Jitter",
    "LatencyTracker",
    "Outcome",
    "Overloaded",
    "Permanent",
    "Pipeline",
    "PolicyHandle",
    "PolicyRegistry",
    "REQUEST_DEADLINE_HEADER",
    "RetryAfter",
    "RetryBudget",
    "RetryEvent",
    "RetryPolicy",
    "RetryQuota",
    "RetryState",
    "RouteConfig",
    "SystemClock",
    "Throttled",
    "TokenBucket",
    "VirtualClock",
    "deadline",
    "deadline_from_headers",
    "deadline_header_counts",
    "deadline_headers",
    "decode_grpc_timeout",
    "decode_request_deadline",
    "encode_grpc_timeout",
    "encode_request_deadline",
    "hedge",
    "is_enabled",
    "is_permanent",
    "load_config",
    "logging_hook",
    "parse_config",
    "permanent",
    "remaining",
    "retry",
    "set_enabled",
    "testing",
    "timeout_from_headers",
]

__version__ = "0.1.0.dev0"
