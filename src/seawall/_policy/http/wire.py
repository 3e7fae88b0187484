"""How the HTTP decisions read one client library's responses and errors (:class:`Wire`)."""

from __future__ import annotations

import operator
from collections.abc import Callable, MutableMapping
from typing import Any, Generic, Protocol, TypeVar

from seawall._core.classify import is_refused_stream
from seawall._policy.http.rules import HISTORY_ATTRIBUTE, History, HttpRules


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


Resp = TypeVar("Resp")


class Wire(Generic[Resp]):
    """How the HTTP decisions read one client library's responses and errors.

    The defaults fit a response with ``status_code``, ``headers.get`` and attributes; an
    integration overrides what differs.

    Args:
        never_sent: errors raised before the request left (safe to retry for every method).
        never_retried: errors never retried, whatever ``retry_on`` says (TLS, proxies).
        status_attribute: the response's attribute holding its status code.
        history_in: the response's attribute, a mapping, that keeps its history under
            *history_key*; ``None`` (by default): the history is the response's attribute
            *history_key*.
        history_key: the history's key in that mapping, or its attribute.
    """

    __slots__ = ("histories", "history_key", "never_retried", "never_sent", "status")

    def __init__(
        self,
        never_sent: tuple[type[Exception], ...] = (),
        never_retried: tuple[type[Exception], ...] = (),
        status_attribute: str = "status_code",
        history_in: str | None = None,
        history_key: str = HISTORY_ATTRIBUTE,
    ) -> None:
        self.never_sent = never_sent
        self.never_retried = never_retried
        # Attribute getters: no Python frame per response.
        #: The response's status code.
        self.status: Callable[[Any], int] = operator.attrgetter(status_attribute)
        #: The mapping of a response that keeps its history under :attr:`history_key`, or
        #: ``None``: the history is its attribute :attr:`history_key`. (Not ``__dict__``, which
        #: would make CPython build a dict for an object that keeps its attributes inline.)
        self.histories: Callable[[Any], MutableMapping[str, Any]] | None = (
            None if history_in is None else operator.attrgetter(history_in)
        )
        self.history_key = history_key

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
        """Give *response* its history (see ``history_in``)."""
        if self.histories is None:
            setattr(response, self.history_key, history)
        else:
            self.histories(response)[self.history_key] = history


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
