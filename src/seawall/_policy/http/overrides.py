"""Per-request overrides of the policy: :func:`override` blocks, read by every integration."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Final

from seawall._core.public import public
from seawall._core.validate import shown, unknown_key
from seawall._strategies.retry import RetryPolicy

# -- per-request overrides ----------------------------------------------------------------------

OVERRIDE: contextvars.ContextVar[object] = contextvars.ContextVar("seawall_http_override")


class _Overrides:
    """Whether an :func:`override` block has ever been entered in this process. Until then
    the first-attempt path (:meth:`Policies.first`) skips reading the variable, as it skips
    the ambient deadline until one is set (:data:`~seawall._strategies.deadline.SCOPES`). Set
    once, never reset."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False


OVERRIDES: Final = _Overrides()
_POLICY_NAMES: Final = (*(f.name for f in dataclasses.fields(RetryPolicy) if f.init), "retries")
_POLICY_FIELDS: Final = frozenset(_POLICY_NAMES)


@public("seawall.http")
@contextlib.contextmanager
def override(policy: RetryPolicy | None = None, /, **changes: Any) -> Iterator[None]:
    """Requests sent in this block by any seawall HTTP integration use another policy.

    ``with seawall.http.override(retries=0): session.get(url)`` sends once;
    ``override(other_policy)`` uses *other_policy*; ``override(max_attempts=5, timeout=2.0)``
    changes the transport's own policy for these requests. The HTTP rules, the budget choice and
    the transport's options stay. It follows the thread or task (a :mod:`contextvars`
    variable); with httpx, the request extension ``extensions={"seawall": ...}`` (a policy, or a
    dict of the same changes) overrides one request, and wins over this block.

    Args:
        policy: the policy to use instead of the transport's.
        **changes: :class:`~seawall.RetryPolicy` fields to change (``retries=N`` is
            ``max_attempts=N + 1``).

    Raises:
        TypeError, ValueError: an unknown field or an invalid value (named).
    """
    if policy is not None and not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a seawall.RetryPolicy or None, got {policy!r}")
    changes = policy_changes(changes)
    if policy is not None:
        value: object = policy.replace(**changes) if changes else policy
    else:
        RetryPolicy().replace(**changes)  # validate the values now, not on the first request
        value = changes
    OVERRIDES.used = True
    token = OVERRIDE.set(value)
    try:
        yield
    finally:
        OVERRIDE.reset(token)


def policy_changes(changes: Mapping[Any, Any]) -> dict[str, Any]:
    """*changes* as ``RetryPolicy.replace`` arguments; ``retries`` becomes ``max_attempts``."""
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in _POLICY_FIELDS:
            raise TypeError(f"seawall override {shown(key)}: {unknown_key(key, _POLICY_NAMES)}")
        if key == "retries":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"retries must be an int >= 0, got {value!r}")
            key, value = "max_attempts", value + 1
        out[key] = value
    return out


def current_override() -> object:
    """The override of the enclosing :func:`override` block, or ``None``."""
    return OVERRIDE.get(None)
