"""HTTP retry rules shared by the httpx and requests integrations, free of any HTTP library.

What is safe to retry (methods, statuses, overload signals), Retry-After parsing, idempotency
keys, per-host budgets, and :class:`HttpCall`: the decisions for one logical HTTP request, driven
by a :class:`~seawall.RetryPolicy`'s sans-I/O :class:`~seawall.lowlevel.RetryState`. The
integrations only move bytes; every retry, wait and give-up is the policy's decision.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import datetime
import email.utils
import linecache
import math
import operator
import re
import secrets
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, MutableMapping
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    NamedTuple,
    Protocol,
    TypedDict,
    TypeVar,
    runtime_checkable,
)

from seawall._core import validate as _validate
from seawall._core.classify import is_refused_stream
from seawall._core.errors import (
    _EXHAUSTED_MARK,
    DeadlineExceeded,
    Overloaded,
    add_note,
    is_exhausted,
    is_permanent,
    permanent,
)
from seawall._core.public import public
from seawall._strategies.budget import Budget
from seawall._strategies.deadline import SCOPES
from seawall._strategies.deadline import current_deadline as _ambient_deadline
from seawall._strategies.deadline import deadline_headers as encode_deadline_headers
from seawall._strategies.retry import RetryPolicy, RetryState

R = TypeVar("R")


class RouteRules(Protocol):
    """What the HTTP rules read of a configured route (:class:`seawall.config.RouteConfig`)."""

    def http_rules(self) -> HttpRules: ...

    @property
    def retry_errors(
        self,
    ) -> tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None: ...


#: What decides which transport errors are retried: exception classes (a request that never
#: left is retried as well: it cannot be duplicated), or a route's conditions (``retry_on =
#: "connect-failure"``, ``"reset"``, ...: they alone decide).
RetryOnErrors = tuple[type[Exception], ...] | Callable[[BaseException], bool]


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
    "EXTENSION_KEY",
    "HISTORY_ATTRIBUTE",
    "HISTORY_KEY",
    "IDEMPOTENCY_KEY_HEADER",
    "IDEMPOTENT_METHODS",
    "MIN_ATTEMPT_TIME",
    "OPTION_NAMES",
    "OVERLOADED_HEADERS",
    "FirstAttempt",
    "HttpAttempt",
    "HttpCall",
    "HttpOptions",
    "HttpRules",
    "Wire",
    "adrive",
    "adrive_from",
    "budget_for_host",
    "drive",
    "drive_from",
    "is_overloaded",
    "new_idempotency_key",
    "override",
    "parse_retry_after",
    "within",
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

_ANSWERS: Final = frozenset(range(100, 400))
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
        # Read by the policy (retry_after_of): it waits the larger of this and its backoff.
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
    #: The usual statuses of an answer returned as it is: 100-399, less *retry_statuses*. A
    #: response with one of them needs nothing read but its status (see
    #: :meth:`HttpCall.on_response`, whose first branch takes them and the rarer rest).
    answers: frozenset[int] = dataclasses.field(init=False, repr=False, compare=False)
    #: The history of a first attempt answered with each of *answers* (``first_try(status)``),
    #: by status: the first-attempt path (:class:`FirstAttempt`) looks its answer up once.
    first_histories: Mapping[int, History] = dataclasses.field(
        init=False, repr=False, compare=False
    )

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
        set_(self, "answers", _ANSWERS.difference(self.retry_statuses))
        set_(self, "first_histories", {status: first_try(status) for status in self.answers})
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
    # it leaves to the policy (retry=None) is one the HTTP rules do not retry. retry_if_result is
    # applied by HttpCall to the response (see PolicyCache.predicate), not by the state.
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
    """The derived policy for each host (the budget differs per host), bounded in size.

    Hosts are looked up by the key the integration gives (its own spelling of scheme and
    authority); :func:`origin` normalises a key only the first time it is seen.
    """

    __slots__ = ("_budget", "_by_host", "_lock", "_policy", "_single", "predicate")

    def __init__(self, policy: RetryPolicy, budget: object) -> None:
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"policy must be a seawall.RetryPolicy, got {policy!r}")
        budget = check_budget(budget)
        self._policy = policy
        self._budget = budget
        self._lock = threading.Lock()
        self._by_host: dict[HostKey, RetryPolicy] = {}
        self._single: RetryPolicy | None = None
        #: The policy's ``retry_if_result``, applied to responses (``None``: none).
        self.predicate = policy.retry_if_result
        if budget is PER_HOST and policy.budget is not None:
            budget = policy.budget  # the policy brought its own budget: use it everywhere
        if budget is not PER_HOST:
            self._single = derive_policy(policy, budget)  # type: ignore[arg-type]
        else:
            derive_policy(policy, None)  # validate now, not on the first request

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    def for_host(self, host: HostKey) -> RetryPolicy:
        if self._single is not None:
            return self._single
        derived = self._by_host.get(host)
        if derived is None:
            with self._lock:
                if len(self._by_host) >= _MAX_HOST_BUDGETS:
                    self._by_host.clear()
                key = origin(host)
                derived = derive_policy(self._policy, budget_for_host(key))
                if derived.name is None:
                    # Logs and notes say which host's budget refused a retry, or gave up.
                    derived = derived.replace(name=key)
                self._by_host[host] = derived
        return derived


@public("seawall.http")
class HttpOptions(TypedDict, total=False):
    """The keyword arguments every seawall HTTP integration takes (all optional).

    Attributes:
        budget: ``PER_HOST`` (default): one :class:`~seawall.RetryBudget` per host, shared by
            every seawall HTTP client in the process, unless the policy has its own budget; a
            :class:`~seawall.Budget` for every host; or ``None`` for no budget.
        retry_statuses: statuses worth retrying (by default 408, 429, 502, 503, 504, or those
            a :class:`~seawall.config.PolicyHandle`'s route names in its ``retry_on``).
        retry_on: the client library's exception classes worth retrying (its
            ``DEFAULT_RETRY_EXCEPTIONS`` by default; with a
            :class:`~seawall.config.PolicyHandle` whose route names error conditions in its
            ``retry_on``, such as ``connect-failure`` or ``reset``, those conditions).
        idempotent_methods: methods retried without an ``Idempotency-Key``.
        idempotency_key: add an ``Idempotency-Key`` to non-idempotent requests (generated once
            per request, the same on every attempt) so that they can be retried.
        deadline_headers: send the time left downstream (``grpc-timeout``,
            ``x-request-deadline``).
        buffer_limit: read bodies declared (``Content-Length``) up to this many bytes within
            the attempt, so that a reset mid-body is retried (0: never).
        total_timeout: seconds for the whole request, attempts and waits included, when
            neither the policy's ``timeout`` nor an ambient :func:`seawall.deadline` sets one
            (30 s by default; ``None``: no limit). It bounds each attempt but is not sent
            downstream.
    """

    budget: Budget | _PerHost | None
    retry_statuses: Collection[int] | None
    retry_on: tuple[type[Exception], ...]
    idempotent_methods: Collection[str]
    idempotency_key: bool
    deadline_headers: bool
    buffer_limit: int
    total_timeout: float | None


#: The names of :class:`HttpOptions`.
OPTION_NAMES: Final = frozenset(HttpOptions.__annotations__)

Resp = TypeVar("Resp")


@public("seawall.http")
class HttpAttempt(NamedTuple):
    """One attempt of an HTTP request, in the history its response or error carries.

    ``response.extensions["seawall.history"]`` with httpx, ``response.seawall_history`` with
    requests and aiohttp, and ``error.seawall_history`` on the error a request raised: a tuple
    of these, the first attempt first (as urllib3's ``Retry.history``).

    Attributes:
        status: the response's status, or ``None`` when the attempt raised.
        error: the attempt's exception, or ``None`` when it was answered.
        wait: seconds waited after it (``None``: the call ended with it).
    """

    status: int | None
    error: BaseException | None
    wait: float | None


#: Where an httpx response carries its history (``response.extensions[HISTORY_KEY]``).
HISTORY_KEY: Final = "seawall.history"
#: The attribute of a requests or aiohttp response (and of an error) holding its history.
HISTORY_ATTRIBUTE: Final = "seawall_history"
#: The httpx request extension that overrides the policy for one request.
EXTENSION_KEY: Final = "seawall"

History = tuple[HttpAttempt, ...]
FIRST_TRY: dict[int, History] = {}  # the history of a response to a first attempt, by status


def first_try(status: int) -> History:
    """The history of a request answered *status* at the first attempt (shared, immutable)."""
    history = FIRST_TRY.get(status)
    if history is None:
        history = (HttpAttempt(status, None, None),)
        if len(FIRST_TRY) < 1024:  # statuses are untrusted numbers: keep the table bounded
            FIRST_TRY[status] = history
    return history


def settle(after: Callable[[], None], close: Callable[[], object]) -> None:
    """Tell the budget of a first attempt answered with a status returned as it is (*after*,
    the callable of its ``first_attempt()`` capability); if that raises, the response is
    released (*close*) before the error goes on."""
    try:
        after()
    except BaseException:
        close()
        raise


class Wire(Generic[Resp]):
    """How the HTTP decisions read one client library's responses and errors.

    The defaults fit a response with ``status_code``, ``headers.get`` and attributes; an
    integration overrides what differs.

    Args:
        never_sent: errors raised before the request left (safe to retry for every method).
        never_retried: errors never retried, whatever ``retry_on`` says (TLS, proxies).
        status_attribute: the response's attribute holding its status code.
    """

    __slots__ = ("never_retried", "never_sent", "status")

    def __init__(
        self,
        never_sent: tuple[type[Exception], ...] = (),
        never_retried: tuple[type[Exception], ...] = (),
        status_attribute: str = "status_code",
    ) -> None:
        self.never_sent = never_sent
        self.never_retried = never_retried
        #: The response's status code (an attribute getter: no Python frame per response).
        self.status: Callable[[Any], int] = operator.attrgetter(status_attribute)

    def headers(self, response: Any) -> Callable[[str], str | None]:
        """A case-insensitive ``get(name)`` of the response's headers."""
        get: Callable[[str], str | None] = response.headers.get
        return get

    def classify(self, error: Exception, retry_on: RetryOnErrors) -> tuple[bool, bool]:
        """(a retryable kind of error, the request never left)."""
        if isinstance(error, self.never_retried):
            return False, False
        # An HTTP/2 REFUSED_STREAM: sent, but the server promises it processed none of it.
        never_sent = isinstance(error, self.never_sent) or is_refused_stream(error)
        return retryable_error(error, retry_on, never_sent), never_sent

    def view(self, response: Any) -> Any:
        """What ``retry_if_result`` is given for *response* (the response itself)."""
        return response

    def attach(self, response: Any, history: History) -> None:
        """Give *response* its history (as the attribute ``seawall_history``)."""
        setattr(response, HISTORY_ATTRIBUTE, history)


def retryable_error(error: Exception, retry_on: RetryOnErrors, never_sent: bool) -> bool:
    """Whether *retry_on* retries *error* (one that is not never retried)."""
    if type(retry_on) is tuple:
        return never_sent or isinstance(error, retry_on)
    return bool(retry_on(error))  # type: ignore[operator]


def route_errors(route: RouteRules | None) -> Callable[[BaseException], bool] | None:
    """The route's ``retry_on`` error conditions as one predicate (``None``: not given)."""
    errors = None if route is None else route.retry_errors
    if errors is None or callable(errors):
        return errors
    classes = errors

    def named(error: BaseException) -> bool:
        return isinstance(error, classes)

    return named


# -- per-request overrides ----------------------------------------------------------------------

_OVERRIDE: contextvars.ContextVar[object] = contextvars.ContextVar("seawall_http_override")
_NO_OVERRIDE: Final = object()


class _Overrides:
    """Whether an :func:`override` block has ever been entered in this process. Until then
    the first-attempt path (:meth:`Policies.first`) skips reading the variable, as it skips
    the ambient deadline until one is set (:data:`~seawall._strategies.deadline.SCOPES`). Set
    once, never reset."""

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = False


OVERRIDES: Final = _Overrides()
_POLICY_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(RetryPolicy) if f.init) | {
    "retries"
}


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
    changes = _changes(changes)
    if policy is not None:
        value: object = policy.replace(**changes) if changes else policy
    else:
        RetryPolicy().replace(**changes)  # validate the values now, not on the first request
        value = changes
    OVERRIDES.used = True
    token = _OVERRIDE.set(value)
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _changes(changes: Mapping[Any, Any]) -> dict[str, Any]:
    """*changes* as ``RetryPolicy.replace`` arguments; ``retries`` becomes ``max_attempts``."""
    out: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in _POLICY_FIELDS:
            raise TypeError(
                f"unknown seawall override {key!r}: a RetryPolicy field or 'retries' expected"
            )
        if key == "retries":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"retries must be an int >= 0, got {value!r}")
            key, value = "max_attempts", value + 1
        out[key] = value
    return out


