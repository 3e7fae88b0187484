"""The gRPC rules: which statuses are retried, the server's pushback, and the settings every
retrying interceptor validates (policy, budget, codes, request buffer)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, NamedTuple

import grpc

from seawall._core import validate as _validate
from seawall._core.errors import DeadlineExceeded
from seawall._core.public import public
from seawall._strategies.budget import Budget, TokenBucket
from seawall._strategies.retry import RetryPolicy

#: The trailing metadata key in which a server asks for a wait before the next attempt, in
#: milliseconds; a negative (or malformed) value means "do not retry" (gRPC proposal A6).
PUSHBACK_HEADER: Final = "grpc-retry-pushback-ms"

#: Statuses retried whatever the server says: the service could not be reached or refused the
#: call before doing its work.
DEFAULT_RETRY_CODES: Final = frozenset({grpc.StatusCode.UNAVAILABLE})

#: Statuses retried only when the server sent a pushback: "too busy now, come back in N ms".
#: Without a pushback a RESOURCE_EXHAUSTED is a quota the caller ran out of, which retrying
#: repeats.
PUSHBACK_CODES: Final = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED})

OK = grpc.StatusCode.OK
DEADLINE_CODE = grpc.StatusCode.DEADLINE_EXCEEDED
# A pushback is a decimal number of milliseconds; longer strings are refused, not parsed.
_PUSHBACK_MAX_LEN = 12


class _RefusePushback:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REFUSE"


#: What :func:`parse_pushback` returns for a pushback that forbids a retry.
REFUSE: Final = _RefusePushback()


@public("seawall.grpc")
def parse_pushback(metadata: object) -> float | _RefusePushback | None:
    """The server's pushback in *metadata* (trailing metadata pairs): seconds to wait, ``REFUSE``
    (negative or malformed: do not retry, as gRPC proposal A6 says), or ``None`` (none sent).

    The value is untrusted: a malformed one refuses the retry rather than crashing; clamping a
    long wait is the policy's ``max_retry_after``. Never raises.
    """
    if not metadata:
        return None
    try:
        items = list(metadata)  # type: ignore[call-overload]
    except TypeError:
        return None
    for item in items:
        try:
            key, value = item
        except (TypeError, ValueError):
            continue
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if not isinstance(key, str) or key.lower() != PUSHBACK_HEADER:
            continue
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return REFUSE
        text = value.strip()
        digits = text[1:] if text.startswith("-") else text
        if not text or len(text) > _PUSHBACK_MAX_LEN or not (digits.isascii() and digits.isdigit()):
            return REFUSE
        ms = int(text)
        return REFUSE if ms < 0 else ms / 1000.0
    return None


@public("seawall.grpc")
class RetryableStatus(Exception):
    """Stands for a failed attempt with a retryable (or a fatal) status while the policy decides.

    Never raised to the caller, who gets grpcio's own ``RpcError`` when the policy gives up.

    Attributes:
        code: the ``grpc.StatusCode``.
        retry_after: the server's pushback in seconds, or ``None``.
    """

    def __init__(self, code: grpc.StatusCode, retry_after: float | None = None) -> None:
        super().__init__(f"gRPC {code.name}")
        self.code = code
        # Read by the policy (retry_after_of): server pushback replaces the backoff.
        self.retry_after = retry_after


@public("seawall.grpc")
class StatusDeadlineExceeded(DeadlineExceeded):
    """Stands for a DEADLINE_EXCEEDED status: a slow attempt, retried while the call's own
    deadline has room, and nobody's fault once it has passed (the engine's deadline rule)."""

    def __init__(self) -> None:
        super().__init__("gRPC DEADLINE_EXCEEDED")
        self.code = DEADLINE_CODE


class _PerChannel:
    """The default ``budget``: a :class:`~seawall.TokenBucket` per interceptor (per channel)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PER_CHANNEL"


PER_CHANNEL: Final = _PerChannel()


def _codes(name: str, value: object) -> frozenset[grpc.StatusCode]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise TypeError(f"{name} must be a collection of grpc.StatusCode, got {value!r}")
    codes = frozenset(value)
    for code in codes:
        if not isinstance(code, grpc.StatusCode):
            raise TypeError(f"{name} must hold grpc.StatusCode values, got {code!r}")
        if code is OK:
            raise ValueError(f"{name} must not hold StatusCode.OK")
    return codes


class Rules(NamedTuple):
    policy: RetryPolicy
    retry_codes: frozenset[grpc.StatusCode]
    pushback_codes: frozenset[grpc.StatusCode]


def make_rules(
    policy: RetryPolicy | None,
    budget: object,
    retry_codes: Collection[grpc.StatusCode],
    pushback_codes: Collection[grpc.StatusCode],
) -> Rules:
    if policy is None:
        policy = RetryPolicy()
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
    if budget is PER_CHANNEL:
        budget = policy.budget if policy.budget is not None else TokenBucket()
    elif budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a seawall.Budget, None or PER_CHANNEL, got {budget!r}")
    # Every status is classified here; the policy's retry_on is replaced by one that matches only
    # DEADLINE_EXCEEDED, so that the engine's deadline rule decides it, and a fatal status (not
    # matched) is an answer of the dependency for the budget.
    derived = policy.replace(
        retry_on=(StatusDeadlineExceeded,), retry_if_result=None, budget=budget
    )
    return Rules(
        derived,
        _codes("retry_codes", retry_codes),
        _codes("pushback_codes", pushback_codes),
    )


#: The default number of request messages kept for replay (``request_buffer``): a request
#: stream longer than this commits the call, as gRPC's retry buffer limit does (proposal A6).
DEFAULT_REQUEST_BUFFER: Final = 64


class RetryBase:
    def __init__(
        self,
        policy: RetryPolicy | None,
        budget: object,
        retry_codes: Collection[grpc.StatusCode],
        pushback_codes: Collection[grpc.StatusCode],
        request_buffer: int,
    ) -> None:
        self._rules = make_rules(policy, budget, retry_codes, pushback_codes)
        self._request_buffer = _validate.count("request_buffer", request_buffer)

    @property
    def policy(self) -> RetryPolicy:
        """The policy the interceptor drives (``retry_on`` replaced by the status rules)."""
        return self._rules.policy

    @property
    def budget(self) -> Budget | None:
        """The budget that throttles this channel's retries."""
        return self._rules.policy.budget
