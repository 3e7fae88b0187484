"""The sans-I/O core, for those who write their own driver (an event loop, a simulator, a
task queue, a durable orchestrator).

:class:`RetryState` makes the decisions of one logical call: given an attempt's outcome and the
time now, retry after a delay or give up, and why. The synchronous and asynchronous drivers in
:class:`seawall.RetryPolicy`, the HTTP integrations and the simulator all drive it; nothing here
does I/O or sleeps.
"""

from seawall._core.classify import (
    ErrorMatcher,
    RetryOn,
    Verdict,
    classify,
    compile_errors,
    is_transient,
)
from seawall._core.errors import error_summary
from seawall._core.public import show_public_module
from seawall._core.switch import one_attempt
from seawall._strategies.breaker import BreakerEvent, BreakerState, Permit, StateHook
from seawall._strategies.budget import FirstAttempt, answer_callback, first_attempt_callables
from seawall._strategies.hedge import HedgeDelayPassed, HedgeEvent, HedgeHook, QuantileSource
from seawall._strategies.retry import (
    MIN_HOLD,
    SNAPSHOT_VERSION,
    Attempt,
    AttemptRecord,
    Attempts,
    GiveUpReason,
    RetryState,
    RetryStatistics,
)

__all__ = [
    "Attempt",
    "AttemptRecord",
    "Attempts",
    "BreakerEvent",
    "BreakerState",
    "ErrorMatcher",
    "FirstAttempt",
    "GiveUpReason",
    "HedgeDelayPassed",
    "HedgeEvent",
    "HedgeHook",
    "MIN_HOLD",
    "Permit",
    "QuantileSource",
    "RetryOn",
    "RetryState",
    "RetryStatistics",
    "SNAPSHOT_VERSION",
    "StateHook",
    "Verdict",
    "answer_callback",
    "classify",
    "compile_errors",
    "error_summary",
    "first_attempt_callables",
    "is_transient",
    "one_attempt",
]

show_public_module(__name__, globals())
