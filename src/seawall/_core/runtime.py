"""Every piece of process-wide state seawall keeps, in one place, with one :func:`reset`.

seawall keeps a few things per process on purpose. The settings and counters: the operator's
kill switch (:data:`SWITCH`), the instant-time mode of ``seawall.testing.instant()``
(:data:`TESTING`), the counters of deadline headers read by servers (:data:`HEADER_COUNTS`),
one retry budget per HTTP host (:data:`HOST_BUDGETS`). The latches: flags set once, the first
time a feature is used, so that until then a hot path may skip a context-variable read
(:data:`SCOPES`, :data:`OVERRIDES`, ``SWITCH.delegating``); they are never cleared while the
process runs, because a thread may be relying on them. And the context variables the latches
guard: the ambient deadline (:data:`DEADLINE`), the simulator's isolation (:data:`ISOLATED`).

Modules outside the core that keep process-wide state of their own give :func:`register` a
function that resets it; :func:`reset` calls them too.

This module imports nothing of seawall's: every other module may import it.
"""

from __future__ import annotations

import collections
import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "BUDGET_WARNINGS",
    "DEADLINE",
    "DEFAULT_GRACE",
    "HEADER_COUNTS",
    "HOST_BUDGETS",
    "HOST_BUDGETS_LOCK",
    "INSTANT_LOCK",
    "ISOLATED",
    "OVERRIDES",
    "SCOPES",
    "SWITCH",
    "TESTING",
    "register",
    "reset",
]


# -- the kill switch ------------------------------------------------------------------------------


def _switch_from_environment() -> bool:
    return os.environ.get("SEAWALL_RETRIES", "").strip().lower() not in {
        "off",
        "0",
        "false",
        "no",
        "disabled",
    }


class Switch:
    """The operator's kill switch (``seawall.set_enabled``), process-wide."""

    # Read on the failure path only; the success path never looks at the switch.
    __slots__ = ("_delegating", "_disabled_names", "_lock", "_on", "quiet")

    def __init__(self) -> None:
        # Writers hold it, so that `quiet` agrees with the settings it sums up.
        self._lock = threading.Lock()
        self._on = _switch_from_environment()
        self._disabled_names: frozenset[str] = frozenset()
        self._delegating = False
        #: Whether the switch changes nothing: retries on, no name switched off, and
        #: one_attempt() never entered. The failure path reads this one attribute and looks at
        #: the rest (and at the context variables they stand for) only when it is False.
        self.quiet = False
        self._settle()

    def _settle(self) -> None:
        with self._lock:
            self.quiet = self._on and not self._disabled_names and not self._delegating

    @property
    def on(self) -> bool:
        """The operator's setting, as set (the failure path reads it with ISOLATED: see
        enabled)."""
        return self._on

    @on.setter
    def on(self, value: bool) -> None:
        self._on = value
        self._settle()

    @property
    def delegating(self) -> bool:
        """A latch: whether one_attempt() has ever been entered in this process. Until then
        ONE_ATTEMPT holds its default everywhere and the failure path need not read it (a
        context variable never set costs a lookup in the context's map on every read)."""
        return self._delegating

    @delegating.setter
    def delegating(self, value: bool) -> None:
        self._delegating = value
        self._settle()

    # Inside isolated() (a simulated run) the operator's switch does not apply: it governs the
    # process's real calls, not a model of other processes.
    @property
    def enabled(self) -> bool:
        return self._on or ISOLATED.get()

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.on = value

    @property
    def disabled_names(self) -> frozenset[str]:
        return frozenset() if ISOLATED.get() else self._disabled_names

    @disabled_names.setter
    def disabled_names(self, value: frozenset[str]) -> None:
        self._disabled_names = value
        self._settle()


ISOLATED: contextvars.ContextVar[bool] = contextvars.ContextVar("seawall_isolated", default=False)
"""True in a simulated run (this context only): the kill switch is ignored there."""

SWITCH: Final = Switch()


