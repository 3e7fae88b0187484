"""Contenders timed side by side: interleaved (A B C, A B C, ...) so that a noisy moment of a
shared machine falls on all of them, and the best time of the repeats kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def best_of(
    contenders: Mapping[str, Callable[[], T]], repeats: int
) -> tuple[dict[str, float], dict[str, T]]:
    """Run every contender *repeats* times, interleaved: each one's best wall time (seconds)
    and what its last run returned."""
    best = {name: float("inf") for name in contenders}
    results: dict[str, T] = {}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            results[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best, results
