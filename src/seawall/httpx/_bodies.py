"""Response bodies: read into memory within the attempt when they are small, and, streamed to
the caller of the async transport, read within the attempt's deadline."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import httpx

from seawall._core.compat import current_time
from seawall._policy.http import HttpCall, read_within_attempt, within


def _small(response: httpx.Response, limit: int) -> bool:
    """Whether to read the body within the attempt: declared within *limit*, and not in memory
    already (a body in memory cannot be cut short by a reset)."""
    return not isinstance(response.stream, httpx.ByteStream) and read_within_attempt(
        response.headers.get("content-length"), limit
    )


class _BoundedStream(httpx.AsyncByteStream):
    """A response body whose reading ends at the attempt's deadline (on the running async
    library's clock: asyncio's loop or trio's)."""

    def __init__(self, stream: httpx.AsyncByteStream, at: float, request: httpx.Request) -> None:
        self._stream = stream
        self._at = at
        self._timed_out = functools.partial(httpx.ReadTimeout, request=request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._stream.__aiter__()
        while True:
            left = max(0.0, self._at - current_time())
            try:
                chunk = await within(chunks.__anext__(), left, self._timed_out)
            except StopAsyncIteration:
                return
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def _bound_body(
    response: httpx.Response, call: HttpCall[httpx.Response], request: httpx.Request
) -> httpx.Response:
    """The response whose body, if still to be read, is bounded by the attempt's deadline."""
    stream = response.stream
    if not call.bounded_by_caller or isinstance(stream, httpx.ByteStream):
        return response  # no deadline of the caller's, or the body is in memory already
    left = call.time_left()
    if left <= 0.0:
        return response  # the call ended for want of time: the caller reads what is there
    assert isinstance(stream, httpx.AsyncByteStream)
    # The policy's clock may be virtual; the async library's is what cancels: convert once.
    response.stream = _BoundedStream(stream, current_time() + left, request)
    return response


def _buffer(response: httpx.Response) -> None:
    """Read the raw body into memory within the attempt (the connection is released)."""
    stream = response.stream
    assert isinstance(stream, httpx.SyncByteStream)
    try:
        body = b"".join(stream)
    finally:
        stream.close()
    response.stream = httpx.ByteStream(body)


async def _abuffer(response: httpx.Response) -> None:
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        body = b"".join([chunk async for chunk in stream])
    finally:
        await stream.aclose()
    response.stream = httpx.ByteStream(body)
