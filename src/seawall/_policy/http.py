"""HTTP retry rules shared by the httpx and requests integrations, free of any HTTP library.

What is safe to retry (methods, statuses, overload signals), Retry-After parsing, idempotency
keys, per-host budgets, and :class:`HttpCall`: the decisions for one logical HTTP request, driven
by a :class:`~seawall.RetryPolicy`'s sans-I/O :class:`~seawall.lowlevel.RetryState`. The
integrations only move bytes; every retry, wait and give-up is the policy's decision.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import email.utils
import math
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Final, NamedTuple, Protocol, TypeVar, runtime_checkable

from seawall._core import validate as _validate
from seawall._core.errors import _EXHAUSTED_MARK, Overloaded, add_note, is_exhausted, permanent
from seawall._core.public import public
from seawall._strategies.budget import Budget
from seawall._strategies.deadline import deadline_headers as encode_deadline_headers
from seawall._strategies.retry import RetryPolicy

R = TypeVar("R")


class RouteRules(Protocol):
    """What the HTTP rules read of a configured route (:class:`seawall.config.RouteConfig`)."""

    def http_rules(self) -> HttpRules: ...


@public("seawall.http")
@runtime_checkable
class LivePolicy(Protocol):
    """A policy that can change at runtime (:class:`seawall.config.PolicyHandle`): the HTTP
    layer reads ``policy`` and ``route`` on each request and rebuilds when either changed.

    Declared here so that this layer does not import the configuration layer above it.
    """

    @property
    def policy(self) -> RetryPolicy: ...

    @property
    def route(self) -> RouteRules | None: ...


__all__ = [
    "DEFAULT_RETRY_STATUSES",
    "DEFAULT_TOTAL_TIMEOUT",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENT_METHODS",
    "MIN_ATTEMPT_TIME",
    "OVERLOADED_HEADERS",
    "HttpCall",
    "HttpRules",
    "budget_for_host",
    "is_overloaded",
    "new_idempotency_key",
    "parse_retry_after",
]

# RFC 9110 section 9.2.2: methods whose intended effect of several identical requests is the same
# as of one. POST and PATCH are not; they are retried only with an Idempotency-Key.
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})

# Transient statuses: 408 Request Timeout, 429 Too Many Requests, 502/503/504 from gateways and
# overloaded servers (the same set as gRPC's UNAVAILABLE mapping and the AWS SDKs' retryable
# statuses). 500 and 501 are left out: they usually mean a bug, which a retry repeats.
DEFAULT_RETRY_STATUSES: Final = frozenset({408, 429, 502, 503, 504})

# "Overloaded; don't retry". Envoy sets x-envoy-overloaded when it sheds a request; seawall's own
# server middleware sets x-seawall-overloaded. Either one stops every retry above it.
OVERLOADED_HEADERS: Final = ("x-seawall-overloaded", "x-envoy-overloaded")

# IETF draft-ietf-httpapi-idempotency-key-header: the same key on every attempt of one request.
IDEMPOTENCY_KEY_HEADER: Final = "Idempotency-Key"

#: The least time an HTTP attempt may start with (seconds). With less left before the deadline,
#: the policy gives up before sending (``DeadlineExceeded``, or the last response), instead of
#: handing the HTTP library a timeout of zero, which urllib3 refuses (``ValueError``) and a
#: socket takes as "non-blocking" (``ConnectError: Operation now in progress``). It is also the
#: floor of every timeout given to the library.
MIN_ATTEMPT_TIME: Final = 1e-3

#: The total time of one logical request, attempts and waits included, when neither the policy
#: (``timeout``) nor the caller (:func:`seawall.deadline`) sets a deadline: without one, a server
#: that answers ``Retry-After`` or stalls each attempt just under the read timeout holds the
#: caller for as long as it likes. ``total_timeout=None`` on a transport turns it off. It is not
#: sent downstream: it is a limit of this client, not the caller's deadline.
DEFAULT_TOTAL_TIMEOUT: Final = 30.0

_DELTA_SECONDS = re.compile(r"[0-9]{1,32}(?:\.[0-9]{1,9})?")
_FALSE_VALUES = frozenset({"", "0", "false", "no", "off"})


def parse_retry_after(
    value: str | bytes | None, *, now: float | None = None, maximum: float = math.inf
) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    Both forms of RFC 9110 section 10.2.3 are understood: delay-seconds (``"120"``; a decimal
    fraction is tolerated) and an HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``; a date in the
    past means 0). The value is untrusted: garbage, negative numbers, NaN and dates beyond the
    calendar are ignored, and the result is clamped to *maximum*. Never raises.

    Args:
        value: the header value.
        now: the wall-clock time (:func:`time.time`) that an HTTP-date is measured from.
        maximum: the longest wait to return.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str) or len(value) > 64:
        return None
    value = value.strip()
    if not value:
        return None
    if _DELTA_SECONDS.fullmatch(value):
        seconds = float(value)  # at most 32 digits: finite, no OverflowError
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
            if when.tzinfo is None:  # RFC 9110 dates are always GMT
                when = when.replace(tzinfo=datetime.timezone.utc)
            at = when.timestamp()
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return None
        seconds = at - (time.time() if now is None else now)
        if not math.isfinite(seconds):
            return None
        seconds = max(0.0, seconds)
    return min(seconds, maximum)


def is_overloaded(headers: Mapping[str, str] | Callable[[str], str | None]) -> bool:
    """Whether a response carries the "overloaded; don't retry" signal (see OVERLOADED_HEADERS).

    Args:
        headers: a case-insensitive mapping, or a ``get(name) -> value`` function.
    """
    get = headers if callable(headers) else headers.get
    # Envoy's x-envoy-overloaded counts by its presence, whatever its value (as Envoy reads its
    # x-envoy-ratelimited); seawall's own header may say "false".
    if get("x-envoy-overloaded") is not None:
        return True
    value = get("x-seawall-overloaded")
    return value is not None and value.strip().lower() not in _FALSE_VALUES


def new_idempotency_key() -> str:
    """A fresh random key for the ``Idempotency-Key`` header (a UUID4 drawn from :mod:`secrets`)."""
    return str(uuid.UUID(bytes=secrets.token_bytes(16), version=4))


# -- one budget per host ------------------------------------------------------------------------

_HOST_BUDGETS: collections.OrderedDict[str, Budget] = collections.OrderedDict()
_HOST_BUDGETS_LOCK = threading.Lock()
# Bounded so that a process talking to ever-new hosts keeps bounded memory; the least recently
# used host loses its budget (it starts afresh, as a new process would).
_MAX_HOST_BUDGETS: Final = 1024


def budget_for_host(host: str, factory: Callable[[], Budget] | None = None) -> Budget:
    """The process-wide budget for *host* (``"scheme://host:port"``), created on first use.

    Every transport and adapter with the default ``budget`` shares it, so retries towards one
    host are bounded together, whichever client sends them.

    Args:
        host: the key, e.g. ``"https://api.example.com:443"``.
        factory: builds a new budget; ``seawall.RetryBudget()`` by default.
    """
    with _HOST_BUDGETS_LOCK:
        budget = _HOST_BUDGETS.get(host)
        if budget is not None:
            _HOST_BUDGETS.move_to_end(host)
            return budget
        if factory is None:
            from seawall._strategies.budget import RetryBudget

            budget = RetryBudget()
        else:
            budget = factory()
        _HOST_BUDGETS[host] = budget
        while len(_HOST_BUDGETS) > _MAX_HOST_BUDGETS:
            _HOST_BUDGETS.popitem(last=False)
        return budget


class _PerHost:
    """The default ``budget``: one :class:`~seawall.RetryBudget` per host, shared process-wide."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PER_HOST"


