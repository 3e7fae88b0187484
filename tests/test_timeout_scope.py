"""One timeout-scope adapter (seawall._core.compat.TimeoutScope) for every owner of a timeout."""

from __future__ import annotations

import asyncio

import pytest

import seawall
import seawall.testing
from seawall import DeadlineExceeded, RetryPolicy, VirtualClock
from seawall._core.compat import TimeoutScope, with_timeout


def run(main: object) -> object:
    return seawall.testing.run(main, VirtualClock())  # type: ignore[arg-type]


def test_its_own_expiry_becomes_what_the_owner_says() -> None:
    seen: list[tuple[object, bool]] = []

    def on_timeout(error: TimeoutError, exc: BaseException | None, expired: bool) -> Exception:
        seen.append((type(exc).__name__, expired))
        return LookupError("slow")

    async def main() -> None:
        async with TimeoutScope(1.0, on_timeout):
            await asyncio.sleep(5.0)

    with pytest.raises(LookupError, match="slow") as caught:
        run(main())
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert seen == [("CancelledError", True)]


def test_a_timeout_raised_inside_is_told_apart() -> None:
    seen: list[bool] = []

    def on_timeout(error: TimeoutError, exc: BaseException | None, expired: bool) -> Exception:
        seen.append(expired)
        return error

    async def main() -> None:
        async with TimeoutScope(10.0, on_timeout):
            raise TimeoutError("the caller's own")

    with pytest.raises(TimeoutError, match="the caller's own"):
        run(main())
    assert seen == []  # not this scope's: it leaves the block as it was raised


def test_with_timeout_names_only_its_own_expiry() -> None:
    async def slow() -> None:
        await asyncio.sleep(5.0)

    async def own() -> None:
        raise TimeoutError("inner")

    with pytest.raises(TimeoutError, match=r"^took 1\.0$"):
        run(with_timeout(slow(), 1.0, lambda s: f"took {s}"))
    with pytest.raises(TimeoutError, match=r"^inner$"):
        run(with_timeout(own(), 1.0, lambda s: f"took {s}"))


def test_the_deadline_and_the_attempt_block_use_it() -> None:
    clock = VirtualClock()
    policy = RetryPolicy(max_attempts=2, attempt_timeout=1.0, clock=clock, hooks=())
    messages: list[str] = []

    async def attempts() -> None:
        async for attempt in policy.attempts():
            async with attempt:
                assert isinstance(attempt._timeout, TimeoutScope)
                await asyncio.sleep(5.0)

    async def deadline() -> None:
        async with seawall.deadline(1.0, clock=clock) as scope:
            assert scope is not None
            await asyncio.sleep(5.0)

    with pytest.raises(TimeoutError) as caught:
        seawall.testing.run(attempts(), clock)
    messages.append(str(caught.value))
    with pytest.raises(DeadlineExceeded) as passed:
        seawall.testing.run(deadline(), clock)
    # In the attempt block's terms (which limit it names depends on the float rounding of
    # the jittered wait before attempt 2).
    assert [m.partition(" (")[0] for m in messages] == ["attempt 2 timed out after 1.000 s"]
    assert isinstance(passed.value.__cause__, TimeoutError)


class _ClientTimeout(Exception):
    """What a client library raises when its request times out."""


def test_the_http_attempt_bound_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from seawall._core import compat
    from seawall._policy.http.drive import within

    scopes: list[TimeoutScope] = []

    class Counted(TimeoutScope):
        __slots__ = ()

        async def __aenter__(self) -> TimeoutScope:
            scopes.append(self)
            return await super().__aenter__()

    monkeypatch.setattr(compat, "TimeoutScope", Counted)

    async def slow() -> str:
        await asyncio.sleep(5.0)
        return "late"

    async def own() -> str:
        raise TimeoutError("the request's own")

    async def quick() -> str:
        await asyncio.sleep(0.5)
        return "in time"

    with pytest.raises(_ClientTimeout, match=r"ran out of time after 1\.000 s") as caught:
        run(within(slow(), 1.0, _ClientTimeout))
    assert isinstance(caught.value.__cause__, TimeoutError)
    with pytest.raises(TimeoutError, match="the request's own"):
        run(within(own(), 1.0, _ClientTimeout))
    assert run(within(quick(), 1.0, _ClientTimeout)) == "in time"
    assert run(within(quick(), float("inf"), _ClientTimeout)) == "in time"
    assert [scope.seconds for scope in scopes] == [1.0, 1.0, 1.0]  # none for no limit