def current_override() -> object:
    """The override of the enclosing :func:`override` block, or ``None``."""
    return _OVERRIDE.get(None)


class Policies:
    """What a transport retries with now: a fixed policy, or the current one of a PolicyHandle.

    With a :class:`~seawall.config.PolicyHandle`, a reload of its registry changes the live
    transport: the next request uses the new policy (attempts, backoff, timeouts, budget) and,
    unless *retry_statuses* were given, the route's statuses.

    Args:
        policy: a :class:`~seawall.RetryPolicy`, a :class:`~seawall.config.PolicyHandle` or
            ``None`` (``RetryPolicy()``).
        options: the integration's :class:`HttpOptions`.
        wire: how the integration's responses and errors are read.
        retry_on: the integration's default ``retry_on``.
    """

    __slots__ = (
        "_budget",
        "_explicit",
        "_handle",
        "_overrides",
        "_retry_on",
        "_rules",
        "_state",
        "_statuses",
        "ready",
        "wire",
    )

    def __init__(
        self,
        policy: object,
        options: Mapping[str, Any],
        wire: Wire[Any],
        retry_on: tuple[type[Exception], ...],
    ) -> None:
        for name in options:
            if name not in OPTION_NAMES:
                raise TypeError(f"unexpected keyword argument {name!r}")
        rules = dict(options)
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
        self._budget = check_budget(rules.pop("budget", PER_HOST))
        self._statuses = rules.pop("retry_statuses", None)
        # Given retry_on wins over a route's conditions; the integration's default does not.
        self._explicit = "retry_on" in rules
        self._retry_on = exception_classes(rules.pop("retry_on", retry_on))
        self.wire = wire
        self._rules = rules
        self._overrides: dict[object, PolicyCache] = {}
        handle = self._handle
        if handle is None:
            assert isinstance(policy, RetryPolicy)
            self._state = self._build(policy, None)
        else:
            self._state = self._build(handle.policy, handle.route)
        #: The first-attempt records by host (see :meth:`first`) when no handle is followed (a
        #: reload would replace them), else ``None``.
        self.ready = self._state.firsts if handle is None else None

    def _build(self, policy: RetryPolicy, route: RouteRules | None) -> _Live:
        statuses = self._statuses
        if statuses is None:
            statuses = (
                DEFAULT_RETRY_STATUSES if route is None else route.http_rules().retry_statuses
            )
        rules = HttpRules(retry_statuses=statuses, **self._rules)
        retry_on: RetryOnErrors = self._retry_on
        if not self._explicit:
            retry_on = route_errors(route) or retry_on
        cache = PolicyCache(policy, self._budget)
        # The derived policies of every host differ in their budget only: one tells for all.
        derived = cache._single or derive_policy(policy, None)
        stateless = cache.predicate is None and stateless_first(derived, rules)
        return _Live(policy, route, cache, rules, retry_on, {} if stateless else None)

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
            self._overrides = {}
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
    def retry_on(self) -> RetryOnErrors:
        """What decides which transport errors are retried now."""
        self.current()
        return self._state.retry_on

    @property
    def budget(self) -> Budget | _PerHost | None:
        """The ``budget`` option."""
        return self._budget

    @property
    def rules(self) -> HttpRules:
        return self.current()[1]

    def _overridden(self, cache: PolicyCache, value: object) -> PolicyCache:
        """The policies for a request whose policy is overridden by *value* (cached: the same
        override on every request derives its policies once)."""
        key: object
        if isinstance(value, RetryPolicy):
            key = value
        elif isinstance(value, Mapping):
            value = _changes(value)
            key = (cache, tuple(sorted(value.items())))
        else:
            raise TypeError(
                "the seawall override must be a seawall.RetryPolicy or a dict of its fields, "
                f"got {value!r}"
            )
        try:
            found = self._overrides.get(key)
        except TypeError:  # an unhashable value: derived for this request only
            key, found = None, None
        if found is None:
            policy = value if isinstance(value, RetryPolicy) else cache.policy.replace(**value)
            found = PolicyCache(policy, self._budget)
            if key is not None:
                if len(self._overrides) >= 64:
                    self._overrides = {}  # bounded: overrides built per request stay few
                self._overrides[key] = found
        return found

    def start(
        self,
        method: str,
        headers: MutableMapping[str, str],
        host: HostKey,
        *,
        replayable: bool,
        override: object = None,
    ) -> HttpCall[Any]:
        """The decisions for one request starting now (to *host*, ``scheme://netloc``).

        With ``idempotency_key``, a request whose method is not idempotent gets an
        ``Idempotency-Key`` in *headers* (the caller's request: every attempt sends it).

        Args:
            method: the request method.
            headers: the request's headers.
            host: ``scheme://netloc`` or ``(scheme, host, port)`` (the per-host budget's key,
                see :func:`origin`).
            replayable: the body can be sent again.
            override: the request's own override (a policy or a dict of changes), if any;
                else that of an enclosing :func:`override` block applies.
        """
        live = self._state
        if self._handle is not None:
            self.current()
            live = self._state
        cache, rules = live.cache, live.rules
        if override is None:
            override = _OVERRIDE.get(None)
        if override is not None:
            cache = self._overridden(cache, override)
        method, has_key = _keyed(rules, method, headers)
        return HttpCall(
            cache._single or cache._by_host.get(host) or cache.for_host(host),
            rules,
            method,
            has_key,
            replayable,
            self.wire,
            live.retry_on,
            cache.predicate,
        )

    def first(self, method: str, host: HostKey, override: object = None) -> FirstAttempt | None:
        """What a request starting now needs for a first attempt made without an
        :class:`HttpCall`, or ``None``: it takes :meth:`start`'s path.

        The integration then reads the clock (``now``), calls ``before`` (the budget's
        deposit, if any), sends the request as the caller built it, and returns a response
        whose status has a history in ``answers`` after calling ``after`` (if any), with that
        history (``first_try(status)``): all that :meth:`start`, :func:`drive` and
        :class:`HttpCall` do for such an answer. Any other outcome (an error, another
        status), or a request that cannot go as it is, goes on through :meth:`resume`
        (nothing is done twice).

        ``None`` unless the policy's first attempt needs no :class:`RetryState` (see
        :func:`stateless_first`) and the policy has no ``retry_if_result``; no override
        applies (the request's *override*, an :func:`override` block); no ambient deadline
        is set; and no ``Idempotency-Key`` is due.

        An integration may skip the call when it would only look the record up: while
        :attr:`ready` is a dict, no override block nor ambient deadline has been used in the
        process (``OVERRIDES.used``, ``SCOPES.used``), the request has no *override*, and
        ``ready`` holds a record for *host* whose ``keyed`` (its field 6) is ``None``, that
        record is what this returns.
        """
        if self._handle is not None:
            self.current()
        live = self._state
        firsts = live.firsts
        if (
            firsts is None
            or override is not None
            or (OVERRIDES.used and _OVERRIDE.get(None) is not None)
            or (SCOPES.used and _ambient_deadline() is not None)
        ):
            return None
        found = firsts.get(host)
        if found is None:
            found = self._first_for(live, firsts, host)
        keyed = found[6]
        if keyed is not None and method not in keyed:
            return None  # an Idempotency-Key is due (see start())
        return found

    @staticmethod
    def _first_for(live: _Live, firsts: dict[HostKey, FirstAttempt], host: HostKey) -> FirstAttempt:
        """The first-attempt record of *host* under *live*, built and kept."""
        cache, rules = live.cache, live.rules
        policy = cache._single or cache.for_host(host)
        found: FirstAttempt = (
            policy._now,
            policy._before,
            policy._after,
            rules.first_histories,
            rules.total_timeout,
            rules.buffer_limit,
            frozenset(rules.idempotent_methods) if rules.idempotency_key else None,
            policy,
            rules,
            live.retry_on,
        )
        if len(firsts) >= _MAX_HOST_BUDGETS:
            firsts.clear()  # bounded, as the per-host policies are
        firsts[host] = found
        return found

    def resume(
        self,
        first: FirstAttempt,
        method: str,
        headers: MutableMapping[str, str],
        *,
        replayable: bool,
        started: float,
    ) -> HttpCall[Any]:
        """The decisions for a request whose first attempt :meth:`first` allowed, and which
        started at *started* (``first.now()``, the budget's deposit made): the
        :class:`HttpCall` that :meth:`start` would have built then. Drive it with
        :func:`drive_from` (the first attempt's outcome in hand) or, when nothing was sent
        yet, :func:`drive`."""
        policy, rules, retry_on = first[7:]
        method, has_key = _keyed(rules, method, headers)
        return HttpCall(
            policy, rules, method, has_key, replayable, self.wire, retry_on, None, first=started
        )


