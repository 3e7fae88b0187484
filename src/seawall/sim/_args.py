"""Option types for the scenarios' command lines: argparse turns their errors into
"argument --x: ..." messages.

Every whole-number option has an upper bound, checked as the arguments are read: a typo such
as ``--workers 10**22`` is refused naming the option and its bound, before anything starts.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, Final

from seawall.sim._util import MAX_EVENTS

__all__ = [
    "MAX_COUNT",
    "MAX_SEED",
    "MAX_TRIALS",
    "MAX_WORKERS",
    "choice",
    "count",
    "non_negative",
    "port",
    "positive",
    "probability",
    "seed",
    "trials",
    "whole",
    "whole_number",
    "workers",
]

#: The largest count an option takes (clients, requests, attempts, trials, a server's
#: capacity): a run of more simulated requests than this is refused anyway.
MAX_COUNT: Final = MAX_EVENTS
#: The most processes ``--workers`` starts (more is a typo, not a machine).
MAX_WORKERS: Final = 1024
#: The most trials one command runs: ``--seeds`` seeds, times a grid's cells.
MAX_TRIALS: Final = 100_000
#: The largest seed (``--seed``): a seed and the ones after it must fit a C long.
MAX_SEED: Final = sys.maxsize - MAX_TRIALS


def whole_number(minimum: int, maximum: int) -> Callable[[str], int]:
    """An option type: a whole number in [*minimum*, *maximum*]."""

    def parse(text: str) -> int:
        try:
            value: int | None = int(text)
        except ValueError:  # not a number, or one of more than 4300 digits
            value = None
        if value is None or not minimum <= value <= maximum:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise argparse.ArgumentTypeError(
                f"must be a whole number >= {minimum} and <= {maximum}, got {shown!r}"
            )
        return value

    parse.__name__ = f"whole number in [{minimum}, {maximum}]"
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


#: An integer >= 1 (clients, attempts, trials).
count = whole_number(1, MAX_COUNT)
#: An integer >= 0 (a count that may be zero).
whole = whole_number(0, MAX_COUNT)
#: ``--workers``: processes.
workers = whole_number(1, MAX_WORKERS)
#: ``--seeds``: seeds run (each a trial).
trials = whole_number(1, MAX_TRIALS)
#: ``--seed``.
seed = whole_number(0, MAX_SEED)
#: ``--port``: a TCP port (0 picks a free one).
port = whole_number(0, 65535)
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
