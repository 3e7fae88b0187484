"""seawall.grpc on streaming RPCs (unary-stream, stream-unary, stream-stream; sync and grpc.aio)
against a real grpcio server on 127.0.0.1, side by side with grpcio's built-in retry policy on
the same call sequences. The server counts attempts, and the request messages each one read.

A call is retried only until it is committed (gRPC proposal A6): until the first response
message or the response headers arrive; a request stream only while it is buffered.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest

import seawall
import seawall.grpc as sg

SERVICE = "test.Streams"
LINES = f"/{SERVICE}/Lines"  # unary-stream: three responses
SUM = f"/{SERVICE}/Sum"  # stream-unary: the requests joined
ECHO = f"/{SERVICE}/Echo"  # stream-stream: each request echoed
CODES = grpc.StatusCode
UNAVAILABLE = (CODES.UNAVAILABLE, None)


class Scripted:
    """Answers follow a script per key (the request, or a request stream's first message).

    A step is ``"ok"``; ``"empty"``: no response, status OK; ``(code, pushback)``: fail before
    any response; ``("after", n, code)``: send *n* responses, then fail; ``("headers", code)``:
    send response headers, then fail. The last step repeats.
    """

    def __init__(self) -> None:
        self.scripts: dict[bytes, list[Any]] = {}
        self.attempts: dict[bytes, int] = {}
        self.received: dict[bytes, list[list[bytes]]] = {}  # per key, each attempt's requests
        self.time_remaining: list[float | None] = []
        self.lock = threading.Lock()
        self.port = 0

    def script(self, key: bytes, *steps: Any) -> bytes:
        self.scripts[key] = list(steps)
        return key

    def _step(self, key: bytes, requests: list[bytes], context: Any) -> Any:
        with self.lock:
            n = self.attempts.get(key, 0)
            self.attempts[key] = n + 1
            self.received.setdefault(key, []).append(requests)
            self.time_remaining.append(context.time_remaining())
        steps = self.scripts.get(key, ["ok"])
        return steps[min(n, len(steps) - 1)]

    @staticmethod
    def _fail(context: Any, code: grpc.StatusCode, pushback: Any = None) -> None:
        if pushback is not None:
            context.set_trailing_metadata(((sg.PUSHBACK_HEADER, str(pushback)),))
        context.abort(code, f"scripted {code.name}")

    def _respond(self, step: Any, responses: list[bytes], context: Any) -> Iterator[bytes]:
        if step == "empty":
            return
        if step == "ok":
            yield from responses
            return
        if step[0] == "after":
            _, n, code = step
            yield from responses[:n]
            self._fail(context, code)
        if step[0] == "headers":
            context.send_initial_metadata((("x-began", "1"),))
            # Sent at once and aborted at once, headers and status may leave in one frame (a
            # "trailers-only" answer, which commits nothing, to grpcio's built-in retries too):
            # a moment apart, the headers arrive first, as from a server that began its work.
            time.sleep(0.05)
            self._fail(context, step[1])
        self._fail(context, *step)

    def lines(self, request: bytes, context: Any) -> Iterator[bytes]:
        step = self._step(request, [request], context)
        yield from self._respond(step, [request + b":%d" % i for i in range(3)], context)

    def sum(self, request_iterator: Iterator[bytes], context: Any) -> bytes:
        requests = list(request_iterator)
        step = self._step(requests[0] if requests else b"", requests, context)
        if step != "ok":
            self._fail(context, *step)
        return b"+".join(requests)

    def echo(self, request_iterator: Iterator[bytes], context: Any) -> Iterator[bytes]:
        first = next(request_iterator)
        step = self._step(first, [first], context)
        if step == "ok":
            yield first
            yield from request_iterator
            return
        if step[0] == "after":  # echo n requests, then fail
            _, n, code = step
            yield first
            for _ in range(n - 1):
                yield next(request_iterator)
            code_and_pushback = (code, None)
        else:
            code_and_pushback = step
        # The rest of the requests are read before the status goes out: grpc.aio reports a
        # request written into a call that has just ended as INTERNAL, not the server's status.
        for _ in request_iterator:
            pass
        self._fail(context, *code_and_pushback)


@pytest.fixture
def server() -> Iterator[Scripted]:
    state = Scripted()
    pool = futures.ThreadPoolExecutor(max_workers=8)
    srv = grpc.server(pool)
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Lines": grpc.unary_stream_rpc_method_handler(state.lines),
            "Sum": grpc.stream_unary_rpc_method_handler(state.sum),
            "Echo": grpc.stream_stream_rpc_method_handler(state.echo),
        },
    )
    srv.add_generic_rpc_handlers((handler,))
    state.port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        yield state
    finally:
        srv.stop(None).wait(10)
        pool.shutdown(wait=True)


def builtin_options(*, max_attempts: int = 3, throttle: bool = False) -> Any:
    """grpcio's own retries (the service config of gRPC proposal A6), for every method."""
    config: dict[str, Any] = {
        "methodConfig": [
            {
                "name": [{"service": SERVICE}],
                "retryPolicy": {
                    "maxAttempts": max_attempts,
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.02s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
    if throttle:
        config["retryThrottling"] = {"maxTokens": 10, "tokenRatio": 0.1}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]


def fast_policy(**kwargs: Any) -> seawall.RetryPolicy:
    # Virtual time for the policy's waits; grpcio's own timeouts stay on real time.
    kwargs.setdefault("clock", seawall.VirtualClock())
    kwargs.setdefault("backoff", seawall.Backoff(base=0.001, cap=0.002))
    kwargs.setdefault("max_attempts", 3)
    return seawall.RetryPolicy(**kwargs)


def ours(server: Scripted, policy: seawall.RetryPolicy | None = None, **kwargs: Any) -> Any:
    kwargs.setdefault("budget", None)
    interceptor = sg.RetryInterceptor(policy or fast_policy(), **kwargs)
    return grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{server.port}"), interceptor)


def builtin(server: Scripted, **kwargs: Any) -> Any:
    return grpc.insecure_channel(f"127.0.0.1:{server.port}", options=builtin_options(**kwargs))


def read_lines(channel: Any, key: bytes) -> tuple[list[bytes], str, BaseException | None]:
    got: list[bytes] = []
    try:
        for message in channel.unary_stream(LINES)(key, timeout=5.0):
            got.append(message)
    except grpc.RpcError as error:
        return got, error.code().name, error  # type: ignore[attr-defined]
    return got, "OK", None


# Each case: the script; then (attempts, final status, responses received) for seawall, and the
# same for grpcio's built-in policy (retryableStatusCodes [UNAVAILABLE], 3 attempts), or None
# where they agree. docs/grpc.md shows this table.
STREAM_CASES: dict[str, tuple[list[Any], tuple[int, str, int], tuple[int, str, int] | None]] = {
    "unavailable twice, then ok": ([UNAVAILABLE, UNAVAILABLE, "ok"], (3, "OK", 3), None),
    "always unavailable": ([UNAVAILABLE], (3, "UNAVAILABLE", 0), None),
    "fatal status": ([(CODES.INVALID_ARGUMENT, None)], (1, "INVALID_ARGUMENT", 0), None),
    "unavailable after one response": (
        [("after", 1, CODES.UNAVAILABLE), "ok"],
        (1, "UNAVAILABLE", 1),
        None,
    ),
    "unavailable after response headers": (
        [("headers", CODES.UNAVAILABLE), "ok"],
        (1, "UNAVAILABLE", 0),
        None,
    ),
    "exhausted, pushback 1 ms": (
        [(CODES.RESOURCE_EXHAUSTED, 1), "ok"],
        (2, "OK", 3),
        (1, "RESOURCE_EXHAUSTED", 0),
    ),
    "unavailable, pushback -1": ([(CODES.UNAVAILABLE, -1), "ok"], (1, "UNAVAILABLE", 0), None),
    "deadline exceeded (the call's own has room), then ok": (
        [(CODES.DEADLINE_EXCEEDED, None), "ok"],
        (2, "OK", 3),
        (1, "DEADLINE_EXCEEDED", 0),
    ),
}


@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_unary_stream_side_by_side(server: Scripted, case: str) -> None:
    steps, expected, theirs = STREAM_CASES[case]
    a = server.script(b"seawall", *steps)
    b = server.script(b"builtin", *steps)
    with ours(server) as ch1, builtin(server) as ch2:
        got_a, code_a, _ = read_lines(ch1, a)
        got_b, code_b, _ = read_lines(ch2, b)
    assert (server.attempts[a], code_a, len(got_a)) == expected
    assert (server.attempts[b], code_b, len(got_b)) == (theirs or expected)
    if code_a == "OK":
        assert got_a == [b"seawall:0", b"seawall:1", b"seawall:2"]


def test_a_committed_failure_says_why_it_was_not_retried(server: Scripted) -> None:
    late = server.script(b"late", ("after", 1, CODES.UNAVAILABLE))
    headers = server.script(b"headers", ("headers", CODES.UNAVAILABLE))
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    with ours(server, budget=bucket) as channel:
        _, _, error = read_lines(channel, late)
        assert bucket.tokens == 9.0  # a failure of the dependency, not retried
        _, _, error_headers = read_lines(channel, headers)
    notes = getattr(error, "__notes__", [])
    assert any("not retried: a response message had been received" in n for n in notes)
    notes = getattr(error_headers, "__notes__", [])
    assert any("not retried: the server had sent its response headers" in n for n in notes)
    assert bucket.tokens == 8.0


def test_stream_status_and_metadata_after_retries(server: Scripted) -> None:
    key = server.script(b"k", UNAVAILABLE, "ok")
    events: list[str] = []
    policy = fast_policy(hooks=[lambda e: events.append(e.kind)])
    bucket = seawall.TokenBucket()
    with ours(server, policy, budget=bucket) as channel:
        call = channel.unary_stream(LINES)(key, timeout=5.0)
        # The headers of the attempt that answered (the failed one's are gone with it).
        assert call.initial_metadata() == ()
        assert list(call) == [b"k:0", b"k:1", b"k:2"]
        assert call.code() is CODES.OK
        assert call.trailing_metadata() == ()
        assert call.done() and not call.is_active()  # grpcio's own future methods
    assert events == ["retry"]
    assert bucket.tokens == pytest.approx(9.1)  # one failure, then the success at the end
    assert server.attempts[key] == 2


def test_throttling_of_streams_side_by_side(server: Scripted) -> None:
    """Ten streams from a server that always answers UNAVAILABLE: TokenBucket(10, 0.1) and
    grpcio's retryThrottling {maxTokens: 10, tokenRatio: 0.1} stop retrying alike."""
    keys_a = [server.script(b"a%d" % i, UNAVAILABLE) for i in range(10)]
    keys_b = [server.script(b"b%d" % i, UNAVAILABLE) for i in range(10)]
    with ours(server, budget=seawall.TokenBucket()) as ch1, builtin(server, throttle=True) as ch2:
        for a, b in zip(keys_a, keys_b, strict=True):
            read_lines(ch1, a)
            read_lines(ch2, b)
    per_call = [server.attempts[k] for k in keys_a]
    assert per_call == [3, 2] + [1] * 8  # tokens 10 -> 7 -> 5, then no retry (gRPC A6)
    assert [server.attempts[k] for k in keys_b] == per_call


def test_pushback_replaces_the_backoff_of_a_stream(server: Scripted) -> None:
    key = server.script(b"k", (CODES.UNAVAILABLE, 250), "ok")
    clock = seawall.VirtualClock()
    with ours(server, fast_policy(clock=clock)) as channel:
        assert read_lines(channel, key)[1] == "OK"
    assert clock.sleeps == [0.25]


def test_the_call_answers_for_the_attempt_in_progress(server: Scripted) -> None:
    empty = server.script(b"empty", UNAVAILABLE, "empty")
    with ours(server) as channel:
        call = channel.unary_stream(LINES)(empty, timeout=5.0)
        assert 0.0 < call.time_remaining() <= 5.0
        assert list(call) == []  # retried once, then an empty stream: OK
        assert (call.code(), call.details()) == (CODES.OK, "")
        assert not call.is_active()
        assert call.add_callback(lambda: None) is False  # done already: grpcio says so
    assert server.attempts[empty] == 2


def test_a_failing_request_stream_fails_the_call_unretried(server: Scripted) -> None:
    def broken() -> Iterator[bytes]:
        yield b"broken"
        raise RuntimeError("the caller's generator broke")

    with ours(server) as channel, pytest.raises(grpc.RpcError) as info:
        channel.stream_unary(SUM)(broken(), timeout=5.0)
    # grpcio's own answer to a request iterator that raises, and no retry: the server saw at
    # most the one call. (Whether it saw it is grpcio's race: the cancellation and the end of the
    # server's request stream arrive together, and on a loaded machine the end may come first.)
    assert info.value.code() is CODES.UNKNOWN  # type: ignore[attr-defined]
    assert server.attempts in ({}, {b"broken": 1}), server.attempts


def test_cancelled_stream_is_not_retried(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    events: list[str] = []
    with ours(server, fast_policy(hooks=[lambda e: events.append(e.kind)])) as channel:
        call = channel.unary_stream(LINES)(key, timeout=5.0)
        assert next(call) == b"k:0"
        assert call.cancel()
        with pytest.raises(grpc.RpcError) as info:
            list(call)
    assert info.value.code() is CODES.CANCELLED  # type: ignore[attr-defined]
    assert server.attempts[key] == 1
    assert events == []  # the caller's cancellation is nobody's outcome: no give-up


def test_no_stream_attempt_with_the_deadline_gone(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    clock = seawall.VirtualClock()
    with ours(server, fast_policy(clock=clock)) as channel, seawall.deadline(1.0, clock=clock):
        clock.advance(2.0)
        with pytest.raises(seawall.DeadlineExceeded):
            next(channel.unary_stream(LINES)(key))
        with pytest.raises(seawall.DeadlineExceeded):
            channel.stream_unary(SUM)(iter([key]))
    assert server.attempts == {}


def test_a_wait_that_overruns_the_deadline_leaves_the_last_stream_status(
    server: Scripted,
) -> None:
    class Oversleeping(seawall.VirtualClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds + 10.0)  # the wait overran the call's deadline

    key = server.script(b"k", UNAVAILABLE, "ok")
    policy = fast_policy(clock=Oversleeping(), timeout=5.0)
    with ours(server, policy) as channel, pytest.raises(grpc.RpcError) as info:
        next(channel.unary_stream(LINES)(key, timeout=5.0))
    assert info.value.code() is CODES.UNAVAILABLE  # type: ignore[attr-defined]
    assert server.attempts[key] == 1


def test_time_left_is_sent_as_the_timeout_of_a_stream(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    with ours(server, seawall.RetryPolicy()) as channel:
        with seawall.deadline(20.0):
            assert len(list(channel.unary_stream(LINES)(key))) == 3
        with seawall.deadline(20.0):
            assert channel.stream_unary(SUM)(iter([b"k", b"x"])) == b"k+x"
    first, second = server.time_remaining
    for seen in (first, second):
        assert seen is not None and 10.0 < seen <= 20.2  # grpc-timeout: rounded up to 0.1 s


# -- request streams ------------------------------------------------------------------------------


def generated(*messages: bytes) -> Iterator[bytes]:
    yield from messages  # a generator: read once, replayed only from seawall's buffer


@pytest.mark.parametrize("kind", ["list", "generator"])
def test_stream_unary_replays_a_buffered_request_stream(server: Scripted, kind: str) -> None:
    a = server.script(b"a", UNAVAILABLE, "ok")
    b = server.script(b"b", UNAVAILABLE, "ok")

    def requests(key: bytes) -> Any:
        messages = [key, b"2", b"3"]
        return messages if kind == "list" else generated(*messages)

    with ours(server) as ch1, builtin(server) as ch2:
        assert ch1.stream_unary(SUM)(requests(a), timeout=5.0) == b"a+2+3"
        # grpcio itself reads a request stream with next(): an iterator, never a list.
        assert ch2.stream_unary(SUM)(iter(requests(b)), timeout=5.0) == b"b+2+3"
    # Each attempt read the whole stream from its first message, in both.
    assert server.received[a] == [[a, b"2", b"3"]] * 2
    assert server.received[b] == [[b, b"2", b"3"]] * 2


def test_a_request_stream_longer_than_the_buffer_is_not_retried(server: Scripted) -> None:
    key = server.script(b"k", UNAVAILABLE, "ok")
    short = server.script(b"s", UNAVAILABLE, "ok")
    with ours(server, request_buffer=3) as channel:
        with pytest.raises(grpc.RpcError) as info:
            channel.stream_unary(SUM)(generated(key, b"2", b"3", b"4"), timeout=5.0)
        # Three messages fit: replayed.
        assert channel.stream_unary(SUM)(generated(short, b"2", b"3"), timeout=5.0) == b"s+2+3"
        # A list is in memory already: replayed whatever its length.
        listed = server.script(b"l", UNAVAILABLE, "ok")
        assert channel.stream_unary(SUM)([listed, b"2", b"3", b"4"], timeout=5.0) == b"l+2+3+4"
    assert info.value.code() is CODES.UNAVAILABLE  # type: ignore[attr-defined]
    assert any("outgrew the retry buffer (request_buffer=3" in n for n in info.value.__notes__)
    assert (server.attempts[key], server.attempts[short], server.attempts[listed]) == (1, 2, 2)


def test_stream_stream_retries_until_the_first_response(server: Scripted) -> None:
    early = server.script(b"early", UNAVAILABLE, "ok")
    late = server.script(b"late", ("after", 2, CODES.UNAVAILABLE), "ok")
    with ours(server) as channel:
        echo = channel.stream_stream(ECHO)
        assert list(echo(generated(early, b"2", b"3"), timeout=5.0)) == [early, b"2", b"3"]
        got: list[bytes] = []
        with pytest.raises(grpc.RpcError) as info:
            for message in echo(generated(late, b"2", b"3"), timeout=5.0):
                got.append(message)
    assert server.attempts[early] == 2
    assert (server.attempts[late], got) == (1, [late, b"2"])
    assert info.value.code() is CODES.UNAVAILABLE  # type: ignore[attr-defined]


def test_stream_stream_side_by_side(server: Scripted) -> None:
    for steps in ([UNAVAILABLE, "ok"], [("after", 1, CODES.UNAVAILABLE), "ok"]):
        a = server.script(b"a%d" % len(server.scripts), *steps)
        b = server.script(b"b%d" % len(server.scripts), *steps)
        results = []
        with ours(server) as ch1, builtin(server) as ch2:
            for channel, key in ((ch1, a), (ch2, b)):
                try:
                    got = list(channel.stream_stream(ECHO)(iter([key, b"2"]), timeout=5.0))
                    results.append((server.attempts[key], "OK", len(got)))
                except grpc.RpcError as error:
                    results.append((server.attempts[key], error.code().name, -1))  # type: ignore[attr-defined]
        assert results[0] == results[1], steps
    assert [server.attempts[k] for k in sorted(server.attempts)] == [2, 1, 2, 1]


def test_bad_request_buffer_is_named() -> None:
    with pytest.raises(ValueError, match="request_buffer"):
        sg.RetryInterceptor(request_buffer=-1)
    with pytest.raises(TypeError, match="request_buffer"):
        sg.AsyncRetryInterceptor(request_buffer=2.5)  # type: ignore[arg-type]


# -- grpc.aio -------------------------------------------------------------------------------------


def aio_ours(server: Scripted, policy: seawall.RetryPolicy | None = None, **kwargs: Any) -> Any:
    kwargs.setdefault("budget", None)
    interceptor = sg.AsyncRetryInterceptor(policy or fast_policy(), **kwargs)
    return grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", interceptors=interceptor.interceptors()
    )


def aio_builtin(server: Scripted) -> Any:
    return grpc.aio.insecure_channel(f"127.0.0.1:{server.port}", options=builtin_options())


async def aio_lines(channel: Any, key: bytes) -> tuple[list[bytes], str, BaseException | None]:
    got: list[bytes] = []
    try:
        async for message in channel.unary_stream(LINES)(key, timeout=5.0):
            got.append(message)
    except grpc.RpcError as error:
        return got, error.code().name, error  # type: ignore[attr-defined]
    return got, "OK", None


@pytest.mark.parametrize("case", list(STREAM_CASES))
async def test_aio_unary_stream_side_by_side(server: Scripted, case: str) -> None:
    steps, expected, theirs = STREAM_CASES[case]
    a = server.script(b"seawall", *steps)
    b = server.script(b"builtin", *steps)
    async with aio_ours(server) as ch1, aio_builtin(server) as ch2:
        got_a, code_a, _ = await aio_lines(ch1, a)
        got_b, code_b, _ = await aio_lines(ch2, b)
    assert (server.attempts[a], code_a, len(got_a)) == expected
    assert (server.attempts[b], code_b, len(got_b)) == (theirs or expected)


async def test_aio_read_and_status_after_retries(server: Scripted) -> None:
    key = server.script(b"k", UNAVAILABLE, "ok")
    late = server.script(b"late", ("after", 1, CODES.UNAVAILABLE))
    async with aio_ours(server) as channel:
        call = channel.unary_stream(LINES)(key, timeout=5.0)
        assert await call.read() == b"k:0"
        assert await call.read() == b"k:1"
        assert await call.read() == b"k:2"
        assert await call.read() is grpc.aio.EOF
        assert await call.code() is CODES.OK
        _, code, error = await aio_lines(channel, late)
    assert code == "UNAVAILABLE"
    assert any("a response message had been received" in n for n in error.__notes__)  # type: ignore[union-attr]
    assert (server.attempts[key], server.attempts[late]) == (2, 1)


async def agenerated(*messages: bytes) -> AsyncIterator[bytes]:
    for message in messages:
        yield message


async def test_aio_stream_unary_replays_requests(server: Scripted) -> None:
    a = server.script(b"a", UNAVAILABLE, "ok")
    b = server.script(b"b", UNAVAILABLE, "ok")
    c = server.script(b"c", UNAVAILABLE, "ok")
    long = server.script(b"long", UNAVAILABLE, "ok")
    async with aio_ours(server, request_buffer=3) as channel, aio_builtin(server) as builtin_ch:
        assert await channel.stream_unary(SUM)(agenerated(a, b"2"), timeout=5.0) == b"a+2"
        assert await channel.stream_unary(SUM)(iter([b, b"2"]), timeout=5.0) == b"b+2"
        # Written with call.write(): the same stream, buffered as it is written.
        call = channel.stream_unary(SUM)(timeout=5.0)
        for message in (c, b"2", b"3"):
            await call.write(message)
        await call.done_writing()
        assert await call == b"c+2+3"
        with pytest.raises(grpc.RpcError) as info:
            await channel.stream_unary(SUM)(agenerated(long, b"2", b"3", b"4"), timeout=5.0)
        theirs = server.script(b"theirs", UNAVAILABLE, "ok")
        assert await builtin_ch.stream_unary(SUM)(agenerated(theirs, b"2"), timeout=5.0)
    assert server.received[a] == [[a, b"2"]] * 2
    assert server.received[b] == [[b, b"2"]] * 2
    assert server.received[c] == [[c, b"2", b"3"]] * 2
    assert server.attempts[long] == 1
    assert any("outgrew the retry buffer" in n for n in info.value.__notes__)
    assert server.attempts[theirs] == 2


async def test_aio_stream_stream(server: Scripted) -> None:
    early = server.script(b"early", UNAVAILABLE, "ok")
    late = server.script(b"late", ("after", 1, CODES.UNAVAILABLE), "ok")
    async with aio_ours(server) as channel:
        call = channel.stream_stream(ECHO)(agenerated(early, b"2"), timeout=5.0)
        assert [m async for m in call] == [early, b"2"]
        got: list[bytes] = []
        with pytest.raises(grpc.RpcError):
            async for message in channel.stream_stream(ECHO)(agenerated(late, b"2")):
                got.append(message)
        # Written with call.write().
        written = server.script(b"written", UNAVAILABLE, "ok")
        call = channel.stream_stream(ECHO)(timeout=5.0)
        await call.write(written)
        await call.write(b"2")
        await call.done_writing()
        assert [m async for m in call] == [written, b"2"]
    assert (server.attempts[early], server.attempts[late], server.attempts[written]) == (2, 1, 2)
    assert got == [late]


async def test_aio_call_answers_for_the_attempt_in_progress(server: Scripted) -> None:
    empty = server.script(b"empty", UNAVAILABLE, "empty")
    listed = server.script(b"listed", UNAVAILABLE, "ok")
    async with aio_ours(server) as channel:
        call = channel.unary_stream(LINES)(empty, timeout=5.0)
        await call.wait_for_connection()
        assert await call.read() is grpc.aio.EOF
        assert (await call.code(), await call.details()) == (CODES.OK, "")
        assert await call.initial_metadata() == grpc.aio.Metadata()
        assert await call.trailing_metadata() == grpc.aio.Metadata()
        assert call.done() and not call.cancelled()
        seen: list[Any] = []
        call.add_done_callback(seen.append)
        # A list is replayed whole; grpc.aio takes plain iterables too.
        sums = channel.stream_unary(SUM)([listed, b"2"], timeout=5.0)
        assert await sums == b"listed+2"
    assert (server.attempts[empty], server.attempts[listed]) == (2, 2)
    assert server.received[listed] == [[listed, b"2"]] * 2


async def test_aio_a_failing_request_stream_fails_the_call(server: Scripted) -> None:
    async def broken(key: bytes) -> AsyncIterator[bytes]:
        yield key
        raise RuntimeError("the caller's generator broke")

    # grpc.aio cancels a call whose request iterator raises: with the interceptor as without,
    # and the interceptor does not try again (the server may or may not have seen the call).
    async with aio_ours(server) as ours_ch, aio_builtin(server) as plain:
        for key, channel in ((b"ours", ours_ch), (b"plain", plain)):
            server.script(key, UNAVAILABLE)
            with pytest.raises(asyncio.CancelledError):
                await channel.stream_unary(SUM)(broken(key), timeout=5.0)
    assert server.attempts.get(b"ours", 0) <= 1
    assert server.attempts.get(b"plain", 0) <= 1


async def test_aio_cancelled_stream_is_not_retried(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    events: list[str] = []
    async with aio_ours(server, fast_policy(hooks=[lambda e: events.append(e.kind)])) as channel:
        call = channel.unary_stream(LINES)(key, timeout=5.0)
        assert await call.read() == b"k:0"
        assert call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call.read()
        assert call.cancelled()
    assert server.attempts[key] == 1
    assert events == []


async def test_aio_time_left_and_no_attempt_once_gone(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    clock = seawall.VirtualClock()
    async with aio_ours(server, seawall.RetryPolicy()) as channel:
        async with seawall.deadline(20.0):
            assert len([m async for m in channel.unary_stream(LINES)(key)]) == 3
        (seen,) = server.time_remaining
        assert seen is not None and 10.0 < seen <= 20.2  # grpc-timeout: rounded up to 0.1 s
    async with aio_ours(server, fast_policy(clock=clock)) as channel:
        with seawall.deadline(1.0, clock=clock):
            clock.advance(2.0)
            call = channel.unary_stream(LINES)(key)
            with pytest.raises(seawall.DeadlineExceeded):
                await call.read()  # the interceptor refused before any attempt
    assert server.attempts[key] == 1
