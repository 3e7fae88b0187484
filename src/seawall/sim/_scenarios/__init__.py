"""The built-in scenarios' command-line entries: options, short demo versions, tables, plots.

Importing the package registers them, in the order ``seawall sim --list`` and the demo show
them: the retry scenarios (storm, occ, amplify, fleet, sweep), then the overload experiments
(metastable, ramp, bronson, throttle) and the scenario file.
"""

from __future__ import annotations

from seawall.sim._scenarios import _retry  # noqa: F401  # isort: skip
from seawall.sim._scenarios import _overload  # noqa: F401  # isort: skip
from seawall.sim._scenarios._overload import OVERLOAD_DEFAULTS as OVERLOAD_DEFAULTS
from seawall.sim._scenarios._overload import _policy_file as _policy_file
from seawall.sim._scenarios._overload import _scenario_file as _scenario_file
from seawall.sim._scenarios._overload import overload_metrics as overload_metrics

__all__: list[str] = []
