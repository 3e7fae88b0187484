"""The first attempt of every HTTP integration: one path, for a thread and for a task.

A request whose first attempt needs no retry state (see :meth:`Policies.first
<seawall._policy.http.policies.Policies.first>`) is sent without an :class:`HttpCall`: one
clock reading, the budget's deposit, the request as the caller built it, and one lookup of its
status among those returned as they are. Any other outcome hands over to an :class:`HttpCall`
with what was done so far, so each decision is still made in one place.

:func:`first_attempt` (a thread) and :func:`afirst_attempt` (a task) are the same lines, the
second with ``await`` where the integration's I/O is awaited (a test holds them together). An
integration gives them its :class:`Exchange` (or :class:`AsyncExchange`): how it sends a first
attempt, how it drives the retries, and how it closes a response nobody will read.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from seawall._policy.http.drive import compile_twin
from seawall._policy.http.overrides import OVERRIDES
from seawall._strategies.deadline import SCOPES

if TYPE_CHECKING:
    from seawall._policy.http.call import HostPolicy, HttpCall
    from seawall._policy.http.hosts import HostKey
    from seawall._policy.http.policies import Policies
    from seawall._policy.http.rules import History, HttpRules
    from seawall._policy.http.wire import RetryOnErrors, Wire


class Outgoing(Protocol):
    """What the path reads of a request: its method and its headers, to which an
    ``Idempotency-Key`` may be added (an httpx request, or an integration's own record)."""

    @property
    def method(self) -> str: ...

    @property
    def headers(self) -> MutableMapping[str, str]: ...


Req = TypeVar("Req", bound=Outgoing, contravariant=True)
Request = TypeVar("Request", bound=Outgoing)
Resp = TypeVar("Resp")


class FirstAttemptPath:
    """What a first attempt made without an :class:`HttpCall` needs, built once per policy and
    host (:meth:`Policies.first <seawall._policy.http.policies.Policies.first>`).

    Attributes:
        now: reads the policy's clock.
        before, after: the budget's first-attempt callables (``None``: nothing to do).
        answers: the history of a first attempt answered with each status returned as it is.
        total: the request's total time (``None``: no limit), the time left for the attempt.
        limit: bodies declared up to this many bytes are read within the attempt (0: never).
        keyed: the methods that need no ``Idempotency-Key`` when one is due for the others
            (then :meth:`Policies.first` decides for each request), else ``None``.
        status: reads a response's status.
        histories, history_key: where a response keeps its history (``histories(response)``
            under ``history_key``, see :class:`~seawall._policy.http.wire.Wire`).
        host: the derived policy of the host, handed on to :meth:`Policies.resume`.
        rules: the HTTP rules, handed on as well.
        retry_on: what decides which transport errors are retried, handed on as well.
    """

    __slots__ = (
        "after",
        "answers",
        "before",
        "histories",
        "history_key",
        "host",
        "keyed",
        "limit",
        "now",
        "retry_on",
        "rules",
        "status",
        "total",
    )

    def __init__(
        self,
        host: HostPolicy,
        rules: HttpRules,
        retry_on: RetryOnErrors,
        wire: Wire[Any],
    ) -> None:
        self.now = host.now
        self.before = host.before
        self.after = host.after
        self.answers: Mapping[int, History] = rules.first_histories
        self.total = rules.total_timeout
        self.limit = rules.buffer_limit
        self.keyed = frozenset(rules.idempotent_methods) if rules.idempotency_key else None
        self.status = wire.status
        self.histories = wire.histories
        self.history_key = wire.history_key
        self.host = host
        self.rules = rules
        self.retry_on = retry_on

    def __repr__(self) -> str:
        return f"FirstAttemptPath({self.host.policy!r}, total={self.total!r})"


class Exchange(Protocol[Req, Resp]):
    """What a synchronous integration gives :func:`first_attempt`: its policies, its own
    sending and closing (private names: they are no part of the integration's public API)."""

    #: What the integration retries with now.
    _policies: Policies

    def _replayable(self, request: Req) -> bool:
        """Whether *request*'s body can be sent again."""

    def _send_first(self, request: Req, path: FirstAttemptPath, started: float) -> Resp | None:
        """Send *request* as the caller built it (reading a body declared up to
        ``path.limit`` bytes), or return ``None`` when it cannot go as it is (its timeouts
        do not fit ``path.total``): nothing was sent, and the retries send it."""

    def _retrying(
        self, request: Req, call: HttpCall[Resp], outcome: Resp | Exception | None
    ) -> Resp:
        """Drive *call* (:func:`~seawall._policy.http.drive.drive`) from its first attempt,
        or with that attempt's *outcome* in hand."""

    def _close(self, response: Resp) -> object:
        """Release a response nobody will read."""


class AsyncExchange(Protocol[Req, Resp]):
    """The asynchronous twin of :class:`Exchange`, for :func:`afirst_attempt`."""

    _policies: Policies

    def _replayable(self, request: Req) -> bool:
        """Whether *request*'s body can be sent again."""

    async def _send_first(
        self, request: Req, path: FirstAttemptPath, started: float
    ) -> Resp | None:
        """As :meth:`Exchange._send_first`."""

    async def _retrying(
        self, request: Req, call: HttpCall[Resp], outcome: Resp | Exception | None
    ) -> Resp:
        """As :meth:`Exchange._retrying`, with :func:`~seawall._policy.http.drive.adrive`."""

    async def _close(self, response: Resp) -> object:
        """Release a response nobody will read."""


# The path is written once, below, and compiled twice at import (see compile_twin): a function
# for a thread and a coroutine function for a task. Two hand-written twins would repeat each of
# its lines but four; a synchronous path stepping the coroutine would cost a frame and a
# coroutine on every request.

_FIRST_ATTEMPT = """
{kind}def {name}(exchange, request, host, override=None):
    policies = exchange._policies
    ready = policies.ready
    if (  # the record first() would return, looked up here (see Policies.first)
        ready is None
        or override is not None
        or overrides.used
        or scopes.used
        or (path := ready.get(host)) is None
        or path.keyed is not None
    ):
        path = policies.first(request.method, host, override)
        if path is None:
            replayable = exchange._replayable(request)
            call = policies.start(
                request.method, request.headers, host, replayable=replayable, override=override
            )
            return {wait}exchange._retrying(request, call, None)
    started = path.now()
    if path.before is not None:
        path.before()
    try:
        response = {wait}exchange._send_first(request, path, started)
    except Exception as exc:
        outcome = exc
    else:
        if response is not None:  # (None: its timeouts do not fit; nothing was sent)
            history = path.answers.get(path.status(response))
            if history is not None:
                if path.after is not None:
                    try:
                        path.after()
                    except BaseException:
                        {wait}exchange._close(response)  # nobody reads it; the error goes on
                        raise
                # (Wire.attach(), without its frame)
                if (histories := path.histories) is None:
                    setattr(response, path.history_key, history)
                else:
                    histories(response)[path.history_key] = history
                return response
        outcome = response
    # Outside the `except`: the retries' own errors are not raised while handling this one.
    try:
        replayable = exchange._replayable(request)
        call = policies.resume(
            path, request.method, request.headers, replayable=replayable, started=started
        )
        return {wait}exchange._retrying(request, call, outcome)
    finally:
        outcome = None  # not left in this frame (an error's traceback holds it): no cycle
"""

if TYPE_CHECKING:

    def first_attempt(
        exchange: Exchange[Request, Resp],
        request: Request,
        host: HostKey,
        override: object = None,
    ) -> Resp:
        """See below."""

    async def afirst_attempt(
        exchange: AsyncExchange[Request, Resp],
        request: Request,
        host: HostKey,
        override: object = None,
    ) -> Resp:
        """See below."""

else:
    _NAMES = {"overrides": OVERRIDES, "scopes": SCOPES}
    first_attempt = compile_twin(_FIRST_ATTEMPT, "first_attempt", asynchronous=False, **_NAMES)
    afirst_attempt = compile_twin(_FIRST_ATTEMPT, "first_attempt", asynchronous=True, **_NAMES)
    first_attempt.__module__ = afirst_attempt.__module__ = __name__

first_attempt.__doc__ = """Send *request* through *exchange*, in this thread: its first attempt on
the first-attempt path when :meth:`Policies.first` allows it, else (and for any outcome but an
answer returned as it is) through an :class:`HttpCall`.

Args:
    exchange: the integration's policies, sending and closing (:class:`Exchange`).
    request: the request, as the exchange's methods take it, with its method and headers
        (:class:`Outgoing`; an ``Idempotency-Key`` may be added to them).
    host: its host (see :data:`~seawall._policy.http.hosts.HostKey`).
    override: the request's own override (a policy or a dict of changes), if any.
"""
afirst_attempt.__doc__ = """:func:`first_attempt` in a task (asyncio or trio), through an
:class:`AsyncExchange`."""
