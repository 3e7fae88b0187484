"""One deadline for the whole call: an ambient, absolute deadline carried in a context variable.

One job per module:

- ``ambient``: :class:`Deadline`, the context variable that carries the ambient one, and where
  it meets a call's and an attempt's timeouts (``call_deadline``, ``attempt_deadline``,
  ``install``);
- ``scope``: the ``deadline()`` scope, which sets the ambient deadline for a block and cancels
  the work still awaiting in it when the deadline passes;
- ``headers``: the ``grpc-timeout`` and ``x-request-deadline`` codecs, and the headers that
  carry the time left to the next hop;
- ``intake``: the server side: untrusted deadline headers read, clamped, counted, and turned
  into a scope.
"""

from __future__ import annotations

from seawall._strategies.deadline.ambient import _DEADLINE as _DEADLINE
from seawall._strategies.deadline.ambient import SCOPES as SCOPES
from seawall._strategies.deadline.ambient import (
    Deadline,
    attempt_deadline,
    call_deadline,
    current_deadline,
    install,
    remaining,
)
from seawall._strategies.deadline.headers import (
    DEFAULT_TRANSIT_MARGIN,
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    deadline_headers,
    decode_grpc_timeout,
    decode_request_deadline,
    encode_grpc_timeout,
    encode_request_deadline,
)
from seawall._strategies.deadline.intake import _COUNTERS as _COUNTERS
from seawall._strategies.deadline.intake import (
    DeadlineHeaderCounts,
    deadline_from_headers,
    deadline_header_counts,
    timeout_from_headers,
)
from seawall._strategies.deadline.intake import HeadersLike as HeadersLike
from seawall._strategies.deadline.intake import SupportsHeaderItems as SupportsHeaderItems
from seawall._strategies.deadline.scope import deadline

__all__ = [
    "DEFAULT_TRANSIT_MARGIN",
    "GRPC_TIMEOUT_HEADER",
    "REQUEST_DEADLINE_HEADER",
    "Deadline",
    "DeadlineHeaderCounts",
    "attempt_deadline",
    "call_deadline",
    "current_deadline",
    "deadline",
    "deadline_from_headers",
    "deadline_header_counts",
    "deadline_headers",
    "decode_grpc_timeout",
    "decode_request_deadline",
    "encode_grpc_timeout",
    "encode_request_deadline",
    "install",
    "remaining",
    "timeout_from_headers",
]
