"""gRPC integration (grpcio, sync and ``grpc.aio``): client interceptors that retry by status
code per a :class:`~seawall.RetryPolicy`, and server interceptors for deadline intake and load
shedding.

Example:
    ``grpc.intercept_channel(grpc.insecure_channel(target), seawall.grpc.RetryInterceptor())``

Install the ``grpc`` extra (``pip install -e '.[grpc]'`` in a checkout). See ``docs/grpc.md``
for what is retried and how it compares with grpcio's own retry policy.
"""

from seawall.grpc._aio import AsyncRetryInterceptor
from seawall.grpc._client import RetryInterceptor
from seawall.grpc._rules import (
    DEFAULT_REQUEST_BUFFER,
    DEFAULT_RETRY_CODES,
    PER_CHANNEL,
    PUSHBACK_CODES,
    PUSHBACK_HEADER,
    REFUSE,
    RetryableStatus,
    StatusDeadlineExceeded,
    parse_pushback,
)
from seawall.grpc.server._deadline import AsyncDeadlineInterceptor, DeadlineInterceptor
from seawall.grpc.server._shed import AsyncLoadShedder, LoadShedder

__all__ = [
    "DEFAULT_REQUEST_BUFFER",
    "DEFAULT_RETRY_CODES",
    "PER_CHANNEL",
    "PUSHBACK_CODES",
    "PUSHBACK_HEADER",
    "REFUSE",
    "AsyncDeadlineInterceptor",
    "AsyncLoadShedder",
    "AsyncRetryInterceptor",
    "DeadlineInterceptor",
    "LoadShedder",
    "RetryInterceptor",
    "RetryableStatus",
    "StatusDeadlineExceeded",
    "parse_pushback",
]
