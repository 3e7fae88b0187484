"""Hedged requests: when an attempt is slow, start another and take whichever answers first.

A hedge trades a few percent of extra load for a much shorter latency tail (Dean and Barroso,
"The Tail at Scale", CACM 2013). Only for idempotent operations: two attempts may both run to
completion on the server.

One job per module:

- ``events``: what a hedge hook receives (:class:`HedgeEvent`), the error a budget hears for a
  slow attempt (:class:`HedgeDelayPassed`), and what an adaptive delay reads
  (:class:`QuantileSource`);
- ``policy``: :class:`Hedge`, its validation, its sans-I/O decisions, its decorator, and
  :func:`hedge`;
- ``drivers``: the asyncio and trio loops over those decisions, which :meth:`Hedge.acall` runs.
"""

from __future__ import annotations

from seawall._strategies.hedge.events import (
    HedgeDelayPassed,
    HedgeEvent,
    HedgeHook,
    QuantileSource,
)
from seawall._strategies.hedge.policy import Hedge, hedge

__all__ = ["Hedge", "HedgeDelayPassed", "HedgeEvent", "HedgeHook", "QuantileSource", "hedge"]