def _keyed(rules: HttpRules, method: str, headers: MutableMapping[str, str]) -> tuple[str, bool]:
    """The method in upper case, and whether the request carries an ``Idempotency-Key`` (added
    to *headers* when the rules want one and the method is not idempotent)."""
    if method in rules.idempotent_methods:
        return method, False  # an idempotent method needs no key to be safe
    method = method.upper()
    if (
        rules.idempotency_key
        and method not in rules.idempotent_methods
        and IDEMPOTENCY_KEY_HEADER not in headers
    ):
        headers[IDEMPOTENCY_KEY_HEADER] = new_idempotency_key()
    return method, IDEMPOTENCY_KEY_HEADER in headers


#: What an integration's first-attempt path needs (see :meth:`Policies.first`), built once per
#: host and policy: ``(now, before, after, answers, total, buffer_limit, keyed, policy, rules,
#: retry_on)``. The policy's clock reading, the budget's first-attempt callables, the history of
#: each status returned as it is, the total time, the buffer limit (these six first: an
#: integration unpacks the record in one step, where six attribute reads cost more), the
#: methods that need no ``Idempotency-Key`` when one is due for the others, and what
#: :meth:`Policies.resume` hands on. A plain tuple: Python unpacks a tuple subclass (a
#: ``NamedTuple``) through an iterator, at twice the cost.
FirstAttempt = tuple[
    "Callable[[], float]",
    "Callable[[], None] | None",
    "Callable[[], None] | None",
    "Mapping[int, History]",
    "float | None",
    int,
    "frozenset[str] | None",
    "RetryPolicy",
    "HttpRules",
    "RetryOnErrors",
]


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

