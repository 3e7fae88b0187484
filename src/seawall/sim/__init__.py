"""The seawall simulator: the real policy objects on virtual time, deterministic by seed.

A heap-based discrete-event :class:`Engine` orders events; the scenarios model clients, network
hops, servers and shared resources, and drive the real decision code: ``RetryPolicy.new_state``,
``RetryState.begin_attempt`` / ``on_error`` / ``on_success``, ``Backoff.compute`` and the budgets,
whose clock reads the engine's time (:class:`SimClock`).

Each scenario is a function with documented defaults that returns a frozen result object:
:func:`storm`, :func:`occ`, :func:`amplify`, :func:`fleet`, :func:`sweep`, :func:`metastable`,
:func:`hedge`.
The ``seawall`` command runs them (``seawall sim NAME``); new scenarios plug into it through
:func:`register_scenario`. Tables and plots need the ``sim`` extra (rich, matplotlib); the
scenario functions themselves need nothing beyond seawall.
"""

# Registers the built-in scenarios, in the order the demo shows them: the retry scenarios,
# then hedging.
from seawall._core.public import show_public_module

from seawall.sim import _scenarios  # noqa: F401  # isort: skip
from seawall.sim import _hedge_report  # noqa: F401  # isort: skip
from seawall.sim._amplify import AMPLIFY_STRATEGIES, AmplifyResult, AmplifyRow, amplify
from seawall.sim._engine import Engine, SimClock
from seawall.sim._fleet import FLEET_STRATEGIES, FleetResult, FleetRow, fleet
from seawall.sim._hedge import HEDGE_PERCENTILES, HedgeResult, HedgeRow, hedge
from seawall.sim._metastable import (
    METASTABLE_STRATEGIES,
    MetastableResult,
    MetastableSeries,
    metastable,
)
from seawall.sim._metrics import collect_metrics
from seawall.sim._occ import OCC_ALGORITHMS, OccResult, OccRow, WriteConflict, occ
from seawall.sim._registry import SCENARIOS, Scenario, register_scenario
from seawall.sim._storm import StormResult, TraceStep, storm
from seawall.sim._sweep import SWEEP_STRATEGIES, SweepResult, SweepRow, sweep

__all__ = [
    "AMPLIFY_STRATEGIES",
    "FLEET_STRATEGIES",
    "HEDGE_PERCENTILES",
    "METASTABLE_STRATEGIES",
    "OCC_ALGORITHMS",
    "SCENARIOS",
    "SWEEP_STRATEGIES",
    "AmplifyResult",
    "AmplifyRow",
    "Engine",
    "FleetResult",
    "FleetRow",
    "HedgeResult",
    "HedgeRow",
    "MetastableResult",
    "MetastableSeries",
    "OccResult",
    "OccRow",
    "Scenario",
    "SimClock",
    "StormResult",
    "SweepResult",
    "SweepRow",
    "TraceStep",
    "WriteConflict",
    "amplify",
    "collect_metrics",
    "fleet",
    "hedge",
    "metastable",
    "occ",
    "register_scenario",
    "storm",
    "sweep",
]

show_public_module(__name__, globals())