# -- instant time (seawall.testing.instant) -------------------------------------------------------

#: How long blocked code inside ``instant()`` waits, in real time, for a timer seawall enforces.
DEFAULT_GRACE: Final = 0.1


class Instant:
    """The state of :func:`seawall.testing.instant`, process-wide.

    Inside it, the system clock runs on *instant time*: its reading is the real monotonic clock
    plus every wait skipped so far, so a wait passes at once and yet the deadlines that bound a
    call (``timeout``, ``attempt_timeout``, :func:`seawall.deadline`) see it pass, as they
    would in production. A timer that bounds blocked async code fires after ``grace`` real
    seconds at most, and instant time then jumps to its deadline (trio's autojump clock does
    the same for a whole run).
    """

    __slots__ = ("grace", "instant", "skipped")

    def __init__(self) -> None:
        self.instant = 0  # > 0 inside seawall.testing.instant()
        self.skipped = 0.0  # seconds of waits skipped: added to the system clock's reading
        self.grace = DEFAULT_GRACE

    def bounded(self, seconds: float) -> tuple[float, float]:
        """A timer of *seconds* as (real seconds to arm it for, seconds to skip if it fires)."""
        if self.instant and seconds > self.grace:
            return self.grace, seconds - self.grace
        return seconds, 0.0

    def skip(self, seconds: float) -> None:
        if seconds > 0.0:
            self.skipped += seconds


TESTING: Final = Instant()
#: Held while instant() blocks are entered and left: `+= 1` is a read and a write.
INSTANT_LOCK: Final = threading.Lock()


# -- deadlines ------------------------------------------------------------------------------------

#: The ambient deadline of this context (a ``seawall.Deadline``, or ``None``).
DEADLINE: contextvars.ContextVar[Any] = contextvars.ContextVar("seawall_deadline", default=None)


