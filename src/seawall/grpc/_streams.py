"""Streaming RPCs: request streams kept for a replay while they are buffered, and response
streams that retry until the call is committed (gRPC proposal A6), sync and ``grpc.aio``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final

import grpc
import grpc.aio

from seawall.grpc._driver import ANSWERED, UNJUDGED, Outcome, RetryCall, adrive, drive
from seawall.grpc._rules import HEADERS_RECEIVED


def _outgrown(limit: int) -> str:
    return (
        f"the request stream outgrew the retry buffer (request_buffer={limit} messages), so it "
        "cannot be replayed"
    )


class Requests:
    """A request stream that each attempt reads from the start: the messages read so far are
    kept (a list or tuple is kept whole), up to *limit*; beyond it the stream is read once, and
    :meth:`committed` says why the call can no longer be retried.

    grpcio reads a request stream in a thread of its own; an attempt that ended may still be
    reading when the next one starts, so a lock keeps every message read, for the next attempt.
    """

    __slots__ = (
        "_end",
        "_first",
        "_generation",
        "_items",
        "_limit",
        "_lock",
        "_overflow",
        "_source",
    )

    def __init__(self, source: Any, limit: int) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._first = 0  # the index in the stream of _items[0]
        self._generation = 0
        self._overflow = False
        if isinstance(source, (list, tuple)):
            self._items: list[Any] = list(source)
            self._end = True
            self._limit = len(self._items)
            self._source: Iterator[Any] = iter(())
        else:
            self._items = []
            self._end = False
            self._source = iter(source)

    def committed(self) -> str | None:
        """Why the stream cannot be replayed, or ``None`` while it can."""
        return _outgrown(self._limit) if self._overflow else None

    def replay(self) -> Iterator[Any]:
        """The stream from its first message, for a new attempt (the previous one stops)."""
        with self._lock:
            self._generation += 1
            return self._read(self._generation)

    def _read(self, generation: int) -> Iterator[Any]:
        index = 0
        while True:
            with self._lock:
                if generation != self._generation:
                    return  # a newer attempt reads the stream now
                if index - self._first < len(self._items):
                    item = self._items[index - self._first]
                elif self._end:
                    return
                else:
                    try:
                        item = next(self._source)
                    except StopIteration:
                        self._end = True
                        return
                    self._items.append(item)
                    if len(self._items) > self._limit:
                        self._overflow = True
                index += 1
                if self._overflow:
                    # No replay any more: keep only what this attempt has not read yet.
                    del self._items[: index - self._first]
                    self._first = index
            yield item


# -- response streams (sync) --------------------------------------------------------------------

_NOTHING: Final = object()


class ResponseStream(grpc.Call):
    """A response stream that retries until the call is committed (gRPC proposal A6): until
    the first response message, or response headers, arrive. Afterwards, messages and the final
    status are those of the last attempt.

    What grpcio's own streaming call offers (``grpc.Call``, iteration, ``cancel``) is served
    from the attempt in progress; reading its status first waits for the retries to settle.
    """

    def __init__(
        self,
        call: RetryCall,
        start: Callable[[], Any],
        requests: Requests | None,
    ) -> None:
        self._call = call
        self._start = start
        self._requests = requests
        self._attempt = start()
        self._spent = False  # whether the attempt in progress failed: the next one starts anew
        self._settled = False
        self._pending: Any = _NOTHING
        self._error: BaseException | None = None

    def _committed(self, attempt: Any) -> str | None:
        try:
            if attempt.initial_metadata():
                return HEADERS_RECEIVED
        except Exception:  # a call without headers: not committed by them
            pass
        return self._requests.committed() if self._requests is not None else None

    def _try(self) -> Outcome:
        """One attempt, up to its first message or its end."""
        if self._spent:
            self._attempt = self._start()
            self._spent = False
        attempt = self._attempt
        try:
            self._pending = next(attempt)
        except StopIteration:
            return ANSWERED
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            if code is None or self._call.cancelled:
                return Outcome(None, error=error)
            self._spent = True
            return Outcome(code, error.trailing_metadata(), self._committed(attempt), error)
        return UNJUDGED  # a first message: committed, judged when the stream ends

    def _settle(self) -> None:
        """Attempt until a first message arrives or the call ends; retries happen here only."""
        if not self._settled:
            self._error = drive(self._call, self._try).error
            self._settled = True

    def __iter__(self) -> ResponseStream:
        return self

    def __next__(self) -> Any:
        if not self._settled:
            self._settle()
        pending = self._pending
        if pending is not _NOTHING:
            self._pending = _NOTHING
            return pending
        if self._error is not None:
            raise self._error
        try:
            return next(self._attempt)
        except StopIteration:
            self._call.end(None)
            raise
        except grpc.RpcError as error:
            self._call.end(error)
            raise

    def next(self) -> Any:
        return self.__next__()

    # grpc.Call: served by the attempt in progress; a status once the retries have settled.
    def initial_metadata(self) -> Any:
        self._settle()
        return self._attempt.initial_metadata()

    def trailing_metadata(self) -> Any:
        self._settle()
        return self._attempt.trailing_metadata()

    def code(self) -> Any:
        self._settle()
        return self._attempt.code()

    def details(self) -> Any:
        self._settle()
        return self._attempt.details()

    def is_active(self) -> bool:
        return bool(self._attempt.is_active())

    def time_remaining(self) -> Any:
        return self._attempt.time_remaining()

    def cancel(self) -> bool:
        self._call.cancelled = True  # and no attempt after this one
        return bool(self._attempt.cancel())

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return bool(self._attempt.add_callback(callback))

    def __getattr__(self, name: str) -> Any:
        # The rest of grpcio's call (the future's methods): the attempt's, once settled.
        if name.startswith("_"):
            raise AttributeError(name)
        self._settle()
        return getattr(self._attempt, name)


# -- streams on grpc.aio ------------------------------------------------------------------------

_END: Final = object()


class AsyncRequests:
    """:class:`Requests` for ``grpc.aio``: the source (an async or a plain iterable, or the
    stream of ``call.write()``) is read by one task at a time, shielded, so that cancelling an
    attempt that ended never cancels the source; what it yields is kept for the next attempt.
    """

    __slots__ = (
        "_end",
        "_error",
        "_first",
        "_generation",
        "_items",
        "_limit",
        "_next",
        "_overflow",
        "_pull",
    )

    def __init__(self, source: Any, limit: int) -> None:
        self._limit = limit
        self._first = 0
        self._generation = 0
        self._overflow = False
        self._pull: asyncio.Future[Any] | None = None
        self._error: BaseException | None = None
        self._end = False
        self._items: list[Any] = []
        if isinstance(source, (list, tuple)):
            self._items = list(source)
            self._end = True
            self._limit = len(self._items)
        elif hasattr(source, "__aiter__"):
            self._next = source.__aiter__().__anext__
        else:
            iterator = iter(source)

            async def next_item() -> Any:
                try:
                    return next(iterator)
                except StopIteration:
                    raise StopAsyncIteration from None

            self._next = next_item

    def committed(self) -> str | None:
        return _outgrown(self._limit) if self._overflow else None

    def replay(self) -> AsyncIterator[Any]:
        self._generation += 1
        return self._read(self._generation)

    async def _pull_one(self) -> Any:
        try:
            return await self._next()
        except StopAsyncIteration:
            return _END

    def _pulled(self, future: asyncio.Future[Any]) -> None:
        self._pull = None
        if future.cancelled():
            self._end = True
            return
        error = future.exception()
        if error is not None:
            self._error = error
            self._end = True
            return
        item = future.result()
        if item is _END:
            self._end = True
            return
        self._items.append(item)
        if len(self._items) > self._limit:
            self._overflow = True

    async def _read(self, generation: int) -> AsyncIterator[Any]:
        index = 0
        while generation == self._generation:
            if index - self._first < len(self._items):
                item = self._items[index - self._first]
                index += 1
                if self._overflow:
                    del self._items[: index - self._first]
                    self._first = index
                yield item
                continue
            if self._end:
                if self._error is not None:
                    raise self._error
                return
            if self._pull is None:
                self._pull = asyncio.ensure_future(self._pull_one())
                self._pull.add_done_callback(self._pulled)
            # Shielded: an attempt's reader may be cancelled; the read it began completes and
            # its message is kept for the next attempt.
            await asyncio.wait((self._pull,))


class AioResponseStream:
    """The ``grpc.aio`` twin of :class:`ResponseStream` (a base for the call classes below): a task
    started at once makes the attempts until the first response message (or the end of the
    call); reading, the status and ``await`` wait for it."""

    _once: bool = False  # stream-unary: the call is settled by its one response, at the end

    def __init__(
        self,
        call: RetryCall,
        start: Callable[[], Awaitable[Any]],
        requests: AsyncRequests | None,
    ) -> None:
        self._call = call
        self._start = start
        self._requests = requests
        self._attempt: Any = None
        self._pending: Any = _NOTHING
        self._error: BaseException | None = None
        self._eof = False
        self._task = asyncio.ensure_future(self._settle())

    def _committed_by(self, headers: object) -> str | None:
        if headers:
            return HEADERS_RECEIVED
        return self._requests.committed() if self._requests is not None else None

    async def _try(self) -> Outcome:
        """One attempt, up to its first message or its end."""
        self._attempt = attempt = await self._start()
        try:
            if self._once:
                await attempt
                return ANSWERED  # stream-unary: answered
            message = await attempt.read()
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code is None or self._call.cancelled:
                return Outcome(None, error=error)
            # The attempt's own headers: the error's may be taken before they arrived.
            headers = error.initial_metadata() or await attempt.initial_metadata()
            return Outcome(code, error.trailing_metadata(), self._committed_by(headers), error)
        if message is grpc.aio.EOF:
            self._eof = True
            return ANSWERED
        self._pending = message
        return UNJUDGED  # a first message: committed, judged when the stream ends

    async def _settle(self) -> None:
        self._error = (await adrive(self._call, self._try)).error

    async def _settled(self) -> Any:
        # Shielded: a reader cancelled while the attempts go on does not cancel the call.
        await asyncio.wait((self._task,))
        self._task.result()  # an error of the interceptor's own (e.g. DeadlineExceeded)
        return self._attempt

    async def read(self) -> Any:
        await self._settled()
        pending = self._pending
        if pending is not _NOTHING:
            self._pending = _NOTHING
            return pending
        if self._error is not None:
            raise self._error
        if self._eof:
            return grpc.aio.EOF
        try:
            message = await self._attempt.read()
        except grpc.RpcError as error:
            self._call.end(error)
            raise
        if message is grpc.aio.EOF:
            self._eof = True
            self._call.end(None)
        return message

    async def _messages(self) -> AsyncIterator[Any]:
        while True:
            message = await self.read()
            if message is grpc.aio.EOF:
                return
            yield message

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    def cancel(self) -> bool:
        self._call.cancelled = True  # and no attempt after this one
        self._task.cancel()
        if self._attempt is not None:
            self._attempt.cancel()
        return True

    def cancelled(self) -> bool:
        return self._attempt is not None and bool(self._attempt.cancelled())

    def done(self) -> bool:
        return self._task.done() and self._attempt is not None and bool(self._attempt.done())

    def add_done_callback(self, callback: Any) -> None:
        def later(task: Any) -> None:
            if self._attempt is not None:
                self._attempt.add_done_callback(callback)

        self._task.add_done_callback(later)

    def time_remaining(self) -> float | None:
        left: float | None = None if self._attempt is None else self._attempt.time_remaining()
        return left

    async def initial_metadata(self) -> Any:
        return await (await self._settled()).initial_metadata()

    async def trailing_metadata(self) -> Any:
        return await (await self._settled()).trailing_metadata()

    async def code(self) -> Any:
        return await (await self._settled()).code()

    async def details(self) -> Any:
        return await (await self._settled()).details()

    async def debug_error_string(self) -> Any:
        return await (await self._settled()).debug_error_string()

    async def wait_for_connection(self) -> None:
        await (await self._settled()).wait_for_connection()

    async def write(self, request: Any) -> None:
        # Not reached: grpc.aio turns call.write() into the request stream the interceptor got.
        raise NotImplementedError("write to the call grpc.aio returned")

    async def done_writing(self) -> None:
        raise NotImplementedError("write to the call grpc.aio returned")

    @property
    def _done_writing_flag(self) -> bool:
        # grpc.aio's write() asks it; the writes go to the replayed request stream.
        return False


class AioUnaryStream(AioResponseStream, grpc.aio.UnaryStreamCall):  # type: ignore[type-arg]
    pass


class AioStreamStream(AioResponseStream, grpc.aio.StreamStreamCall):  # type: ignore[type-arg]
    pass


class AioStreamUnary(AioResponseStream, grpc.aio.StreamUnaryCall):  # type: ignore[type-arg]
    _once = True

    def __await__(self) -> Any:
        yield from self._settled().__await__()
        if self._error is not None:
            raise self._error
        return (yield from self._attempt.__await__())
