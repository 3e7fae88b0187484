"""Server-side defences for ASGI applications: load shedding and deadline intake.

Only the ASGI specification is needed; no web framework is imported. See ``docs/server.md``.
"""

from seawall._core.public import show_public_module
from seawall.server._admission import ShedOptions
from seawall.server._shed import OVERLOADED_HEADER, LoadShedder, ShedStats, parse_priority

__all__ = ["OVERLOADED_HEADER", "LoadShedder", "ShedOptions", "ShedStats", "parse_priority"]

show_public_module(__name__, globals())