class Latch:
    """Whether a feature has ever been used in this process. Until then the context variable
    it guards holds its default in every context, and a hot path may skip reading it: a
    context variable never set costs a lookup in the context's map on every read (a few
    percent of a call that succeeds at once). Set once, never reset while the process runs,
    so a reader in any thread stays correct."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False


#: A latch: a deadline has been made ambient (by ``seawall._strategies.deadline.install``).
SCOPES: Final = Latch()


class HeaderCounts:
    """Process-wide counts of deadline headers read by ``timeout_from_headers``."""

    __slots__ = ("accepted", "clamped", "invalid", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accepted = 0
        self.invalid = 0
        self.clamped = 0


HEADER_COUNTS: Final = HeaderCounts()


# -- HTTP -----------------------------------------------------------------------------------------

#: One retry budget per HTTP host ("scheme://host:port"), least recently used first.
HOST_BUDGETS: Final[collections.OrderedDict[str, Any]] = collections.OrderedDict()
HOST_BUDGETS_LOCK: Final = threading.Lock()
#: A latch: an HTTP ``override()`` block has been entered.
OVERRIDES: Final = Latch()


# -- the budget warning ---------------------------------------------------------------------------


class Pace:
    """When the budget warning was last logged, per budget (a refusing budget refuses every
    retry of every call until the window moves on: one line each would flood the log).

    Attributes:
        every: seconds between two warnings about one budget.
        clock: what the pace reads (``time.monotonic``; a virtual clock's ``now`` in tests).
    """

    __slots__ = ("_last", "clock", "every", "lock")

    #: The most budgets remembered (the least recently warned about are forgotten first).
    LIMIT: Final = 1024

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.every = 10.0
        self.clock: Callable[[], float] = time.monotonic
        self._last: dict[object, list[float]] = {}  # key -> [time logged, refusals skipped]

    def admit(self, key: object) -> int | None:
        """``None``: skip this warning (it is counted); else log it, and this many were
        skipped since the last one."""
        now = self.clock()
        with self.lock:
            last = self._last.get(key)
            if last is not None and now - last[0] < self.every:
                last[1] += 1
                return None
            self._last.pop(key, None)  # to the end: the most recently warned about
            self._last[key] = [now, 0.0]
            if len(self._last) > self.LIMIT:
                del self._last[next(iter(self._last))]
            return 0 if last is None else int(last[1])

    def clear(self) -> None:
        with self.lock:
            self._last.clear()
            self.every = 10.0
            self.clock = time.monotonic


#: The budget warning's pace, per budget.
BUDGET_WARNINGS: Final = Pace()


# -- reset ----------------------------------------------------------------------------------------

_RESETS: list[Callable[[], None]] = []


def register(reset_state: Callable[[], None]) -> Callable[[], None]:
    """Have :func:`reset` call *reset_state* too (for state kept outside the core); returns it,
    so that it may decorate the function."""
    if reset_state not in _RESETS:
        _RESETS.append(reset_state)
    return reset_state


def reset(*, latches: bool = True) -> None:
    """Put seawall's process-wide state back as a fresh process has it.

    The kill switch (retries on, no name switched off, whatever ``SEAWALL_RETRIES`` said),
    :func:`seawall.testing.instant` blocks left open, the per-host HTTP retry budgets, the
    deadline-header counters, and whatever :func:`register` was given.

    With *latches* (a test suite between two tests), also the latches, the ambient deadline of
    the calling context, and the simulator's registry (its built-in scenarios only). Without
    (``seawall.testing.reset()``): a latch cleared while another thread relies on it would let
    that thread skip an ambient deadline, so users' resets leave them.
    """
    SWITCH.on = True
    SWITCH.disabled_names = frozenset()
    with INSTANT_LOCK:
        TESTING.instant = 0
        TESTING.skipped = 0.0
        TESTING.grace = DEFAULT_GRACE
    with HOST_BUDGETS_LOCK:
        HOST_BUDGETS.clear()
    with HEADER_COUNTS.lock:
        HEADER_COUNTS.accepted = HEADER_COUNTS.invalid = HEADER_COUNTS.clamped = 0
    BUDGET_WARNINGS.clear()
    _reset_unmoved()
    for reset_state in tuple(_RESETS):
        reset_state()
    if latches:
        DEADLINE.set(None)
        SCOPES.used = False
        OVERRIDES.used = False
        SWITCH.delegating = False
        _reset_unmoved_latches()


# -- state not kept here yet ----------------------------------------------------------------------
#
# The HTTP layer's per-host budgets and override latch, and the simulator's registry, still live
# in their own modules: reset here when those modules are loaded (they are not imported: the core
# imports nothing above it). When a module keeps its state here, or registers its reset, its part
# below goes.

_BUILT_IN_SCENARIOS: dict[str, Any] | None = None


def _reset_unmoved() -> None:
    http = sys.modules.get("seawall._policy.http")
    budgets = getattr(http, "_HOST_BUDGETS", None)
    if budgets is not None and budgets is not HOST_BUDGETS:
        with http._HOST_BUDGETS_LOCK:  # type: ignore[union-attr]
            budgets.clear()


def _reset_unmoved_latches() -> None:
    global _BUILT_IN_SCENARIOS
    http = sys.modules.get("seawall._policy.http")
    overrides = getattr(http, "OVERRIDES", None)
    if overrides is not None:
        overrides.used = False
    metrics = sys.modules.get("seawall.sim._metrics")
    if metrics is not None:
        metrics._hook = None  # type: ignore[attr-defined]
    registry = sys.modules.get("seawall.sim._registry")
    if registry is not None:
        scenarios: dict[str, Any] = registry.SCENARIOS
        if _BUILT_IN_SCENARIOS is None:
            # Taken the first time the registry is seen, once seawall.sim has registered its
            # own: seawall.sim imports the registry and every built-in scenario together.
            _BUILT_IN_SCENARIOS = dict(scenarios)
        scenarios.clear()
        scenarios.update(_BUILT_IN_SCENARIOS)
