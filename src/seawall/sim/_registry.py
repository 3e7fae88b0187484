"""The scenario registry: how a scenario plugs into the ``seawall`` command.

A scenario is a function returning a result object (see :mod:`seawall.sim`) plus a
:class:`Scenario` entry that tells the command line how to parse its options, run it, print it
and plot it. A new scenario (``hedge`` when the hedging model lands, or one of a user's own)
calls :func:`register_scenario` and appears as ``seawall sim NAME``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ENTRY_POINT_GROUP",
    "SCENARIOS",
    "Progress",
    "Scenario",
    "load_entry_points",
    "register_scenario",
]

#: The entry-point group through which installed packages add scenarios: each entry point
#: names a :class:`Scenario` (or a function returning one, or a list of them).
ENTRY_POINT_GROUP = "seawall.scenarios"

Progress = Callable[[int, int], None]
"""Called with (steps done, steps in all) as a scenario advances."""


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """A scenario as the ``seawall`` command sees it.

    Attributes:
        name: the subcommand name (``seawall sim NAME``).
        summary: one line for ``--help``.
        add_arguments: adds the scenario's own options to its subparser (``--seed``,
            ``--json``, ``--plot`` and ``--workers`` are added for every scenario).
        run: ``run(args, progress)`` runs the scenario from parsed options; returns its result.
        demo: ``demo(seed, workers, progress)`` runs the short version for ``seawall demo``.
        render: ``render(result, console)`` prints readable tables (a ``rich`` console).
        plot: ``plot(result, path)`` writes a PNG, or ``None`` if the scenario has no plot.
        description: the longer text for ``--help`` (defaults to the summary).
        metrics: ``metrics(result)`` gives the headline numbers (``{"naive.success": 0.29}``)
            that ``--seeds N`` reports as means with 95% confidence intervals; ``None``: the
            result's top-level numbers.
        cost: ``cost(parameters)`` estimates one trial's run time from its parameters (only
            the order matters: in ``--seeds`` runs and grids, the costliest trials start first,
            so that the workers finish together); ``None``: the trials start in their order.
    """

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Progress | None], Any]
    demo: Callable[[int, int, Progress | None], Any]
    render: Callable[[Any, Any], None]
    plot: Callable[[Any, str], None] | None = None
    description: str = ""
    metrics: Callable[[Any], dict[str, float | None]] | None = None
    cost: Callable[[Mapping[str, Any]], float] | None = None


#: Names of ``seawall sim`` subcommands that are not scenarios.
RESERVED_NAMES = frozenset({"verify"})

SCENARIOS: dict[str, Scenario] = {}
"""Registered scenarios by name, in registration order."""


def register_scenario(scenario: Scenario, *, replace: bool = False) -> Scenario:
    """Add *scenario* to :data:`SCENARIOS` (and so to ``seawall sim`` and ``seawall demo``).

    Raises:
        TypeError: *scenario* is not a :class:`Scenario`.
        ValueError: the name is taken (pass ``replace=True`` to override) or not a valid
            command name.
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a seawall.sim.Scenario, got {scenario!r}")
    name = scenario.name
    if not name or not name.replace("_", "-").replace("-", "").isalnum():
        raise ValueError(f"scenario name must be letters, digits, '-' or '_', got {name!r}")
    if name in RESERVED_NAMES:
        raise ValueError(f"scenario name {name!r} is taken by `seawall sim {name}` itself")
    if name in SCENARIOS and not replace:
        raise ValueError(f"a scenario named {name!r} is already registered")
    SCENARIOS[name] = scenario
    return scenario


_loaded = False
#: Entry points that failed to load: (name, error text), shown by ``seawall sim --list``.
BROKEN: list[tuple[str, str]] = []


def load_entry_points(*, force: bool = False) -> None:
    """Register the scenarios installed packages declare in the ``seawall.scenarios`` group.

    An entry point may name a :class:`Scenario`, a list of them, or a function returning either.
    One that fails to load is skipped and recorded in :data:`BROKEN` (a broken plugin must not
    break the command); a name already taken keeps its first owner.
    """
    global _loaded
    if _loaded and not force:
        return
    _loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            value = ep.load()
            if callable(value) and not isinstance(value, Scenario):
                value = value()
            found = list(value) if isinstance(value, (list, tuple)) else [value]
            for scenario in found:
                if not isinstance(scenario, Scenario):
                    raise TypeError(f"not a seawall.sim.Scenario: {scenario!r}")
                if scenario.name not in SCENARIOS:
                    register_scenario(scenario)
        except Exception as err:  # a third party's bug: report it, do not crash
            BROKEN.append((ep.name, f"{type(err).__name__}: {err}"))
