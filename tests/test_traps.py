"""Traps a new user would hit in the first five minutes, each closed."""

from __future__ import annotations

import errno
import random
import sys
import types

import anyio
import pytest

import seawall
from backends import Run
from seawall.lowlevel import is_transient


def _policy(clock: seawall.VirtualClock, **kwargs: object) -> seawall.RetryPolicy:
    kwargs.setdefault("hooks", ())
    return seawall.RetryPolicy(clock=clock, rng=random.Random(3), **kwargs)  # type: ignore[arg-type]


class Pushback(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"retry after {retry_after}")
        self.retry_after = retry_after


def _fail_then_succeed(*errors: BaseException) -> object:
    queue = list(errors)

    def fn() -> str:
        if queue:
            raise queue.pop(0)
        return "ok"

    return fn


@pytest.mark.parametrize(
    "error",
    [seawall.RetryAfter(0), Pushback(0.0)],
    ids=["RetryAfter(0)", "retry_after=0"],
)
def test_a_zero_pushback_waits_the_jittered_backoff(error: BaseException) -> None:
    clock = seawall.VirtualClock()
    policy = _policy(clock, retry_on=(Pushback,))
    assert policy.call(_fail_then_succeed(error)) == "ok"  # type: ignore[arg-type]
    expected = policy.backoff.compute(0, random.Random(3))
    assert clock.sleeps == [expected]
    assert expected > 0.0


def test_a_long_pushback_wins_over_the_backoff() -> None:
    clock = seawall.VirtualClock()
    policy = _policy(clock)
    assert policy.call(_fail_then_succeed(seawall.RetryAfter(7.5))) == "ok"  # type: ignore[arg-type]
    assert clock.sleeps == [7.5]


def test_pushback_can_be_ignored() -> None:
    clock = seawall.VirtualClock()
    policy = _policy(clock, honor_retry_after=False)
    assert policy.call(_fail_then_succeed(seawall.RetryAfter(30.0))) == "ok"  # type: ignore[arg-type]
    assert clock.sleeps == [policy.backoff.compute(0, random.Random(3))]


def test_a_pushback_beyond_the_maximum_is_clamped_or_ends_the_call() -> None:
    clock = seawall.VirtualClock()
    clamped = _policy(clock, max_retry_after=10.0)
    assert clamped.call(_fail_then_succeed(seawall.RetryAfter(3600))) == "ok"  # type: ignore[arg-type]
    assert clock.sleeps == [10.0]
    strict = _policy(clock, max_retry_after=10.0, retry_after_beyond_max="give_up")
    outcome = strict.run(_fail_then_succeed(seawall.RetryAfter(3600)))  # type: ignore[arg-type]
    assert outcome.reason == "retry_after"
    assert outcome.attempts == 1
    assert clock.sleeps == [10.0]  # no new wait
    with pytest.raises(ValueError, match="retry_after_beyond_max"):
        seawall.RetryPolicy(retry_after_beyond_max="wait")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="honor_retry_after"):
        seawall.RetryPolicy(honor_retry_after=1)  # type: ignore[arg-type]


