"""The saga part of ``seawall demo``: one run of an order saga on virtual time, its log shown
while a step retries, and after a permanent failure was compensated."""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any

from seawall._core.clock import VirtualClock
from seawall._core.errors import Permanent
from seawall._strategies.backoff import Backoff
from seawall._strategies.retry import RetryPolicy
from seawall.saga._cli import format_history, format_run, run_json
from seawall.saga._model import Saga, Step, StepContext
from seawall.saga._orchestrator import Orchestrator

__all__ = ["demo"]

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z, on virtual time


def demo(seed: int = 0) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """Run the demo saga; the tables to print (title, text) and a JSON summary."""
    failures = {"charge": 2}

    def reserve(ctx: StepContext) -> dict[str, Any]:
        return {"reservation": f"R-{ctx.input['order_id']}"}

    def charge(ctx: StepContext) -> dict[str, Any]:
        if failures["charge"] > 0:
            failures["charge"] -= 1
            raise ConnectionError("payment gateway reset the connection")
        return {"payment": "P-1", "key": ctx.idempotency_key}

    def ship(ctx: StepContext) -> None:
        raise Permanent("carrier refused the address")

    def undo(ctx: StepContext) -> None:
        return None

    policy = RetryPolicy(
        max_attempts=5, backoff=Backoff(base=2.0, cap=60.0), rng=random.Random(seed), hooks=()
    )
    order = Saga(
        "order",
        [
            Step("reserve", reserve, compensate=undo, policy=policy),
            Step("charge", charge, compensate=undo, policy=policy),
            Step("ship", ship, policy=policy),
        ],
    )
    tables: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{os.path.join(directory, 'demo.db')}"
        clock = VirtualClock(start=START)
        with Orchestrator(url, [order], clock=clock, hooks=()) as orch:
            run_id = orch.start("order", {"order_id": 42}, run_id="order-42")
            orch.run_due()
            tables.append(
                (
                    "charge failed and waits for its retry (a row, not a sleep)",
                    format_run(orch.get(run_id)),
                )
            )
            run = orch.run_until_settled(run_id)
            history = orch.history(run_id)
            tables.append(
                (
                    "ship failed for good: charge and reserve compensated, in reverse",
                    format_run(run),
                )
            )
            tables.append(("the run's history (append-only)", format_history(history)))
            summary = run_json(run, history)
    return tables, summary
