"""seawall.grpc client interceptors against a real grpcio server on 127.0.0.1, side by side with
grpcio's built-in retry policy (service config) on the same call sequences; attempts are counted
on the server."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import grpc.aio
import pytest

import seawall
import seawall.grpc as sg

SERVICE = "test.Scripted"
METHOD = f"/{SERVICE}/Call"
CODES = grpc.StatusCode


class Scripted:
    """A server whose answers follow a script per request key; it counts attempts per key.

    A script is a list of steps, the last one repeated: ``"ok"``, or ``(code, pushback)`` with
    ``pushback`` the ``grpc-retry-pushback-ms`` value to send (or ``None``).
    """

    def __init__(self) -> None:
        self.scripts: dict[bytes, list[Any]] = {}
        self.attempts: dict[bytes, int] = {}
        self.time_remaining: list[float | None] = []
        self.lock = threading.Lock()
        self.port = 0
        self.on_attempt: Any = None  # called with the attempt's context before it answers

    def script(self, key: bytes, *steps: Any) -> bytes:
        self.scripts[key] = list(steps)
        return key

    def handle(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            n = self.attempts.get(request, 0)
            self.attempts[request] = n + 1
            self.time_remaining.append(context.time_remaining())
        if self.on_attempt is not None:
            self.on_attempt(context)
        steps = self.scripts.get(request, ["ok"])
        step = steps[min(n, len(steps) - 1)]
        if step == "ok":
            return b"ok:" + request
        code, pushback = step
        if pushback is not None:
            context.set_trailing_metadata(((sg.PUSHBACK_HEADER, str(pushback)),))
        context.abort(code, f"scripted {code.name}")
        raise AssertionError("abort returns never")


@pytest.fixture
def server() -> Iterator[Scripted]:
    state = Scripted()
    pool = futures.ThreadPoolExecutor(max_workers=8)
    srv = grpc.server(pool)
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Call": grpc.unary_unary_rpc_method_handler(state.handle)}
    )
    srv.add_generic_rpc_handlers((handler,))
    state.port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        yield state
    finally:
        srv.stop(None).wait(10)
        pool.shutdown(wait=True)  # no worker thread outlives the test


def builtin_options(codes: list[str], *, max_attempts: int = 3, throttle: bool = False) -> Any:
    """grpcio's own retries: the service config of gRPC proposal A6."""
    config: dict[str, Any] = {
        "methodConfig": [
            {
                "name": [{"service": SERVICE}],
                "retryPolicy": {
                    "maxAttempts": max_attempts,
                    "initialBackoff": "0.01s",
                    "maxBackoff": "0.02s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": codes,
                },
            }
        ]
    }
    if throttle:
        config["retryThrottling"] = {"maxTokens": 10, "tokenRatio": 0.1}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]


def fast_policy(**kwargs: Any) -> seawall.RetryPolicy:
    # Virtual time: the waits cost nothing; grpcio's timeouts stay on real time.
    kwargs.setdefault("clock", seawall.VirtualClock())
    kwargs.setdefault("backoff", seawall.Backoff(base=0.001, cap=0.002))
    return seawall.RetryPolicy(**kwargs)


def seawall_stub(server: Scripted, policy: seawall.RetryPolicy, **kwargs: Any) -> Any:
    channel = grpc.intercept_channel(
        grpc.insecure_channel(f"127.0.0.1:{server.port}"), sg.RetryInterceptor(policy, **kwargs)
    )
    return channel, channel.unary_unary(METHOD)


def builtin_stub(server: Scripted, options: Any) -> Any:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}", options=options)
    return channel, channel.unary_unary(METHOD)


def call(stub: Any, key: bytes, **kwargs: Any) -> tuple[bytes | None, grpc.StatusCode]:
    try:
        return stub(key, timeout=5.0, **kwargs), CODES.OK
    except grpc.RpcError as err:
        return None, err.code()


