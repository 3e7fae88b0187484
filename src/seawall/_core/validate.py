"""Checks for configuration parameters, shared by every module that takes one.

Each check returns the value in its canonical type (``float`` for numbers, ``int`` for counts)
or raises ``TypeError`` (wrong type) or ``ValueError`` (out of range) with a message that starts
with the parameter's name and ends with the rejected value, as in
``ValueError("max_attempts must be >= 1, got 0")``. ``bool`` is refused wherever a number is
expected: ``True`` as a timeout is a mistake, not one second. NaN fails every range check.
"""

from __future__ import annotations

import math

__all__ = ["count", "number", "optional_seconds", "ratio", "seconds"]


def number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: bool = False,
    finite: bool = False,
    what: str = "a number",
    alternative: str = "",
) -> float:
    """*value* as a float, checked against the range the keywords describe.

    Args:
        name: the parameter's name, for the message.
        value: what the caller passed.
        minimum: the lowest value allowed (``None``: no lower bound and NaN passes).
        above: *minimum* itself is not allowed (``> minimum`` instead of ``>= minimum``).
        finite: infinities (and NaN) are not allowed.
        what: how the message names the expected type (``"a number of seconds"``).
        alternative: what else is accepted, for the range message (``" or None"``).

    The range message says which bound failed: ``"must be finite"`` for an infinity or NaN when
    *finite*, else ``"must be >= 0"`` for a value below the minimum (or NaN).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {what}, got {value!r}")
    v = float(value)
    if finite and not math.isfinite(v):
        raise ValueError(f"{name} must be finite{alternative}, got {value!r}")
    # `not (v >= minimum)` rather than `v < minimum`: the former also refuses NaN.
    if minimum is not None and not (v > minimum if above else v >= minimum):
        op = ">" if above else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}{alternative}, got {value!r}")
    return v


def seconds(name: str, value: object, *, zero: bool = True, finite: bool = False) -> float:
    """A duration in seconds: ``>= 0`` (``> 0`` when *zero* is false); infinity unless *finite*."""
    return number(
        name, value, minimum=0.0, above=not zero, finite=finite, what="a number of seconds"
    )


def optional_seconds(
    name: str, value: object, *, zero: bool = False, finite: bool = False
) -> float | None:
    """:func:`seconds`, or ``None`` for "no limit"; zero is refused unless *zero*."""
    if value is None:
        return None
    return number(
        name,
        value,
        minimum=0.0,
        above=not zero,
        finite=finite,
        what="a number of seconds or None",
        alternative=" or None",
    )


def ratio(name: str, value: object, *, zero: bool = True) -> float:
    """A fraction in ``[0, 1]``, or ``(0, 1]`` when *zero* is false (a probability, a share)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not ((v >= 0.0 if zero else v > 0.0) and v <= 1.0):  # also refuses NaN
        bounds = "between 0 and 1" if zero else "> 0 and <= 1"
        raise ValueError(f"{name} must be {bounds}, got {value!r}")
    return v


def count(name: str, value: object, *, minimum: int = 0) -> int:
    """An ``int`` (not a ``bool``, not a float with an integral value) that is ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value
