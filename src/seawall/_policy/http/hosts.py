"""One retry budget per host: the key of a host (:func:`origin`) and the process-wide budgets."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Final

from seawall._strategies.budget import Budget

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
#: or ``(scheme, host, port)`` (``host`` in lower case, IDNA-encoded, as text or ASCII bytes;
#: ``port`` ``None`` for the scheme's default), whichever is cheaper to read off its URLs.
HostKey = str | tuple[str, str] | tuple[str, str | bytes, int | None]


def origin(host: HostKey) -> str:
    """``scheme://host[:port]`` in one spelling per server, the key of the per-host budgets.

    Lower case, without user info, without the scheme's default port: ``HTTPS://u@Api:443`` and
    ``https://api`` share one budget.
    """
    if isinstance(host, tuple):
        if len(host) == 2:
            return origin(f"{host[0]}://{host[1]}")
        scheme_, name_, port_ = host
        if isinstance(name_, bytes):
            name_ = name_.decode("ascii", "replace")
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


# -- one budget per host ------------------------------------------------------------------------

_HOST_BUDGETS: collections.OrderedDict[str, Budget] = collections.OrderedDict()
_HOST_BUDGETS_LOCK = threading.Lock()
# Bounded so that a process talking to ever-new hosts keeps bounded memory; the least recently
# used host loses its budget (it starts afresh, as a new process would).
MAX_HOSTS: Final = 1024


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
        while len(_HOST_BUDGETS) > MAX_HOSTS:
            _HOST_BUDGETS.popitem(last=False)
        return budget


class PerHost:
    """The default ``budget``: one :class:`~seawall.RetryBudget` per host, shared process-wide."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PER_HOST"


PER_HOST: Final = PerHost()


def check_budget(budget: object) -> Budget | PerHost | None:
    if budget is None or budget is PER_HOST or isinstance(budget, Budget):
        return budget
    raise TypeError(f"budget must be a seawall.Budget, None or PER_HOST, got {budget!r}")