PER_HOST: Final = _PerHost()

# -- classification -------------------------------------------------------------------------------


class RetryableResponse(Exception):
    """Stands for a response with a retryable status while the policy decides.

    Never raised to the caller: when the policy gives up, the caller gets the response itself.
    """

    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        # Read by the policy (retry_after_of): server pushback replaces the backoff.
        self.retry_after = retry_after


@public("seawall.http")
@dataclasses.dataclass(frozen=True, slots=True)
class HttpRules:
    """What the HTTP integrations treat as retryable, and how (validated, frozen).

    Args:
        retry_statuses: response statuses worth retrying.
        idempotent_methods: methods retried without an Idempotency-Key.
        idempotency_key: add an ``Idempotency-Key`` (the same on every attempt) to requests whose
            method is not idempotent, so that they can be retried.
        deadline_headers: send the time left downstream (``grpc-timeout``, ``x-request-deadline``).
        buffer_limit: read response bodies of up to this many bytes (by ``Content-Length``)
            within the attempt, so that a connection reset mid-body is retried; 0 turns it off.
        total_timeout: seconds for a whole request, attempts and waits included, when no
            deadline is set (:data:`DEFAULT_TOTAL_TIMEOUT`); ``None``: no limit.
    """

    retry_statuses: Collection[int] = DEFAULT_RETRY_STATUSES
    idempotent_methods: Collection[str] = IDEMPOTENT_METHODS
    idempotency_key: bool = False
    deadline_headers: bool = True
    buffer_limit: int = 1 << 20
    total_timeout: float | None = DEFAULT_TOTAL_TIMEOUT

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if isinstance(self.retry_statuses, (str, bytes)) or not isinstance(
            self.retry_statuses, Collection
        ):
            raise TypeError(
                f"retry_statuses must be a collection of ints, got {self.retry_statuses!r}"
            )
        for s in self.retry_statuses:
            if isinstance(s, bool) or not isinstance(s, int) or not 100 <= s <= 599:
                raise ValueError(f"retry_statuses must hold HTTP statuses (100-599), got {s!r}")
        set_(self, "retry_statuses", frozenset(self.retry_statuses))
        if isinstance(self.idempotent_methods, (str, bytes)) or not isinstance(
            self.idempotent_methods, Collection
        ):
            raise TypeError(
                f"idempotent_methods must be a collection of str, got {self.idempotent_methods!r}"
            )
        for m in self.idempotent_methods:
            if not isinstance(m, str) or not m:
                raise ValueError(f"idempotent_methods must hold method names, got {m!r}")
        set_(self, "idempotent_methods", frozenset(m.upper() for m in self.idempotent_methods))
        for name in ("idempotency_key", "deadline_headers"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        _validate.count("buffer_limit", self.buffer_limit)
        set_(self, "total_timeout", _validate.optional_seconds("total_timeout", self.total_timeout))


def derive_policy(policy: RetryPolicy, budget: Budget | None) -> RetryPolicy:
    """The policy the transport drives: the caller's, classifying through the HTTP rules."""
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
    # retry_on=(): every decision comes from HttpCall through on_error(retry=True|False); an error
    # it leaves to the policy (retry=None) is one the HTTP rules do not retry.
    return policy.replace(
        retry_on=(),
        retry_if_result=None,
        budget=budget,
        min_attempt_time=max(policy.min_attempt_time, MIN_ATTEMPT_TIME),
    )


def check_budget(budget: object) -> Budget | _PerHost | None:
    if budget is None or budget is PER_HOST or isinstance(budget, Budget):
        return budget
    raise TypeError(f"budget must be a seawall.Budget, None or PER_HOST, got {budget!r}")


class PolicyCache:
    """The derived policy for each host (the budget differs per host), bounded in size."""

    __slots__ = ("_budget", "_by_host", "_lock", "_policy", "_single")

    def __init__(self, policy: RetryPolicy, budget: object) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
        budget = check_budget(budget)
        self._policy = policy
        self._budget = budget
        self._lock = threading.Lock()
        self._by_host: dict[str, RetryPolicy] = {}
        self._single: RetryPolicy | None = None
        if budget is PER_HOST and policy.budget is not None:
            budget = policy.budget  # the policy brought its own budget: use it everywhere
        if budget is not PER_HOST:
            self._single = derive_policy(policy, budget)  # type: ignore[arg-type]
        else:
            derive_policy(policy, None)  # validate now, not on the first request

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    def for_host(self, host: str) -> RetryPolicy:
        if self._single is not None:
            return self._single
        derived = self._by_host.get(host)
        if derived is None:
            with self._lock:
                if len(self._by_host) >= _MAX_HOST_BUDGETS:
                    self._by_host.clear()
                derived = derive_policy(self._policy, budget_for_host(host))
                self._by_host[host] = derived
        return derived


class Policies:
    """What a transport retries with now: a fixed policy, or the current one of a PolicyHandle.

    With a :class:`~seawall.config.PolicyHandle`, a reload of its registry changes the live
    transport:
    the next request uses the new policy (attempts, backoff, timeouts, budget) and, unless
    *retry_statuses* were given, the route's statuses.

    Args:
        policy: a :class:`~seawall.RetryPolicy`, a :class:`~seawall.config.PolicyHandle` or ``None``
            (``RetryPolicy()``).
        budget: ``PER_HOST``, a :class:`~seawall.Budget` or ``None`` (see the transports).
        retry_statuses: the statuses to retry; ``None``: the route's (when the handle's route
            names any), else :data:`DEFAULT_RETRY_STATUSES`.
        **rules: the other :class:`HttpRules` fields.
    """

    __slots__ = ("_budget", "_handle", "_rules", "_state", "_statuses")

    def __init__(
        self,
        policy: object,
        budget: object,
        retry_statuses: Collection[int] | None,
        **rules: object,
    ) -> None:
        if policy is None:
            policy = RetryPolicy()
        if isinstance(policy, RetryPolicy):
            self._handle: LivePolicy | None = None
        elif isinstance(policy, LivePolicy):
            self._handle = policy
        else:
            raise TypeError(
                "policy must be a seawall.RetryPolicy or a seawall.config.PolicyHandle, "
                f"got {policy!r}"
            )
        self._budget = check_budget(budget)
        self._rules = rules
        self._statuses = retry_statuses
        handle = self._handle
        if handle is None:
            assert isinstance(policy, RetryPolicy)
            self._state = self._build(policy, None)
        else:
            self._state = self._build(handle.policy, handle.route)

    def _build(self, policy: RetryPolicy, route: RouteRules | None) -> _Live:
        statuses = self._statuses
        if statuses is None:
            statuses = (
                DEFAULT_RETRY_STATUSES if route is None else route.http_rules().retry_statuses
            )
        rules = HttpRules(retry_statuses=statuses, **self._rules)  # type: ignore[arg-type]
        return _Live(policy, route, PolicyCache(policy, self._budget), rules)

    def current(self) -> tuple[PolicyCache, HttpRules]:
        """The derived policies and the rules for a request starting now."""
        state = self._state
        handle = self._handle
        if handle is not None and (
            handle.policy is not state.policy or handle.route is not state.route
        ):
            # The registry reloaded: rebuild once (two threads may both rebuild; the results are
            # equal and either one is kept).
            state = self._state = self._build(handle.policy, handle.route)
        return state.cache, state.rules

    @property
    def policy(self) -> RetryPolicy:
        """The policy in use now."""
        return self._handle.policy if self._handle is not None else self._state.policy

    @property
    def handle(self) -> LivePolicy | None:
        """The handle followed, if any."""
        return self._handle

    @property
    def rules(self) -> HttpRules:
        return self.current()[1]

    def start(
        self, method: str, headers: MutableMapping[str, str], host: str, *, replayable: bool
    ) -> HttpCall:
        """The decisions for one request starting now (to *host*, ``scheme://netloc``).

        With ``idempotency_key``, a request whose method is not idempotent gets an
        ``Idempotency-Key`` in *headers* (the caller's request: every attempt sends it).
        """
        cache, rules = self.current()
        method = method.upper()
        if (
            rules.idempotency_key
            and method not in rules.idempotent_methods
            and IDEMPOTENCY_KEY_HEADER not in headers
        ):
            headers[IDEMPOTENCY_KEY_HEADER] = new_idempotency_key()
        return HttpCall(
            cache.for_host(origin(host)),
            rules,
            method,
            has_key=IDEMPOTENCY_KEY_HEADER in headers,
            replayable=replayable,
        )


def exception_classes(retry_on: object) -> tuple[type[Exception], ...]:
    """*retry_on* (a class or a tuple of classes) as a tuple of exception classes."""
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    if not isinstance(retry_on, tuple) or not all(
        isinstance(c, type) and issubclass(c, Exception) for c in retry_on
    ):
        raise TypeError(f"retry_on must be exception classes, got {retry_on!r}")
    return retry_on


_DEFAULT_PORTS = {"http": "80", "https": "443"}


def origin(host: str) -> str:
    """``scheme://host[:port]`` in one spelling per server, the key of the per-host budgets.

    Lower case, without user info, without the scheme's default port: ``HTTPS://u@Api:443`` and
    ``https://api`` share one budget.
    """
    scheme, sep, rest = host.partition("://")
    if not sep:
        return host.lower()
    scheme = scheme.lower()
    netloc = rest.rsplit("@", 1)[-1].lower()
    name, colon, port = netloc.rpartition(":")
    if colon and "]" not in port and port == _DEFAULT_PORTS.get(scheme):
        netloc = name
    return f"{scheme}://{netloc}"


def read_within_attempt(content_length: str | None, limit: int) -> bool:
    """Whether to read a body within the attempt, so that a reset mid-body is retried.

    Only a body whose ``Content-Length`` declares at most *limit* bytes is (0 turns it off).
    """
    length = content_length
    # isascii(): str.isdigit() accepts digits such as "²" that int() refuses (untrusted header).
    # The length check first: int() refuses more than 4,300 digits (ValueError), and a value of
    # more than 19 digits is beyond any limit anyway.
    return (
        bool(limit)
        and length is not None
        and len(length) <= _MAX_LENGTH_DIGITS
        and length.isascii()
        and length.isdigit()
        and int(length) <= limit
    )


_MAX_LENGTH_DIGITS: Final = 19  # 2**63 - 1 has 19 digits


class _Live(NamedTuple):
    policy: RetryPolicy
    route: RouteRules | None
    cache: PolicyCache
    rules: HttpRules


_NOT_IDEMPOTENT_NOTE = (
    "seawall: not retried: {method} is not idempotent and the request has no Idempotency-Key "
    "header; send one (or configure idempotency_key=True) to make it retryable"
)
_NOT_REPLAYABLE_NOTE = (
    "seawall: not retried: the request body is a stream that the first attempt consumed and "
    "that cannot be replayed; send bytes (or read the body first) to make it retryable"
)


class HttpCall:
    """The retry decisions for one logical HTTP request, over the policy's :class:`RetryState`.

    A driver calls :meth:`begin_attempt`, sends the request with :meth:`timeout` and
    :meth:`deadline_headers`, then reports the outcome with :meth:`on_response` or
    :meth:`on_error`; each returns the wait before the next attempt, or ``None``: return that
    response / raise that error.

    Args:
        policy: the derived policy (see :class:`PolicyCache`).
        rules: the HTTP rules.
        method: the request method.
        has_key: the request carries an ``Idempotency-Key``.
        replayable: the request body can be sent again.
    """

    __slots__ = (
        "_implicit",
        "attempt_deadline",
        "clock",
        "exhausted",
        "method",
        "replayable",
        "rules",
        "safe",
        "state",
    )

    def __init__(
        self, policy: RetryPolicy, rules: HttpRules, method: str, has_key: bool, replayable: bool
    ) -> None:
        self.rules = rules
        self.method = method.upper()
        self.safe = has_key or self.method in rules.idempotent_methods
        self.replayable = replayable
        self.clock = policy._clock
        now = self.clock.now()
        state = self.state = policy.new_state(now)
        self.attempt_deadline = math.inf
        #: The last response was given up on after retries (or said "overloaded"): see
        #: :meth:`mark_answer`.
        self.exhausted = False
        # The default total time, when nobody set a deadline (not sent downstream).
        self._implicit = math.inf
        if state.deadline == math.inf and rules.total_timeout is not None:
            state.deadline = self._implicit = now + rules.total_timeout

    def begin_attempt(self) -> float:
        """Count an attempt; return the seconds it may take (``inf`` for no limit).

        Raises:
            DeadlineExceeded: too little time is left to start it.
        """
        now = self.clock.now()
        self.attempt_deadline = self.state.begin_attempt(now)
        return self.attempt_deadline - now

    def timeout(self, configured: float | None) -> float | None:
        """min(configured, time left for this attempt); ``None`` for no limit.

        Never below :data:`MIN_ATTEMPT_TIME` (nor above ``MAX_SECONDS``): the attempt started
        with at least that much left, and a thread switch since must not turn the time left
        into a zero or negative timeout, which HTTP libraries refuse or misread.
        """
        left = self.attempt_deadline - self.clock.now()
        if configured is None and left == math.inf:
            return None
        left = min(max(left, MIN_ATTEMPT_TIME), _validate.MAX_SECONDS)
        return left if configured is None else min(configured, left)

    @property
    def bounded_by_caller(self) -> bool:
        """Whether this attempt's deadline is the caller's or the policy's, not only the
        transport's default total time (which bounds getting a response, not reading a body
        the caller streams, and is not sent downstream)."""
        return self.attempt_deadline < self._implicit

    def deadline_headers(self) -> dict[str, str]:
        """The headers that tell the next hop how long it has (empty without a deadline)."""
        if not self.rules.deadline_headers or not self.bounded_by_caller:
            return {}
        # grpc-timeout and x-request-deadline, less the transit margin (see propagation).
        return encode_deadline_headers(self.attempt_deadline - self.clock.now())

    def on_response(self, status: int, get_header: Callable[[str], str | None]) -> float | None:
        """Classify a response: the wait before retrying, or ``None`` to return it.

        When it returns ``None`` for a response that no layer above should retry (the policy
        retried it and gave up, or the server said "overloaded; don't retry"), the driver marks
        the response with :meth:`mark_answer` before returning it.
        """
        now = self.clock.now()
        state = self.state
        if is_overloaded(get_header):
            # The policy counts it as a failure for the budget and never retries it.
            state.on_error(Overloaded("the server answered overloaded; don't retry"), now)
            self.exhausted = True
            return None
        if status not in self.rules.retry_statuses:
            state.on_success(now)  # the dependency answered, even with a 404
            return None
        signal = RetryableResponse(
            status,
            parse_retry_after(get_header("retry-after"), maximum=state.policy.max_retry_after),
        )
        # A transient status is a failure of the dependency whether or not this request may be
        # sent again: retry=False still counts it against the budget, it only forbids the retry.
        delay = state.on_error(signal, now, retry=self.safe and self.replayable)
        if delay is None:
            self.exhausted = is_exhausted(signal)  # retried and given up (attempts, deadline...)
        return delay

    def mark_answer(self, response: R) -> R:
        """Mark *response* as given up on, if it was, and return it.

        ``raise_for_status()`` above then raises an error whose ``response`` carries the mark,
        and no enclosing policy retries it: an outer ``@retry`` on ``HTTPStatusError`` around
        this transport makes no more requests than the transport did (retry at one layer).
        """
        if self.exhausted:
            with contextlib.suppress(AttributeError):  # a response class with __slots__
                setattr(response, _EXHAUSTED_MARK, True)
        return response

    def on_error(self, error: Exception, never_sent: bool, retryable: bool) -> float | None:
        """Classify a transport error: the wait before retrying, or ``None`` to raise it.

        Args:
            error: what the attempt raised.
            never_sent: the request never left (failed to connect): safe for every method.
            retryable: the transport error is of a retryable kind (timeouts, resets, ...).
        """
        now = self.clock.now()
        if not retryable:
            # Not a transient kind (TLS, proxy, local protocol errors): the policy, whose
            # retry_on matches nothing, gives up and counts no failure of the dependency.
            return self.state.on_error(error, now)
        note = None
        if not never_sent:
            if not self.safe:
                note = _NOT_IDEMPOTENT_NOTE.format(method=self.method)
            elif not self.replayable:
                note = _NOT_REPLAYABLE_NOTE
        # A reset or a timeout is a failure of the dependency even when this request must not
        # be sent again: retry=False counts it for the budget without retrying.
        delay = self.state.on_error(error, now, retry=note is None)
        if delay is None and note is not None:
            add_note(error, note)
            # The request may have been processed: no layer above may send it again either.
            with contextlib.suppress(TypeError):  # an exception that refuses attributes
                permanent(error)
        return delay