UNAVAILABLE = (CODES.UNAVAILABLE, None)

# Each case: the script, what seawall does (attempts, final status), what grpcio's built-in policy
# with retryableStatusCodes=[UNAVAILABLE] does. docs/grpc.md shows the same table.
CASES = {
    "unavailable twice, then ok": ([UNAVAILABLE, UNAVAILABLE, "ok"], (3, "OK"), (3, "OK")),
    "always unavailable": ([UNAVAILABLE], (3, "UNAVAILABLE"), (3, "UNAVAILABLE")),
    "fatal status": ([(CODES.INVALID_ARGUMENT, None)], (1, "INVALID_ARGUMENT"), None),
    "exhausted, no pushback": (
        [(CODES.RESOURCE_EXHAUSTED, None), "ok"],
        (1, "RESOURCE_EXHAUSTED"),
        (1, "RESOURCE_EXHAUSTED"),
    ),
    "exhausted, pushback 1 ms": ([(CODES.RESOURCE_EXHAUSTED, 1), "ok"], (2, "OK"), None),
    "unavailable, pushback -1": ([(CODES.UNAVAILABLE, -1), "ok"], (1, "UNAVAILABLE"), None),
    "deadline exceeded, then ok": (
        [(CODES.DEADLINE_EXCEEDED, None), "ok"],
        (2, "OK"),
        (1, "DEADLINE_EXCEEDED"),
    ),
    "unavailable, pushback garbage": (
        [(CODES.UNAVAILABLE, "soon"), "ok"],
        (1, "UNAVAILABLE"),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_call_sequence_side_by_side(server: Scripted, case: str) -> None:
    steps, ours, theirs = CASES[case]
    a = server.script(b"seawall", *steps)
    b = server.script(b"builtin", *steps)
    ch1, ours_stub = seawall_stub(server, fast_policy(max_attempts=3), budget=None)
    ch2, builtin = builtin_stub(server, builtin_options(["UNAVAILABLE"]))
    with ch1, ch2:
        _, code_a = call(ours_stub, a)
        _, code_b = call(builtin, b)
    assert (server.attempts[a], code_a.name) == ours
    builtin_result = (server.attempts[b], code_b.name)
    if theirs is None:
        theirs = (1, steps[0][0].name)  # grpcio: not in retryableStatusCodes, or refused
    assert builtin_result == theirs


def test_pushback_replaces_the_backoff(server: Scripted) -> None:
    key = server.script(b"k", (CODES.UNAVAILABLE, 250), "ok")
    clock = seawall.VirtualClock()
    delays: list[float] = []
    policy = fast_policy(clock=clock, hooks=[lambda e: delays.append(e.delay)])
    ch, stub = seawall_stub(server, policy, budget=None)
    with ch:
        assert call(stub, key) == (b"ok:k", CODES.OK)
    assert delays == [0.25]
    assert clock.now() == pytest.approx(0.25)


def test_pushback_is_clamped_by_max_retry_after(server: Scripted) -> None:
    key = server.script(b"k", (CODES.UNAVAILABLE, 10**9), "ok")
    clock = seawall.VirtualClock()
    ch, stub = seawall_stub(server, fast_policy(clock=clock, max_retry_after=2.0), budget=None)
    with ch:
        assert call(stub, key)[1] is CODES.OK
    assert clock.now() == pytest.approx(2.0)


def test_parse_pushback_is_untrusted_input() -> None:
    assert sg.parse_pushback(None) is None
    assert sg.parse_pushback([("other", "1")]) is None
    assert sg.parse_pushback([(sg.PUSHBACK_HEADER, "1500")]) == 1.5
    assert sg.parse_pushback([(b"Grpc-Retry-Pushback-Ms", b"0")]) == 0.0
    for bad in ("-1", "", "1.5", "9" * 40, "١٢", "0x10"):
        assert sg.parse_pushback([(sg.PUSHBACK_HEADER, bad)]) is sg.REFUSE, bad


def test_throttling_side_by_side(server: Scripted) -> None:
    """Ten calls to a server that always answers UNAVAILABLE: a TokenBucket(10, 0.1) per channel
    and grpcio's retryThrottling {maxTokens: 10, tokenRatio: 0.1} stop retrying alike."""
    server.script(b"", UNAVAILABLE)
    keys_a = [server.script(b"a%d" % i, UNAVAILABLE) for i in range(10)]
    keys_b = [server.script(b"b%d" % i, UNAVAILABLE) for i in range(10)]
    interceptor = sg.RetryInterceptor(fast_policy(max_attempts=3))
    ch1 = grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{server.port}"), interceptor)
    ch2, builtin = builtin_stub(server, builtin_options(["UNAVAILABLE"], throttle=True))
    with ch1, ch2:
        ours = ch1.unary_unary(METHOD)
        for a, b in zip(keys_a, keys_b, strict=True):
            call(ours, a)
            call(builtin, b)
    per_call_a = [server.attempts[k] for k in keys_a]
    per_call_b = [server.attempts[k] for k in keys_b]
    # Tokens 10 -> 7 (3 attempts), -> 5 (2), then no retry while tokens <= 5 (gRPC A6).
    assert per_call_a == [3, 2] + [1] * 8
    assert per_call_b == per_call_a
    assert isinstance(interceptor.budget, seawall.TokenBucket)
    assert interceptor.budget.tokens == 0.0


def test_fatal_status_is_an_answer_for_the_bucket(server: Scripted) -> None:
    fatal = server.script(b"fatal", (CODES.NOT_FOUND, None))
    sick = server.script(b"sick", UNAVAILABLE)
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    ch, stub = seawall_stub(server, fast_policy(max_attempts=1), budget=bucket)
    with ch:
        assert call(stub, fatal)[1] is CODES.NOT_FOUND
        assert bucket.tokens == 10.0  # an answer moves no token
        assert call(stub, sick)[1] is CODES.UNAVAILABLE
        assert bucket.tokens == 9.0  # a failure takes one


def test_fatal_status_carries_no_note_and_no_mark(server: Scripted) -> None:
    key = server.script(b"k", (CODES.NOT_FOUND, None))
    ch, stub = seawall_stub(server, fast_policy(), budget=None)
    with ch:
        error = _last_error(stub, key)
    assert error.code() is CODES.NOT_FOUND  # type: ignore[attr-defined]
    assert getattr(error, "__notes__", []) == []
    assert not seawall.is_permanent(error)  # a layer above may still decide for itself


def test_refusing_pushback_on_a_fatal_status_is_still_an_answer(server: Scripted) -> None:
    fatal = server.script(b"fatal", (CODES.PERMISSION_DENIED, -1))
    refused = server.script(b"refused", (CODES.UNAVAILABLE, -1))
    bucket = seawall.TokenBucket(max_tokens=10, token_ratio=0.1)
    ch, stub = seawall_stub(server, fast_policy(), budget=bucket)
    with ch:
        assert call(stub, fatal)[1] is CODES.PERMISSION_DENIED
        assert bucket.tokens == 10.0
        assert call(stub, refused)[1] is CODES.UNAVAILABLE
        assert bucket.tokens == 9.0  # "overloaded; don't retry": a failure, not retried
    assert (server.attempts[fatal], server.attempts[refused]) == (1, 1)


def test_policy_budget_is_used_when_it_has_one(server: Scripted) -> None:
    bucket = seawall.TokenBucket()
    interceptor = sg.RetryInterceptor(fast_policy(budget=bucket))
    assert interceptor.budget is bucket


def test_time_left_is_sent_as_the_timeout(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    ch, stub = seawall_stub(server, seawall.RetryPolicy(), budget=None)
    with ch:
        with seawall.deadline(20.0):
            assert stub(key) == b"ok:k"  # no timeout given: the deadline's time left is sent
        (seen,) = server.time_remaining
        assert seen is not None and 10.0 < seen <= 20.2  # grpc-timeout: rounded up to 0.1 s
        stub(key, timeout=0.5)  # the caller's own timeout, when shorter, is kept
        second = server.time_remaining[1]
        # grpc-timeout carries 8 digits: the server may read a hair more than was sent.
        assert second is not None and second <= 0.51


def test_no_attempt_with_the_deadline_gone(server: Scripted) -> None:
    key = server.script(b"k", "ok")
    clock = seawall.VirtualClock()
    ch, stub = seawall_stub(server, fast_policy(clock=clock), budget=None)
    with ch, seawall.deadline(1.0, clock=clock):
        clock.advance(2.0)
        with pytest.raises(seawall.DeadlineExceeded):
            stub(key)
    assert server.attempts == {}


def test_deadline_exceeded_as_the_engine_does(server: Scripted) -> None:
    """DEADLINE_EXCEEDED is retried while the call's own deadline has room (a slow attempt), and
    nobody's fault once it has passed: not retried, and the bucket hears nothing."""
    clock = seawall.VirtualClock()
    slow = server.script(b"slow", (CODES.DEADLINE_EXCEEDED, None), "ok")
    bucket = seawall.TokenBucket()
    ch, stub = seawall_stub(server, fast_policy(clock=clock, timeout=5.0), budget=bucket)
    with ch:
        assert call(stub, slow) == (b"ok:slow", CODES.OK)
        assert server.attempts[slow] == 2
        assert bucket.tokens == pytest.approx(9.1)  # one failure, one success

        late = server.script(b"late", (CODES.DEADLINE_EXCEEDED, None), "ok")
        # The attempt outlives the call's deadline (on virtual time).
        server.on_attempt = lambda context: clock.advance(10.0)
        tokens = bucket.tokens
        assert call(stub, late)[1] is CODES.DEADLINE_EXCEEDED
        assert server.attempts[late] == 1
        assert bucket.tokens == tokens


class Oversleeping(seawall.VirtualClock):
    """Virtual time whose waits overrun by 10 s, as on a machine that stalled in the wait."""

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds + 10.0)

    async def asleep(self, seconds: float) -> None:
        await super().asleep(seconds + 10.0)


def test_a_wait_that_overruns_the_deadline_leaves_the_last_status(server: Scripted) -> None:
    """The retry was planned with room; the wait overran the deadline: no attempt is made, and
    the caller gets the last attempt's status."""
    key = server.script(b"k", UNAVAILABLE, "ok")
    events: list[str] = []
    policy = fast_policy(clock=Oversleeping(), timeout=5.0, hooks=[lambda e: events.append(e.kind)])
    ch, stub = seawall_stub(server, policy, budget=None)
    with ch:
        assert call(stub, key) == (None, CODES.UNAVAILABLE)
    assert server.attempts[key] == 1
    assert events == ["retry", "give_up"]


def test_retried_at_one_layer(server: Scripted) -> None:
    """An enclosing seawall policy does not retry what the interceptor already retried."""
    key = server.script(b"k", UNAVAILABLE)
    ch, stub = seawall_stub(server, fast_policy(max_attempts=3), budget=None)
    outer = fast_policy(max_attempts=4, retry_on=grpc.RpcError)
    with ch, pytest.raises(grpc.RpcError) as info:
        outer.call(stub, key, timeout=5.0)
    assert server.attempts[key] == 3
    assert any("gave up after 3 attempts" in n for n in getattr(info.value, "__notes__", []))


def test_refused_pushback_is_never_retried_above(server: Scripted) -> None:
    key = server.script(b"k", (CODES.UNAVAILABLE, -1))
    ch, stub = seawall_stub(server, fast_policy(), budget=None)
    outer = fast_policy(max_attempts=4, retry_on=grpc.RpcError)
    with ch:
        with pytest.raises(grpc.RpcError):
            outer.call(stub, key, timeout=5.0)
        assert server.attempts[key] == 1
        assert seawall.is_permanent(_last_error(stub, key))


def _last_error(stub: Any, key: bytes) -> BaseException:
    try:
        stub(key, timeout=5.0)
    except grpc.RpcError as err:
        return err
    raise AssertionError("the call succeeded")


def test_server_down_is_unavailable_and_retried() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once closed
    events: list[str] = []
    policy = fast_policy(hooks=[lambda e: events.append(e.kind)])
    channel = grpc.intercept_channel(
        grpc.insecure_channel(f"127.0.0.1:{port}"), sg.RetryInterceptor(policy, budget=None)
    )
    with channel:
        assert call(channel.unary_unary(METHOD), b"k")[1] is CODES.UNAVAILABLE
    assert events == ["retry", "retry", "give_up"]


def test_kill_switch_makes_one_attempt(server: Scripted) -> None:
    key = server.script(b"k", UNAVAILABLE)
    ch, stub = seawall_stub(server, fast_policy(name="grpc-test"), budget=None)
    seawall.set_enabled(False, name="grpc-test")
    try:
        with ch:
            assert call(stub, key)[1] is CODES.UNAVAILABLE
    finally:
        seawall.set_enabled(True, name="grpc-test")
    assert server.attempts[key] == 1


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(TypeError, match="policy"):
        sg.RetryInterceptor(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="budget"):
        sg.RetryInterceptor(budget=3)
    with pytest.raises(TypeError, match="retry_codes"):
        sg.RetryInterceptor(retry_codes=["UNAVAILABLE"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="pushback_codes"):
        sg.AsyncRetryInterceptor(pushback_codes=[CODES.OK])


# -- grpc.aio ------------------------------------------------------------------------------------


async def aio_call(channel: Any, key: bytes) -> tuple[bytes | None, grpc.StatusCode]:
    try:
        return await channel.unary_unary(METHOD)(key, timeout=5.0), CODES.OK
    except grpc.RpcError as err:
        return None, err.code()


@pytest.mark.parametrize("case", list(CASES))
async def test_aio_same_call_sequence_side_by_side(server: Scripted, case: str) -> None:
    steps, ours, theirs = CASES[case]
    a = server.script(b"seawall", *steps)
    b = server.script(b"builtin", *steps)
    target = f"127.0.0.1:{server.port}"
    interceptor = sg.AsyncRetryInterceptor(fast_policy(max_attempts=3), budget=None)
    async with (
        grpc.aio.insecure_channel(target, interceptors=[interceptor]) as ch1,
        grpc.aio.insecure_channel(target, options=builtin_options(["UNAVAILABLE"])) as ch2,
    ):
        _, code_a = await aio_call(ch1, a)
        _, code_b = await aio_call(ch2, b)
    assert (server.attempts[a], code_a.name) == ours
    if theirs is None:
        theirs = (1, steps[0][0].name)
    assert (server.attempts[b], code_b.name) == theirs


async def test_aio_throttling_and_deadline(server: Scripted) -> None:
    keys = [server.script(b"a%d" % i, UNAVAILABLE) for i in range(10)]
    interceptor = sg.AsyncRetryInterceptor(fast_policy(max_attempts=3))
    target = f"127.0.0.1:{server.port}"
    async with grpc.aio.insecure_channel(target, interceptors=[interceptor]) as ch:
        for key in keys:
            await aio_call(ch, key)
        assert [server.attempts[k] for k in keys] == [3, 2] + [1] * 8
        ok = server.script(b"ok", "ok")
        server.time_remaining.clear()
        async with seawall.deadline(20.0):
            assert await ch.unary_unary(METHOD)(ok) == b"ok:ok"
        (seen,) = server.time_remaining
        assert seen is not None and 10.0 < seen <= 20.2  # grpc-timeout: rounded up to 0.1 s


async def test_aio_gives_up_with_marks(server: Scripted) -> None:
    key = server.script(b"k", UNAVAILABLE)
    interceptor = sg.AsyncRetryInterceptor(fast_policy(max_attempts=2), budget=None)
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", interceptors=[interceptor]
    ) as ch:
        with pytest.raises(grpc.RpcError) as info:
            await ch.unary_unary(METHOD)(key, timeout=5.0)
    assert info.value.code() is CODES.UNAVAILABLE
    assert any("gave up after 2 attempts" in n for n in getattr(info.value, "__notes__", []))
    assert server.attempts[key] == 2


async def test_aio_a_wait_that_overruns_the_deadline_leaves_the_last_status(
    server: Scripted,
) -> None:
    key = server.script(b"k", UNAVAILABLE, "ok")
    events: list[str] = []
    policy = fast_policy(clock=Oversleeping(), timeout=5.0, hooks=[lambda e: events.append(e.kind)])
    interceptor = sg.AsyncRetryInterceptor(policy, budget=None)
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", interceptors=[interceptor]
    ) as ch:
        assert await aio_call(ch, key) == (None, CODES.UNAVAILABLE)
    assert server.attempts[key] == 1
    assert events == ["retry", "give_up"]


# -- hedging (grpc.aio) ---------------------------------------------------------------------------


async def test_aio_hedges_idempotent_methods_and_cancels_the_loser(server: Scripted) -> None:
    """The first attempt of each key stalls on the server; the hedge sent after 1 s answers,
    and the stalled one is cancelled (the server sees its context go inactive). The delay is
    long enough that the first attempt reaches the server before its copy on a loaded machine
    too (at 50 ms the copy sometimes came first, and stalled)."""
    stalled_cancelled = threading.Event()
    first_seen: set[bytes] = set()

    def stall_first(context: Any) -> None:
        # Runs in the server's handler thread before the scripted answer.
        key = b"hedged"
        with server.lock:
            first = key not in first_seen
            first_seen.add(key)
        if first:
            for _ in range(500):
                if not context.is_active():
                    stalled_cancelled.set()
                    return
                threading.Event().wait(0.01)

    server.on_attempt = stall_first
    key = server.script(b"hedged", "ok")
    hedge = seawall.Hedge(delay=1.0, max_attempts=2)
    interceptor = sg.AsyncRetryInterceptor(
        fast_policy(), budget=None, hedge=hedge, hedge_methods=[METHOD]
    )
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", interceptors=[interceptor]
    ) as ch:
        assert await ch.unary_unary(METHOD)(key, timeout=5.0) == b"ok:hedged"
    assert server.attempts[key] == 2
    assert hedge.hedges == 1 and hedge.wins == 1
    assert stalled_cancelled.wait(5)


def test_hedge_needs_idempotent_methods_named() -> None:
    with pytest.raises(ValueError, match="hedge_methods"):
        sg.AsyncRetryInterceptor(hedge=seawall.Hedge(delay=0.1))
    with pytest.raises(ValueError, match="hedge"):
        sg.AsyncRetryInterceptor(hedge_methods=[METHOD])
    with pytest.raises(TypeError, match="hedge_methods"):
        sg.AsyncRetryInterceptor(hedge=seawall.Hedge(delay=0.1), hedge_methods=["Call"])


def test_public_names_show_the_public_module() -> None:
    """The package's modules are private: reprs, tracebacks, pickles and the reference name
    ``seawall.grpc``, which exports every one of them."""
    shown = {
        name: obj.__module__
        for name in sg.__all__
        if isinstance(obj := getattr(sg, name), type) or inspect.isfunction(obj)
    }
    assert set(shown) >= {"RetryInterceptor", "AsyncRetryInterceptor", "LoadShedder"}
    assert set(shown.values()) == {"seawall.grpc"}
    assert repr(sg.RetryInterceptor) == "<class 'seawall.grpc.RetryInterceptor'>"
