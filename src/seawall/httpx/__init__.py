"""httpx integration: transports that retry per a :class:`~seawall.RetryPolicy`.

Example:
    ``httpx.Client(transport=seawall.httpx.RetryTransport(policy=seawall.RetryPolicy()))``

Install the ``httpx`` extra (``pip install -e '.[httpx]'`` in a checkout). See ``docs/http.md``
for what is retried and why.
"""

from seawall._policy.http import PER_HOST
from seawall.httpx._common import DEFAULT_RETRY_EXCEPTIONS
from seawall.httpx._transport import RetryTransport
from seawall.httpx._transport_async import AsyncRetryTransport

__all__ = [
    "DEFAULT_RETRY_EXCEPTIONS",
    "PER_HOST",
    "AsyncRetryTransport",
    "RetryTransport",
]
