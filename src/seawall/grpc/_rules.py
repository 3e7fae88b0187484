"""The gRPC rules: which statuses are retried, the server's pushback, and the settings every
retrying interceptor validates (policy, budget, codes, request buffer)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final, NamedTuple

import grpc

from seawall._core import validate as _validate
from seawall._core.clock import SYSTEM_CLOCK, Clock
from seawall._core.errors import DeadlineExceeded, Overloaded, add_note, permanent
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
    """What a retrying interceptor was configured with: the policy it drives and the statuses
    it retries."""

    policy: RetryPolicy
    retry_codes: frozenset[grpc.StatusCode]
    pushback_codes: frozenset[grpc.StatusCode]
    #: The policy's clock: its waits and its deadlines.
    clock: Clock

    def classify(
        self, code: grpc.StatusCode, trailing: object, committed: str | None
    ) -> tuple[Exception, bool | None]:
        """A failed attempt's status as the policy's :meth:`~seawall.lowlevel.RetryState.on_error`
        takes it: (the exception that stands for it, the ``retry`` verdict to pass, ``None`` for
        the policy's own ``retry_on``).

        *trailing* is the attempt's trailing metadata (its pushback is read here); *committed*
        says why the call cannot be replayed (gRPC A6: responses received, or a request stream
        no longer buffered): a status that would be retried is then a failure of the dependency
        that is not retried, with a note saying why.
        """
        pushback = parse_pushback(trailing)
        if pushback is REFUSE and (
            code in self.retry_codes or code in self.pushback_codes or code is DEADLINE_CODE
        ):
            # The server said "do not retry" a status that would be: a failure of the dependency,
            # never retried (a pushback on a fatal status changes nothing: gRPC proposal A6).
            return Overloaded(f"gRPC {code.name} with a pushback that forbids retries"), None
        wait = pushback if isinstance(pushback, float) else None
        if committed is not None and (
            code in self.retry_codes
            or code is DEADLINE_CODE
            or (code in self.pushback_codes and wait is not None)
        ):
            signal = StatusDeadlineExceeded() if code is DEADLINE_CODE else RetryableStatus(code)
            add_note(signal, f"seawall: gRPC {code.name} not retried: {committed}")
            return signal, False
        if code is DEADLINE_CODE:
            return StatusDeadlineExceeded(), None
        if code in self.retry_codes or (code in self.pushback_codes and wait is not None):
            return RetryableStatus(code, wait), True
        # A fatal status: the dependency answered (the budget's on_answer), never retried;
        # marked so, it is not reported as an error that retry_on failed to match.
        return permanent(RetryableStatus(code)), None


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
        derived.clock if derived.clock is not None else SYSTEM_CLOCK,
    )


#: Why a call is committed (gRPC proposal A6): its status is then the caller's, not retried.
RESPONSE_RECEIVED: Final = "a response message had been received (the call is committed)"
HEADERS_RECEIVED: Final = "the server had sent its response headers (the call is committed)"

#: The default number of request messages kept for replay (``request_buffer``): a request
#: stream longer than this commits the call, as gRPC's retry buffer limit does (proposal A6).
DEFAULT_REQUEST_BUFFER: Final = 64


class RetryBase:
    """What the sync and the ``grpc.aio`` retry interceptors share: their validated settings."""

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
