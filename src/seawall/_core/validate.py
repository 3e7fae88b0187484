"""Checks for configuration parameters, shared by every module that takes one.

Each check returns the value in its canonical type (``float`` for numbers, ``int`` for counts)
or raises ``TypeError`` (wrong type) or ``ValueError`` (out of range) with a message that starts
with the parameter's name and ends with the rejected value, as in
``ValueError("max_attempts must be >= 1, got 0")``. ``bool`` is refused wherever a number is
expected: ``True`` as a timeout is a mistake, not one second. NaN fails every range check.

Integers too large for a float (``10**400``) are refused with a ``ValueError``, never an
``OverflowError``, and messages abbreviate them (Python refuses to print an int of more than
4,300 digits). Durations are at most :data:`MAX_SECONDS`: a longer finite one would overflow the
platform's timeouts at the first wait, not when it is configured.
"""

from __future__ import annotations

import difflib
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Final

from seawall._core.redact import escape_controls

__all__ = [
    "MAX_SECONDS",
    "MIN_WINDOW",
    "count",
    "key_path",
    "number",
    "optional_seconds",
    "ratio",
    "seconds",
    "shown",
    "unknown_key",
]

#: The longest finite duration a parameter may hold: 1e9 s, about 31.7 years. Sleeps, lock and
#: socket timeouts overflow a little past 9.2e9 s (``threading.TIMEOUT_MAX``); infinity, where a
#: parameter accepts it, still means "no limit".
MAX_SECONDS: Final = 1e9

#: The shortest sliding window (seconds): windows are cut into slices that clock readings are
#: divided by, and a slice of a subnormal width divides by zero or overflows.
MIN_WINDOW: Final = 1e-3

# Ints longer than this are shown by their size only, in messages.
_SHOWN_DIGITS: Final = 24


def shown(value: object) -> str:
    """``repr(value)`` for an error message, with huge integers abbreviated.

    ``repr`` of an int beyond 4,300 digits raises ``ValueError`` itself, and a 400-digit number
    makes a message nobody reads.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        bits = abs(value).bit_length()
        if bits > _SHOWN_DIGITS * 3:  # cheap pre-check before any conversion to decimal
            digits = int(bits * math.log10(2)) + 1
            if digits > _SHOWN_DIGITS:
                sign = "-" if value < 0 else ""
                return f"{sign}an int of about {digits} digits"
    try:
        return repr(value)
    except Exception:  # a value whose __repr__ fails must not hide the real problem
        return f"<{type(value).__name__} object>"


def _as_float(name: str, value: int | float, what: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large for {what}, got {shown(value)}") from None


def number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: bool = False,
    finite: bool = False,
    maximum: float | None = None,
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
        maximum: the largest finite value allowed (``None``: no upper bound). Infinity is
            judged by *finite*, not by *maximum*.
        what: how the message names the expected type (``"a number of seconds"``).
        alternative: what else is accepted, for the range message (``" or None"``).

    The range message says which bound failed: ``"must be finite"`` for an infinity or NaN when
    *finite*, else ``"must be >= 0"`` for a value below the minimum (or NaN), ``"must be <= 1e+09"``
    above the maximum. An int too large for a float is refused (``"is too large"``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {what}, got {shown(value)}")
    if type(value) is float:
        v = value
    elif isinstance(value, int) and minimum is not None and value < minimum:
        # A huge negative int is below any minimum: say so, rather than "too large".
        op = ">" if above else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}{alternative}, got {shown(value)}")
    else:
        v = _as_float(name, value, what)
    if finite and not math.isfinite(v):
        raise ValueError(f"{name} must be finite{alternative}, got {shown(value)}")
    # `not (v >= minimum)` rather than `v < minimum`: the former also refuses NaN.
    if minimum is not None and not (v > minimum if above else v >= minimum):
        op = ">" if above else ">="
        raise ValueError(f"{name} must be {op} {minimum:g}{alternative}, got {shown(value)}")
    if maximum is not None and maximum < v < math.inf:
        raise ValueError(f"{name} must be <= {maximum:g}{alternative}, got {shown(value)}")
    return v


def seconds(
    name: str,
    value: object,
    *,
    zero: bool = True,
    finite: bool = False,
    minimum: float = 0.0,
) -> float:
    """A duration in seconds: ``>= 0`` (``> 0`` when *zero* is false); infinity unless *finite*.

    A finite duration is at most :data:`MAX_SECONDS`. *minimum* raises the lower bound for a
    duration that something is divided by (a window cut into slices): ``>= minimum`` then.
    """
    return number(
        name,
        value,
        minimum=minimum,
        above=not zero and minimum == 0.0,
        finite=finite,
        maximum=MAX_SECONDS,
        what="a number of seconds",
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
        maximum=MAX_SECONDS,
        what="a number of seconds or None",
        alternative=" or None",
    )


def ratio(name: str, value: object, *, zero: bool = True) -> float:
    """A fraction in ``[0, 1]``, or ``(0, 1]`` when *zero* is false (a probability, a share)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {shown(value)}")
    bounds = "between 0 and 1" if zero else "> 0 and <= 1"
    if isinstance(value, int) and not -2 <= value <= 2:
        raise ValueError(f"{name} must be {bounds}, got {shown(value)}")
    v = float(value)
    if not ((v >= 0.0 if zero else v > 0.0) and v <= 1.0):  # also refuses NaN
        raise ValueError(f"{name} must be {bounds}, got {shown(value)}")
    return v


def count(name: str, value: object, *, minimum: int = 0, maximum: int = sys.maxsize) -> int:
    """An ``int`` (not a ``bool``, not a float with an integral value) in ``[minimum, maximum]``.

    The default *maximum* is the largest machine-sized int: beyond it, a count given to a deque
    or a list raises ``OverflowError``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {shown(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {shown(value)}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {shown(value)}")
    return value


def unknown_key(
    key: object,
    known: Sequence[str],
    *,
    what: str = "field",
    aliases: Mapping[str, str] | None = None,
) -> str:
    """What is wrong with an unknown *key* of a table, for a message that starts with its path:
    ``unknown field; did you mean 'retry_policy'? (expected one of: timeout, retry_policy)``.

    The suggestion is the nearest *known* name by spelling, or the name an *aliases* entry near
    the key stands for (another library's word: ``max_retries`` for ``num_retries``); there is
    none when nothing is near.
    """
    problem = f"unknown {what}"
    if isinstance(key, str):
        choices = {name: name for name in known} | dict(aliases or {})
        # 0.7: a typo or two (dleay, num_retrys) is near; speed is not shape.
        near = difflib.get_close_matches(key.lower().replace("-", "_"), choices, n=1, cutoff=0.7)
        if near:
            problem += f"; did you mean {choices[near[0]]!r}?"
    return f"{problem} (expected one of: {', '.join(known)})"


def key_path(path: str, key: object) -> str:
    """*path* and an untrusted *key* of its table, as a message names them: ``defaults.retry``
    (a key with control characters is shown escaped; one that is not a string, by its repr)."""
    text = escape_controls(key) if isinstance(key, str) else shown(key)
    return f"{path}.{text}" if path else text
