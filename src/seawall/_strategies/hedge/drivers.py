"""The hedging loops: the asyncio and trio drivers over a Hedge's sans-I/O decisions."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from seawall._core.events import logger
from seawall._strategies.hedge.events import HedgeDelayPassed

if TYPE_CHECKING:
    from seawall._strategies.hedge.policy import Hedge

__all__ = ["asyncio_acall", "trio_acall"]

T = TypeVar("T")


async def asyncio_acall(
    policy: Hedge, fn: Callable[..., Awaitable[T]], args: Any, kwargs: Any
) -> T:
    """:meth:`~seawall.Hedge.acall` on asyncio: attempts run as tasks."""
    loop = asyncio.get_running_loop()
    clock = policy.clock
    started = clock.now()
    delay = policy.start_call()
    replicas = policy.replicas
    max_attempts = policy.max_attempts

    def launch() -> asyncio.Future[T]:
        if replicas is None:
            aw = fn(*args, **kwargs)
        else:
            aw = fn(replicas[len(tasks) % len(replicas)], *args, **kwargs)
        task = asyncio.ensure_future(aw)
        tasks.append(task)
        starts.append(clock.now())
        return task

    tasks: list[asyncio.Future[T]] = []
    starts: list[float] = []  # when each attempt started, on the clock: its latency
    pending = {launch()}
    next_at = loop.time() + delay
    last_error: BaseException | None = None
    try:
        while True:
            timeout = None
            if len(tasks) < max_attempts and next_at != math.inf:
                timeout = max(0.0, next_at - loop.time())
            done, pending = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                # The delay passed with every attempt still running: hedge.
                passed = HedgeDelayPassed(f"no answer after {delay:.3f} s")
                if policy.admit(passed, len(tasks) + 1):
                    pending.add(launch())
                    next_at = loop.time() + delay
                else:
                    next_at = math.inf
                continue
            for task in sorted(done, key=_failed_last):
                index = tasks.index(task)
                if task.cancelled():
                    error: BaseException = asyncio.CancelledError()
                else:
                    exc = task.exception()
                    if exc is None:
                        policy.on_success(clock.now() - started, index + 1)
                        return task.result()
                    error = exc
                if policy.on_error(error, clock.now() - starts[index]):
                    raise error
                last_error = error
            if not pending:
                assert last_error is not None
                if len(tasks) < max_attempts and policy.admit(last_error, len(tasks) + 1):
                    # gRPC hedging: a retryable failure sends the next hedge at once.
                    pending.add(launch())
                    next_at = loop.time() + delay
                    continue
                raise last_error
    finally:
        if pending:
            for task in pending:
                task.cancel()
            # Wait for the losers to unwind, so their cleanup (closing connections) has run.
            await asyncio.wait(pending)
            for task in pending:
                # A loser whose cleanup raised: its error is retrieved and logged here, not
                # left to "Task exception was never retrieved"; the call's outcome stands.
                if not task.cancelled() and task.exception() is not None:
                    logger.warning(
                        "seawall hedge: a cancelled attempt failed while unwinding",
                        exc_info=task.exception(),
                    )


def _failed_last(task: asyncio.Future[Any]) -> int:
    # When attempts finish together, a success wins over a failure.
    return 1 if task.cancelled() or task.exception() is not None else 0


async def trio_acall(policy: Hedge, fn: Callable[..., Awaitable[T]], args: Any, kwargs: Any) -> T:
    """:meth:`~seawall.Hedge.acall` on trio: the same decisions, attempts run in a nursery."""
    import functools

    import trio

    clock = policy.clock
    started = clock.now()
    delay = policy.start_call()
    replicas = policy.replicas
    max_attempts = policy.max_attempts
    starts: list[float] = []  # when each attempt started, on the clock: its latency
    send, receive = trio.open_memory_channel[tuple[int, bool, Any]](math.inf)
    found: list[T] = []
    failure: BaseException | None = None
    settled = False  # the call's outcome is known: the attempts still running are losers

    async def attempt(index: int, call: Callable[[], Awaitable[T]]) -> None:
        try:
            value = await call()
        except Exception as exc:
            if settled:
                # A loser whose cleanup raised: logged, as on asyncio; the outcome stands.
                logger.warning(
                    "seawall hedge: a cancelled attempt failed while unwinding", exc_info=exc
                )
                return
            send.send_nowait((index, False, exc))
        else:
            send.send_nowait((index, True, value))

    async with trio.open_nursery() as nursery:

        def launch() -> None:
            index = len(starts)
            starts.append(clock.now())
            if replicas is None:
                call = functools.partial(fn, *args, **kwargs)
            else:
                call = functools.partial(fn, replicas[index % len(replicas)], *args, **kwargs)
            nursery.start_soon(attempt, index, call)

        launch()
        running = 1
        next_at = trio.current_time() + delay
        while True:
            wait_until = math.inf
            if len(starts) < max_attempts and next_at != math.inf:
                wait_until = next_at
            message = None
            with trio.move_on_at(wait_until):
                message = await receive.receive()
            if message is None:
                # The delay passed with every attempt still running: hedge.
                passed = HedgeDelayPassed(f"no answer after {delay:.3f} s")
                if policy.admit(passed, len(starts) + 1):
                    launch()
                    running += 1
                    next_at = trio.current_time() + delay
                else:
                    next_at = math.inf
                continue
            index, ok, payload = message
            running -= 1
            if ok:
                policy.on_success(clock.now() - started, index + 1)
                found.append(payload)
                break
            if policy.on_error(payload, clock.now() - starts[index]):
                failure = payload
                break
            if not running:
                if len(starts) < max_attempts and policy.admit(payload, len(starts) + 1):
                    launch()  # gRPC hedging: a retryable failure sends the next at once
                    running += 1
                    next_at = trio.current_time() + delay
                    continue
                failure = payload
                break
        # The losers are cancelled; leaving the nursery waits for them to unwind.
        settled = True
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return found[0]