#: URLs of every shape (user info, upper case, default and other ports, IPv6, IDNA), on which
#: an integration that reads a client library's URL internals checks, at import, that they give
#: what its public properties give.
HOST_KEY_SAMPLES: Final = (
    "http://api.test/x",
    "HTTPS://User:pw@API.Test:8443/x?q#f",
    "https://api.test:443/",
    "http://[::1]:8080/",
    "http://\u4e2d\u56fd.icom.museum/",
    "http://127.0.0.1:80",
)


#: How an integration names the host of a request: ``"scheme://netloc"``, ``(scheme, netloc)``,
#: or ``(scheme, host, port)`` (``host`` in lower case, IDNA-encoded; ``port`` ``None`` for the
#: scheme's default), whichever is cheaper to read off its URLs.
HostKey = str | tuple[str, str] | tuple[str, str, int | None]


def origin(host: HostKey) -> str:
    """``scheme://host[:port]`` in one spelling per server, the key of the per-host budgets.

    Lower case, without user info, without the scheme's default port: ``HTTPS://u@Api:443`` and
    ``https://api`` share one budget.
    """
    if isinstance(host, tuple):
        if len(host) == 2:
            return origin(f"{host[0]}://{host[1]}")
        scheme_, name_, port_ = host
        if ":" in name_:
            name_ = f"[{name_}]"  # an IPv6 address
        host = f"{scheme_}://{name_}" if port_ is None else f"{scheme_}://{name_}:{port_}"
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


