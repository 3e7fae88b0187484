"""Deadline propagation across hops: header codecs, and intake on the server side.

A client sends the time left of its ambient :func:`seawall.deadline` with every request
(``grpc-timeout`` and ``x-request-deadline``); a server turns those headers back into a deadline
scope, clamped to its own maximum, and counts what it saw (:func:`deadline_header_counts`).
The HTTP integrations and the server middleware use these; most code never calls them.
"""

from seawall._core.public import show_public_module
from seawall._strategies.deadline import (
    DEFAULT_TRANSIT_MARGIN,
    GRPC_TIMEOUT_HEADER,
    REQUEST_DEADLINE_HEADER,
    Deadline,
    DeadlineHeaderCounts,
    SupportsHeaderItems,
    deadline_from_headers,
    deadline_header_counts,
    deadline_headers,
    decode_grpc_timeout,
    decode_request_deadline,
    encode_grpc_timeout,
    encode_request_deadline,
    timeout_from_headers,
)

__all__ = [
    "DEFAULT_TRANSIT_MARGIN",
    "GRPC_TIMEOUT_HEADER",
    "REQUEST_DEADLINE_HEADER",
    "Deadline",
    "DeadlineHeaderCounts",
    "SupportsHeaderItems",
    "deadline_from_headers",
    "deadline_header_counts",
    "deadline_headers",
    "decode_grpc_timeout",
    "decode_request_deadline",
    "encode_grpc_timeout",
    "encode_request_deadline",
    "timeout_from_headers",
]

show_public_module(__name__, globals())