def _fake_error(module: str, *names: str, base: type[BaseException] = Exception) -> BaseException:
    """An instance of a class hierarchy named like a client library's, without the library."""
    cls: type[BaseException] = base
    for name in names:
        cls = type(name, (cls,), {"__module__": module})
    return cls("boom")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (OSError(errno.ECONNRESET, "reset"), True),
        (OSError(errno.ENETUNREACH, "unreachable"), True),
        (OSError(errno.ENOENT, "no such file"), False),
        (ValueError(), False),
        (_fake_error("httpx._exceptions", "TransportError", "NetworkError", "ConnectError"), True),
        (
            _fake_error("httpx._exceptions", "TransportError", "TimeoutException", "ReadTimeout"),
            True,
        ),
        (_fake_error("httpx._exceptions", "TransportError", "UnsupportedProtocol"), False),
        (
            _fake_error("requests.exceptions", "RequestException", "ConnectionError", base=OSError),
            True,
        ),
        (
            _fake_error(
                "requests.exceptions",
                "RequestException",
                "ConnectionError",
                "SSLError",
                base=OSError,
            ),
            False,
        ),
        (_fake_error("urllib3.exceptions", "HTTPError", "ProtocolError"), True),
        (
            _fake_error(
                "aiohttp.client_exceptions",
                "ClientError",
                "ClientConnectionError",
                "ServerDisconnectedError",
            ),
            True,
        ),
        (_fake_error("aiohttp.client_exceptions", "ClientError", "ClientResponseError"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_the_default_retry_on_knows_the_popular_clients(
    error: BaseException, transient: bool
) -> None:
    assert is_transient(error) is transient
    clock = seawall.VirtualClock()
    outcome = _policy(clock).run(_fail_then_succeed(error))  # type: ignore[arg-type]
    assert outcome.ok is transient


def test_a_grpc_error_is_transient_when_unavailable() -> None:
    rpc_error = type("RpcError", (Exception,), {"__module__": "grpc"})

    class Code:
        def __init__(self, name: str) -> None:
            self.name = name

    class Failed(rpc_error):  # type: ignore[misc,valid-type]
        def __init__(self, code: str) -> None:
            super().__init__(code)
            self._code = Code(code)

        def code(self) -> Code:
            return self._code

    assert is_transient(Failed("UNAVAILABLE"))
    assert not is_transient(Failed("INVALID_ARGUMENT"))


def test_an_error_retry_on_does_not_match_is_visible(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="seawall")
    policy = seawall.RetryPolicy(max_attempts=3)

    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError) as info:
        policy.call(fail)
    notes = getattr(info.value, "__notes__", [])
    assert any("not retried: KeyError does not match retry_on" in n for n in notes), notes
    assert "does not match retry_on" in caplog.text


def test_retry_without_parentheses() -> None:
    calls = []

    @seawall.retry
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise ConnectionError("once")
        return "ok"

    with seawall.testing.instant():
        assert flaky() == "ok"
    assert len(calls) == 2
    with pytest.raises(TypeError, match="max_attempts"):
        seawall.retry(max_attempts="3")  # type: ignore[arg-type]


def test_call_of_an_async_function_is_refused_clearly() -> None:
    async def fetch() -> int:
        return 1

    policy = seawall.RetryPolicy(hooks=())
    with pytest.raises(TypeError, match="acall"):
        policy.call(fetch)  # type: ignore[arg-type]
    # The coroutine was closed, not left un-awaited (filterwarnings = error would catch that).


def test_acall_of_a_sync_function_is_refused_clearly(run: Run) -> None:
    def fetch() -> int:
        return 1

    policy = seawall.RetryPolicy(hooks=())
    with pytest.raises(TypeError, match="call\\(\\)"):
        run(policy.acall(fetch))  # type: ignore[arg-type]


def test_the_block_api_refuses_a_result_check() -> None:
    policy = seawall.RetryPolicy(retry_if_result=lambda r: r is None)
    with pytest.raises(TypeError, match="retry_if_result"):
        policy.attempts()


def test_coroutine_type_is_what_the_check_uses() -> None:
    async def f() -> None: ...

    coro = f()
    try:
        assert type(coro) is types.CoroutineType
    finally:
        coro.close()
    assert sys.version_info >= (3, 10)


def test_a_plain_with_deadline_inside_a_coroutine_cancels_at_the_deadline(run: Run) -> None:
    clock = seawall.VirtualClock()

    async def main() -> float:
        started = clock.now()
        with pytest.raises(seawall.DeadlineExceeded), seawall.deadline(0.2, clock=clock):
            await anyio.sleep(1.0)
        # The task was not left cancelled: it goes on awaiting.
        await anyio.sleep(0.1)
        return clock.now() - started

    # Cancelled at the deadline (and a millisecond, so that inner timeouts at the same
    # deadline report it first), then 0.1 s more.
    assert run(main(), clock) == pytest.approx(0.301)


def test_a_plain_with_deadline_that_ends_in_time_cancels_nothing(run: Run) -> None:
    clock = seawall.VirtualClock()

    async def main() -> str:
        with seawall.deadline(5.0, clock=clock):
            await anyio.sleep(1.0)
        await anyio.sleep(10.0)  # past the deadline that no longer applies
        return "done"

    assert run(main(), clock) == "done"
    assert clock.now() == pytest.approx(11.0)


def test_the_caller_cancelling_inside_a_plain_with_deadline_stays_a_cancellation(
    run: Run,
) -> None:
    clock = seawall.VirtualClock()
    escaped: list[tuple[str, bool, float]] = []

    async def main() -> None:
        async def work() -> None:
            try:
                with seawall.deadline(5.0, clock=clock):
                    await anyio.sleep(10.0)
            except BaseException as error:
                cancelled = isinstance(error, anyio.get_cancelled_exc_class())
                escaped.append((type(error).__name__, cancelled, clock.now()))
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(work)
            await anyio.sleep(1.0)
            tg.cancel_scope.cancel()  # the task group ends quietly: a cancellation, not an error

    run(main(), clock)
    assert [(cancelled, at) for _, cancelled, at in escaped] == [(True, pytest.approx(1.0))]


def test_a_decorated_function_can_be_called_once_with_another_policy() -> None:
    calls = []

    @seawall.retry(max_attempts=2, hooks=())
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionError("down")
        return "ok"

    assert flaky.policy.max_attempts == 2  # type: ignore[attr-defined]
    with seawall.testing.instant():
        assert flaky.retry_with(max_attempts=5)() == "ok"  # type: ignore[attr-defined]
        assert len(calls) == 4
        calls.clear()
        with pytest.raises(ConnectionError):
            flaky()  # still two attempts
    assert len(calls) == 2
    with pytest.raises(TypeError, match="max_attempts"):
        flaky.retry_with(max_attempts="many")  # type: ignore[attr-defined]


def test_the_default_log_line_keeps_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="seawall")
    calls = []

    def charge() -> str:
        calls.append(1)
        if len(calls) < 2:
            raise ConnectionError(
                "Max retries exceeded with url: /v1/charge?api_key=sk_live_123 "
                "(https://admin:hunter2@pay.example.com/v1/charge?token=abc)"
            )
        return "ok"

    with seawall.testing.instant():
        assert seawall.RetryPolicy().call(charge) == "ok"
    logged = caplog.text + " ".join(str(vars(r)) for r in caplog.records)
    assert "retry" in caplog.text
    for secret in ("sk_live_123", "hunter2", "token=abc", "api_key"):
        assert secret not in logged
    assert "/v1/charge" in caplog.text  # the path stays: it says where


def test_an_error_summary_keeps_no_secret() -> None:
    from seawall.lowlevel import error_summary

    summary = error_summary(ConnectionError("GET https://u:pw@api/v1/users?key=s3cret failed"))
    assert "s3cret" not in summary
    assert "pw@" not in summary
    assert summary.startswith("ConnectionError: GET https://")