class _Live:
    """What a transport retries with now (see Policies): slotted, as it is read on every
    request."""

    __slots__ = ("cache", "firsts", "policy", "retry_on", "route", "rules")

    def __init__(
        self,
        policy: RetryPolicy,
        route: RouteRules | None,
        cache: PolicyCache,
        rules: HttpRules,
        retry_on: RetryOnErrors,
        firsts: dict[HostKey, FirstAttempt] | None,
    ) -> None:
        self.policy = policy
        self.route = route
        self.cache = cache
        self.rules = rules
        self.retry_on = retry_on
        #: The first-attempt records by host (see Policies.first), or None: no such path.
        self.firsts = firsts


_NOT_IDEMPOTENT_NOTE = (
    "seawall: not retried: {method} is not idempotent and the request has no Idempotency-Key "
    "header; send one (or configure idempotency_key=True) to make it retryable"
)
_NOT_TRANSIENT_NOTE = (
    "seawall: not retried: {error} is not a transport error the HTTP rules retry (connect "
    "failures, resets and timeouts are; a route's retry_on may narrow them)"
)
_NOT_REPLAYABLE_NOTE = (
    "seawall: not retried: the request body is a stream that the first attempt consumed and "
    "that cannot be replayed; send bytes (or read the body first) to make it retryable"
)


def fits(timeouts: Collection[float | None], left: float) -> bool:
    """Whether a request's *timeouts* (all of them set) fit the time *left* of its attempt
    (``inf``: no limit): it can then be sent with them, as the caller built it."""
    if left == math.inf:
        return True
    if not timeouts:
        return False
    # A loop: `None not in` and max() on a dict's values cost several times as much, and so
    # does all() over a generator.
    for value in timeouts:  # noqa: SIM110
        if value is None or not value <= left:
            return False
    return True


def capped(configured: float | None, left: float) -> float | None:
    """min(*configured*, *left*), the time left for the attempt; ``None`` for no limit (see
    :meth:`HttpCall.timeout`)."""
    if configured is None and left == math.inf:
        return None
    left = min(max(left, MIN_ATTEMPT_TIME), _validate.MAX_SECONDS)
    return left if configured is None else min(configured, left)


def stateless_first(policy: RetryPolicy, rules: HttpRules) -> bool:
    """Whether a first attempt under *policy* and *rules* needs no :class:`RetryState` (when no
    ambient deadline is set): the policy's first-attempt capability, and a total time that
    leaves room for an attempt."""
    total = rules.total_timeout
    return policy._fast and (total is None or total >= policy.min_attempt_time)


