"""One deadline across a chain of hops, on virtual time: fail fast below, never outlive the edge."""

import anyio
import pytest

import seawall
from backends import Run
from seawall import DeadlineExceeded, RetryPolicy, VirtualClock

EDGE_DEADLINE = 1.0
WORK = 0.4  # what each hop needs to do its own work
TRANSIT = 0.002  # one-way network time between hops
MARGIN = 0.005  # what a caller keeps back for transit, above TRANSIT


class Chain:
    """Three services; each does WORK seconds of work, then calls the next one over 'the wire'.

    Requests carry only headers: each hop reads its deadline from them, as a server would, and
    writes the time it has left into the next request's headers.
    """

    def __init__(self, clock: VirtualClock, *, careful: bool = True, hops: int = 3) -> None:
        self.clock = clock
        self.careful = careful  # hops refuse work they cannot finish (min_attempt_time)
        self.hops = hops
        self.log: list[tuple[int, str, float]] = []

    async def send(self, hop: int, headers: dict[str, str]) -> str:
        await anyio.sleep(TRANSIT)
        return await self.serve(hop, headers)

    async def serve(self, hop: int, headers: dict[str, str]) -> str:
        clock = self.clock
        policy = RetryPolicy(
            max_attempts=3, min_attempt_time=WORK if self.careful else 0.0, clock=clock, hooks=()
        )

        async def work() -> str:
            self.log.append((hop, "start", clock.now()))
            await anyio.sleep(WORK)
            self.log.append((hop, "worked", clock.now()))
            if hop == self.hops:
                return f"answer from hop {hop}"
            return await self.send(hop + 1, seawall.propagation.deadline_headers(margin=MARGIN))

        try:
            async with seawall.propagation.deadline_from_headers(
                headers, max_seconds=30.0, clock=clock
            ):
                return await policy.acall(work)
        finally:
            self.log.append((hop, "end", clock.now()))

    async def edge(self) -> str:
        async with seawall.deadline(EDGE_DEADLINE, clock=self.clock):
            return await self.send(1, seawall.propagation.deadline_headers(margin=MARGIN))

    def events(self, what: str) -> dict[int, float]:
        return {hop: t for hop, kind, t in self.log if kind == what}


def test_third_hop_fails_fast_without_doing_work(run: Run) -> None:
    clock = VirtualClock()
    chain = Chain(clock)
    with pytest.raises(DeadlineExceeded, match=r"gave up before attempt 1: 0\.185 s left"):
        run(chain.edge(), clock)
    started, ended = chain.events("start"), chain.events("end")
    # Hops 1 and 2 did their work; hop 3 got ~0.19 s, less than the 0.4 s it needs, and did none.
    assert sorted(started) == [1, 2]
    assert started[1] == pytest.approx(TRANSIT)
    assert started[2] == pytest.approx(WORK + 2 * TRANSIT)
    assert 3 not in chain.events("worked")
    # The refusal came back at once instead of at the deadline...
    assert ended[3] == pytest.approx(2 * WORK + 3 * TRANSIT)
    assert clock.now() == pytest.approx(2 * WORK + 3 * TRANSIT)
    # ...and no hop outlived the edge deadline.
    assert max(ended.values()) <= EDGE_DEADLINE
    assert sorted(ended) == [1, 2, 3]


def test_time_left_shrinks_along_the_chain(run: Run) -> None:
    clock = VirtualClock()
    seen: list[float] = []
    chain = Chain(clock)
    original = chain.serve

    async def spy(hop: int, headers: dict[str, str]) -> str:
        seen.append(seawall.propagation.timeout_from_headers(headers, max_seconds=30.0))
        return await original(hop, headers)

    chain.serve = spy  # type: ignore[method-assign]
    with pytest.raises(DeadlineExceeded):
        run(chain.edge(), clock)
    # Each hop spends WORK and keeps back MARGIN; a hop's clock starts when the request arrives,
    # so transit comes out of the margin (which is why the margin must exceed it).
    expected = [EDGE_DEADLINE - k * MARGIN - (k - 1) * WORK for k in (1, 2, 3)]
    # Headers round down to whole microseconds.
    assert seen == pytest.approx(expected, abs=2e-6)


def test_chain_with_enough_time_answers(run: Run) -> None:
    clock = VirtualClock()
    chain = Chain(clock, hops=2)
    assert run(chain.edge(), clock) == "answer from hop 2"
    assert chain.events("worked") == pytest.approx({1: WORK + TRANSIT, 2: 2 * WORK + 2 * TRANSIT})


def test_a_careless_hop_is_cancelled_at_the_deadline(run: Run) -> None:
    # Hops that start work whatever the time left: the deadline scope cancels hop 3 mid-work.
    clock = VirtualClock()
    chain = Chain(clock, careful=False)
    with pytest.raises(DeadlineExceeded):
        run(chain.edge(), clock)
    assert sorted(chain.events("start")) == [1, 2, 3]
    assert 3 not in chain.events("worked")
    ended = chain.events("end")
    assert max(ended.values()) <= EDGE_DEADLINE
    # Hop 3 was cancelled at its own deadline: each hop kept back MARGIN, of which TRANSIT went
    # to the wire, so it falls 3 * (MARGIN - TRANSIT) before the edge's.
    assert ended[3] == pytest.approx(EDGE_DEADLINE - 3 * (MARGIN - TRANSIT), abs=2e-6)


def test_cancellation_at_the_deadline_reaches_child_tasks(run: Run) -> None:
    clock = VirtualClock()
    cancelled: list[tuple[str, float, float]] = []

    async def child(name: str, seconds: float) -> None:
        left = seawall.remaining()  # children inherit the ambient deadline
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cancelled.append((name, clock.now(), left))
            raise

    async def main() -> None:
        async with seawall.deadline(1.0, clock=clock):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(child, "a", 5.0)
                tasks.start_soon(child, "b", 50.0)
            raise AssertionError("not reached")  # pragma: no cover

    with pytest.raises(DeadlineExceeded, match="cancelled"):
        run(main(), clock)
    assert sorted(cancelled) == [("a", 1.0, 1.0), ("b", 1.0, 1.0)]

    cancelled.clear()
    clock2 = VirtualClock()
    clock = clock2

    async def with_three() -> None:
        async with seawall.deadline(0.5, clock=clock2), anyio.create_task_group() as tasks:
            for name, seconds in (("c", 3.0), ("d", 0.25), ("e", 9.0)):
                tasks.start_soon(child, name, seconds)

    with pytest.raises(DeadlineExceeded):
        run(with_three(), clock2)
    # "d" finished in time; the others were cancelled at the deadline.
    assert sorted(cancelled) == [("c", 0.5, 0.5), ("e", 0.5, 0.5)]


def test_nested_async_scopes_cancel_at_the_earlier_deadline(run: Run) -> None:
    clock = VirtualClock()

    async def main() -> None:
        async with (
            seawall.deadline(0.3, clock=clock),
            seawall.deadline(5.0, clock=clock) as inner,
        ):
            assert inner.at == pytest.approx(0.3)
            await anyio.sleep(1.0)

    with pytest.raises(DeadlineExceeded):
        run(main(), clock)
    assert clock.now() == pytest.approx(0.3)


def test_async_scope_that_finishes_in_time_does_not_raise(run: Run) -> None:
    clock = VirtualClock()

    async def main() -> float:
        async with seawall.deadline(1.0, clock=clock):
            await anyio.sleep(0.5)
            return seawall.remaining()

    assert run(main(), clock) == pytest.approx(0.5)
    assert seawall.remaining() == float("inf")
