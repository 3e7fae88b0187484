"""Option types for the scenarios' command lines: argparse turns their errors into
"argument --x: invalid ..." messages."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

__all__ = ["choice", "count", "non_negative", "positive", "probability", "whole"]


def _whole_number(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value: int | None = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    return parse


def _finite_number(*, zero: bool) -> Callable[[str], float]:
    bound = ">= 0" if zero else "> 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {bound}, got {text!r}") from None
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
        return value

    return parse


#: An integer >= 1 (clients, attempts, trials, workers).
count = _whole_number(1)
#: An integer >= 0 (a seed).
whole = _whole_number(0)
#: A finite number > 0 (rates, durations).
positive = _finite_number(zero=False)
non_negative = _finite_number(zero=True)


def probability(text: str) -> float:
    """A probability in [0, 1]; ``5%`` is accepted too."""
    t = text.strip()
    scale = 1.0
    if t.endswith("%"):
        t, scale = t[:-1], 0.01
    try:
        value = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {text!r}")
    return value


def choice(choices: tuple[str, ...]) -> Any:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}; got {text!r}")
        return text

    return parse