class HttpCall(Generic[Resp]):
    """The retry decisions for one logical HTTP request, over the policy's :class:`RetryState`.

    Sans-I/O: it decides, the driver (:func:`drive`, :func:`adrive`) sends, waits and closes.
    For each attempt the driver calls :meth:`next_attempt`, closes what :meth:`take` hands back,
    sends the request (with :meth:`timeout` and :meth:`deadline_headers`), then reports the
    outcome to :meth:`on_response` or :meth:`on_error`: each returns the wait before the next
    attempt, or ``None``: return that response (through :meth:`answer`) or raise that error.

    Args:
        policy: the derived policy (see :class:`PolicyCache`).
        rules: the HTTP rules.
        method: the request method, in upper case.
        has_key: the request carries an ``Idempotency-Key``.
        replayable: the request body can be sent again.
        wire: how the client library's responses and errors are read.
        retry_on: the transport error classes worth retrying, or a route's conditions.
        predicate: the policy's ``retry_if_result``: a response it accepts (``True``) is retried
            as a retryable status is.
        first: the time the first attempt started, when the integration made it on the
            first-attempt path (:meth:`Policies.first`, which made the budget's deposit).
    """

    __slots__ = (
        "_after",
        "_history",
        "_implicit",
        "_kept",
        "_now",
        "_started",
        "_status",
        "attempt_deadline",
        "clock",
        "exhausted",
        "method",
        "policy",
        "predicate",
        "replayable",
        "retry_on",
        "rules",
        "safe",
        "state",
        "wire",
    )

    def __init__(
        self,
        policy: RetryPolicy,
        rules: HttpRules,
        method: str,
        has_key: bool,
        replayable: bool,
        wire: Wire[Resp],
        retry_on: RetryOnErrors = (),
        predicate: Callable[[Any], bool] | None = None,
        *,
        first: float | None = None,
    ) -> None:
        self.rules = rules
        self.method = method
        self.safe = has_key or method in rules.idempotent_methods
        self.replayable = replayable
        self.wire = wire
        self.retry_on = retry_on
        self.predicate = predicate
        self.policy = policy
        self.clock = policy._clock
        # The clock's now() (time.monotonic itself for the system clock: one call less).
        self._now = now_of = policy._now
        self._status = 0
        now = self._started = now_of() if first is None else first
        #: The last response was given up on after retries (or said "overloaded"): see
        #: :meth:`answer`.
        self.exhausted = False
        # The latest retried response, kept through the wait: if the policy then gives up before
        # the next attempt, the caller gets it, as without retries (see take()).
        self._kept: Resp | None = None
        # The attempts retried so far (the last one is added when the call ends).
        self._history: list[HttpAttempt] | None = None
        total = rules.total_timeout
        if first is not None or (_ambient_deadline() is None and stateless_first(policy, rules)):
            # The policy's first-attempt capability: a first attempt without bookkeeping (no
            # timeouts, no ambient deadline, no hook observing attempts) needs no RetryState
            # until it fails (see _state()); the budget hears what its first_attempt() offers.
            # With *first*, that attempt was made at that time by the integration's own
            # first-attempt path (see Policies.first), which made the budget's deposit.
            self.state: RetryState | None = None
            self._implicit = self.attempt_deadline = math.inf if total is None else now + total
            self._after = policy._after
            if first is None and policy._before is not None:
                policy._before()
            return
        self._after = None
        state = self.state = policy.new_state(now)
        self.attempt_deadline = math.inf
        # The default total time, when nobody set a deadline (not sent downstream).
        self._implicit = math.inf
        if state.deadline == math.inf and total is not None:
            state.deadline = self._implicit = now + total

    def _state(self) -> RetryState:
        """The call's :class:`RetryState`; after a first attempt made without one (see
        ``__init__``), built now, as the retry core's loop does after its first attempt."""
        state = self.state
        if state is None:
            state = self.state = RetryState(self.policy, self._started, self._implicit)
            state.attempts = 1
        return state

    @property
    def attempts(self) -> int:
        """The attempts started so far."""
        state = self.state
        return 1 if state is None else state.attempts

    def next_attempt(self) -> float | None:
        """Count an attempt; return the seconds it may take (``inf`` for no limit), or ``None``:
        too little time is left for it, and the call ends with the kept response (:meth:`take`).

        Raises:
            DeadlineExceeded: too little time is left to start it, and no response is kept.
        """
        state = self.state
        if state is None:
            return self.attempt_deadline - self._started  # the first attempt, without a state
        # The first attempt starts as the call does: one clock reading less on every request.
        now = state.started if state.attempts == 0 else self._now()
        try:
            self.attempt_deadline = state.begin_attempt(now)
        except DeadlineExceeded as error:
            if self._kept is None:
                self._end(error)
                raise
            # The wait left too little time (a sleep that overshot on a real clock).
            self.exhausted = True  # retried, and no time for another attempt
            return None
        return self.attempt_deadline - now

    def take(self) -> Resp | None:
        """The kept response, handed over once: to close (a new attempt starts) or to return."""
        kept, self._kept = self._kept, None
        return kept

    def time_left(self) -> float:
        """Seconds left for this attempt (``inf`` for no limit)."""
        return self.attempt_deadline - self._now()

    def sends_as_is(self, timeouts: Collection[float | None], left: float) -> bool:
        """Whether the request can go as the caller built it: no deadline header is due, and
        its *timeouts* (all of them set) fit the time *left* (as :meth:`next_attempt` said)."""
        if self.attempt_deadline < self._implicit and self.rules.deadline_headers:
            return False  # the deadline headers are due
        return fits(timeouts, left)

    def timeout(self, configured: float | None) -> float | None:
        """min(configured, time left for this attempt); ``None`` for no limit.

        Never below :data:`MIN_ATTEMPT_TIME` (nor above ``MAX_SECONDS``): the attempt started
        with at least that much left, and a thread switch since must not turn the time left
        into a zero or negative timeout, which HTTP libraries refuse or misread.
        """
        return capped(configured, self.attempt_deadline - self._now())

    def timeouts(
        self, configured: Mapping[str, float | None], keys: Iterator[str] | tuple[str, ...]
    ) -> dict[str, float | None]:
        """:meth:`timeout` for each of *keys* (``configured.get(key)``), read at one instant."""
        left = self.attempt_deadline - self._now()
        if left == math.inf:
            return {k: configured.get(k) for k in keys}
        left = min(max(left, MIN_ATTEMPT_TIME), _validate.MAX_SECONDS)
        out: dict[str, float | None] = {}
        for k in keys:
            value = configured.get(k)
            out[k] = left if value is None or value > left else value
        return out

    @property
    def bounded_by_caller(self) -> bool:
        """Whether this attempt's deadline is the caller's or the policy's, not only the
        transport's default total time (which bounds getting a response, not reading a body
        the caller streams, and is not sent downstream)."""
        return self.attempt_deadline < self._implicit

    def deadline_headers(self) -> dict[str, str] | None:
        """The headers that tell the next hop how long it has (``None`` without a deadline)."""
        if self.attempt_deadline >= self._implicit or not self.rules.deadline_headers:
            return None
        # grpc-timeout and x-request-deadline, less the transit margin (see propagation).
        return encode_deadline_headers(self.attempt_deadline - self._now())

    def on_response(self, response: Resp) -> float | None:
        """Classify a response: the wait before retrying (the response is kept, see
        :meth:`take`), or ``None``: the driver returns ``answer(response)``."""
        self._status = status = self.wire.status(response)
        retried = status in self.rules.retry_statuses
        if status < 400 and not retried:
            # An answer: nothing more to read of it (headers are costly), but the predicate's.
            if self.predicate is None or not self.predicate(self.wire.view(response)):
                if self.state is not None:
                    self.state.on_success(self._now())
                elif self._after is not None:
                    self._after()  # the budget's first_attempt() "after"
                return None
            return self._retry(response, status, self.wire.headers(response))
        get_header = self.wire.headers(response)
        if is_overloaded(get_header):
            # The policy counts it as a failure for the budget and never retries it.
            now = self._now()
            self._state().on_error(Overloaded("the server answered overloaded; don't retry"), now)
            self.exhausted = True
            return None
        if retried or (self.predicate is not None and self.predicate(self.wire.view(response))):
            return self._retry(response, status, get_header)
        # The dependency answered, even with a 404.
        if self.state is not None:
            self.state.on_success(self._now())
        elif self._after is not None:
            self._after()
        return None

    def _retry(
        self, response: Resp, status: int, get_header: Callable[[str], str | None]
    ) -> float | None:
        state = self._state()
        # The server's wait as asked (finite: at most 32 digits, or a date in the calendar):
        # the policy clamps it to max_retry_after, or gives up if retry_after_beyond_max says so.
        signal = RetryableResponse(status, parse_retry_after(get_header("retry-after")))
        # A transient status is a failure of the dependency whether or not this request may be
        # sent again: retry=False still counts it against the budget, it only forbids the retry.
        delay = state.on_error(signal, self._now(), retry=self.safe and self.replayable)
        if delay is None:
            self.exhausted = is_exhausted(signal)  # retried and given up (attempts, deadline...)
        else:
            self._kept = response
            self._add(HttpAttempt(status, None, delay))
        return delay

    def _add(self, attempt: HttpAttempt) -> None:
        if self._history is None:
            self._history = [attempt]
        else:
            self._history.append(attempt)

    def _mark(self, response: Resp, history: History) -> Resp:
        if self.exhausted:
            # raise_for_status() above raises an error whose response carries the mark, and no
            # enclosing policy retries it: an outer @retry on HTTPStatusError around this
            # transport makes no more requests than the transport did (retry at one layer).
            with contextlib.suppress(AttributeError):  # a response class with __slots__
                setattr(response, _EXHAUSTED_MARK, True)
        self.wire.attach(response, history)
        return response

    def answer(self, response: Resp) -> Resp:
        """The response to return, with its history, marked if it was given up on."""
        if self._history is None and not self.exhausted:
            history = FIRST_TRY.get(self._status) or first_try(self._status)
            self.wire.attach(response, history)
            return response
        return self._mark(response, self._ended(HttpAttempt(self._status, None, None)))

    def answer_kept(self) -> Resp:
        """The kept response, when :meth:`next_attempt` ended the call (see :meth:`answer`)."""
        response = self.take()
        assert response is not None
        return self._mark(response, tuple(self._history or ()))

    def _ended(self, last: HttpAttempt) -> History:
        self._add(last)
        return tuple(self._history or ())

    def _end(self, error: BaseException) -> None:
        """Give the error that ends the call the history."""
        history = tuple(self._history or ())
        with contextlib.suppress(AttributeError, TypeError):  # a class refusing attributes
            setattr(error, HISTORY_ATTRIBUTE, history)

    def on_error(self, error: Exception) -> float | None:
        """Classify a transport error: the wait before retrying, or ``None`` to raise it."""
        retryable, never_sent = self.wire.classify(error, self.retry_on)
        now = self._now()
        state = self._state()
        if not retryable:
            # Not a transient kind (TLS, proxy, local protocol errors), or one the route's
            # retry_on leaves out: the policy, whose retry_on matches nothing, gives up and
            # counts no failure of the dependency.
            delay = state.on_error(error, now)
            if delay is None and not is_permanent(error):
                add_note(error, _NOT_TRANSIENT_NOTE.format(error=type(error).__name__))
        else:
            note = None
            if not never_sent:
                if not self.safe:
                    note = _NOT_IDEMPOTENT_NOTE.format(method=self.method)
                elif not self.replayable:
                    note = _NOT_REPLAYABLE_NOTE
            # A reset or a timeout is a failure of the dependency even when this request must
            # not be sent again: retry=False counts it for the budget without retrying.
            delay = state.on_error(error, now, retry=note is None)
            if delay is None and note is not None:
                add_note(error, note)
                # The request may have been processed: no layer above may send it again either.
                with contextlib.suppress(TypeError):  # an exception that refuses attributes
                    permanent(error)
        if delay is None:
            self._ended(HttpAttempt(None, error, None))
            self._end(error)
        else:
            self._add(HttpAttempt(None, error, delay))
        return delay


