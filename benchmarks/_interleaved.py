"""Contenders timed side by side: interleaved (A B C, A B C, ...) so that a noisy moment of a
shared machine falls on all of them in the same round."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def interleaved_rounds(
    contenders: Mapping[str, Callable[[], T]], rounds: int
) -> tuple[list[dict[str, float]], dict[str, T]]:
    """Run every contender once per round, *rounds* rounds: each round's wall times (seconds)
    by contender, and what each contender's last run returned."""
    times: list[dict[str, float]] = []
    results: dict[str, T] = {}
    for _ in range(rounds):
        this: dict[str, float] = {}
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            results[name] = fn()
            this[name] = time.perf_counter() - t0
        times.append(this)
    return times, results