# -- the drivers: every seawall HTTP integration sends through one of these two loops ----------
#
# The loop is written once, below, and compiled twice at import: a function for a thread and a
# coroutine function for a task (as the retry core's first-attempt path is). A synchronous
# driver stepping the coroutine would cost a frame and two coroutines on every request.

_DRIVER = """
{kind}def {name}(call, send, close):
    try:
        while (left := call.next_attempt()) is not None:
            if call._kept is not None:  # (one call less than take() on every request)
                {wait}close(call.take())  # a discarded attempt must not hold its connection
            try:
                response = {wait}send(left)
            except Exception as exc:
                if (delay := call.on_error(exc)) is None:
                    raise
            else:
                try:
                    delay = call.on_response(response)
                except BaseException:
                    {wait}close(response)  # retry_if_result raised: nobody reads this one
                    raise
                if delay is None:
                    return call.answer(response)
            {wait}call.clock.{sleep}(delay)
        return call.answer_kept()
    finally:
        if call._kept is not None:
            {wait}close(call.take())  # the wait was interrupted (or cancelled): nobody reads it
"""


def _compile_driver(asynchronous: bool) -> Callable[..., Any]:
    name = "adrive" if asynchronous else "drive"
    source = _DRIVER.format(
        kind="async " if asynchronous else "",
        name=name,
        wait="await " if asynchronous else "",
        sleep="asleep" if asynchronous else "sleep",
    )
    filename = f"<seawall HTTP driver: {name}>"
    # Registered with linecache so that tracebacks and debuggers show the lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), namespace)
    driver: Callable[..., Any] = namespace[name]
    driver.__module__ = __name__
    return driver


if TYPE_CHECKING:

    def drive(
        call: HttpCall[Resp], send: Callable[[float], Resp], close: Callable[[Resp], object]
    ) -> Resp:
        """See below."""

    async def adrive(
        call: HttpCall[Resp],
        send: Callable[[float], Awaitable[Resp]],
        close: Callable[[Resp], Awaitable[object]],
    ) -> Resp:
        """See below."""

else:
    drive = _compile_driver(asynchronous=False)
    adrive = _compile_driver(asynchronous=True)

drive.__doc__ = """Run *call* in this thread: ``send(seconds_left)`` makes one attempt, ``close``
releases a response nobody will read; waits sleep on the policy's clock."""
adrive.__doc__ = """Run *call* in a task (asyncio or trio): ``send(seconds_left)`` makes one
attempt, ``close`` releases a response nobody will read; waits ``await`` the policy clock's
``asleep``. Cancellation of the caller is never retried."""


def drive_from(
    call: HttpCall[Resp],
    outcome: Resp | Exception,
    send: Callable[[float], Resp],
    close: Callable[[Resp], object],
) -> Resp:
    """:func:`drive`, with the first attempt's *outcome* (its response, or the exception it
    raised) in hand: where an integration's first-attempt path (:meth:`Policies.first`) hands
    over to the decisions. Each decision is :func:`drive`'s own."""
    pending = [outcome]

    def again(left: float) -> Resp:
        if not pending:
            return send(left)
        first = pending.pop()
        if isinstance(first, Exception):
            try:
                raise first
            finally:
                first = None  # type: ignore[assignment]  # no cycle through the traceback
        return first

    return drive(call, again, close)


async def adrive_from(
    call: HttpCall[Resp],
    outcome: Resp | Exception,
    send: Callable[[float], Awaitable[Resp]],
    close: Callable[[Resp], Awaitable[object]],
) -> Resp:
    """The async twin of :func:`drive_from` (see :func:`adrive`)."""
    pending = [outcome]

    async def again(left: float) -> Resp:
        if not pending:
            return await send(left)
        first = pending.pop()
        if isinstance(first, Exception):
            try:
                raise first
            finally:
                first = None  # type: ignore[assignment]  # no cycle through the traceback
        return first

    return await adrive(call, again, close)


async def within(aw: Awaitable[R], seconds: float, timed_out: Callable[[str], Exception]) -> R:
    """Await *aw* for at most *seconds* (``inf``: no limit), on asyncio or trio; past them it is
    cancelled and ``timed_out(message)`` is raised (the client library's timeout error)."""
    if seconds == math.inf:
        return await aw
    from seawall._core.compat import timeout_after  # here: no asyncio import for sync users

    scope = timeout_after(seconds)
    try:
        async with scope:
            return await aw
    except TimeoutError as err:
        if not scope.expired():
            raise  # a timeout of the request itself, not of this scope
        raise timed_out(f"seawall: the attempt ran out of time after {seconds:.3f} s") from err
