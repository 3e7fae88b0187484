"""The admission core every load shedder drives (ASGI, aiohttp, WSGI), without any I/O."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from seawall import VirtualClock
from seawall.server._admission import EXPIRED, Admission, Ticket, parse_priority
from seawall.server.wsgi import LoadShedder as WsgiShedder


class Woken:
    """The wake callback: records each ticket as its decision arrives."""

    def __init__(self) -> None:
        self.order: list[tuple[Ticket, str | None]] = []

    def __call__(self, ticket: Ticket) -> None:
        self.order.append((ticket, ticket.result))


def queued(adm: Admission, woken: Woken, priority: int = 3) -> Ticket:
    ticket = adm.enter(priority, None, woken)
    assert isinstance(ticket, Ticket)
    return ticket


def test_runs_at_once_up_to_the_limit_then_queues() -> None:
    adm = Admission(max_concurrency=2, max_queue=2)
    woken = Woken()
    assert adm.enter(3, None, woken) is None
    assert adm.enter(3, None, woken) is None
    ticket = queued(adm, woken)
    assert ticket.waiting and ticket.wait == 1.0
    assert (adm.stats.in_flight, adm.stats.queued, adm.stats.admitted) == (2, 1, 2)


def test_a_released_slot_goes_to_the_newest_most_urgent_waiter() -> None:
    adm = Admission(max_concurrency=1, max_queue=3)
    woken = Woken()
    adm.enter(3, None, woken)
    old, new, urgent = queued(adm, woken), queued(adm, woken), queued(adm, woken, priority=1)
    adm.release()
    adm.release()
    adm.release()
    assert [t for t, _ in woken.order] == [urgent, new, old]
    assert all(result is None for _, result in woken.order)
    adm.release()
    assert (adm.stats.in_flight, adm.stats.queued, adm.stats.admitted) == (0, 0, 4)


def test_a_full_queue_evicts_its_least_urgent_oldest_waiter() -> None:
    adm = Admission(max_concurrency=1, max_queue=2)
    woken = Woken()
    adm.enter(3, None, woken)
    low_old, low_new = queued(adm, woken, priority=5), queued(adm, woken, priority=5)
    queued(adm, woken, priority=2)  # more urgent: the oldest least urgent one makes room
    assert woken.order == [(low_old, "priority")]
    queued(adm, woken, priority=5)  # as urgent as the victim: it is evicted as queue_full
    assert woken.order[-1] == (low_new, "queue_full")
    assert adm.enter(7, None, woken) == "queue_full"  # less urgent than every waiter
    assert adm.stats.shed == {"queue_full": 2, "priority": 1, "queue_timeout": 0, "deadline": 0}


def test_no_queue_at_all_sheds_at_once() -> None:
    adm = Admission(max_concurrency=1, max_queue=0)
    adm.enter(3, None, Woken())
    assert adm.enter(0, None, Woken()) == "queue_full"


def test_a_wait_ends_at_max_queue_wait_or_at_the_deadline() -> None:
    clock = VirtualClock()
    adm = Admission(max_concurrency=1, max_queue=4, max_queue_wait=2.0, clock=clock)
    woken = Woken()
    adm.enter(3, None, woken)
    slow = queued(adm, woken)
    at = adm.intake([("x-request-deadline", "500")])
    assert not isinstance(at, str) and at is not None
    soon = adm.enter(3, at, woken)
    assert isinstance(soon, Ticket) and soon.wait == pytest.approx(0.5)
    adm.expire(slow)
    adm.expire(soon)
    assert woken.order == [(slow, "queue_timeout"), (soon, "deadline")]
    adm.expire(slow)  # already decided: nothing changes
    assert len(woken.order) == 2 and adm.stats.queued == 0


def test_abandoning_frees_what_the_caller_held() -> None:
    adm = Admission(max_concurrency=1, max_queue=2)
    woken = Woken()
    adm.enter(3, None, woken)
    gone, granted = queued(adm, woken), queued(adm, woken)
    adm.abandon(gone)  # left while waiting: unlinked, not counted as shed
    assert not gone.waiting and adm.stats.queued == 1
    assert sum(adm.stats.shed.values()) == 0
    adm.release()  # the slot passes to `granted`...
    assert woken.order == [(granted, None)]
    adm.abandon(granted)  # ...which went away at once: the slot is free again
    assert adm.stats.in_flight == 0


def test_intake_reads_the_deadline_and_caps_it() -> None:
    clock = VirtualClock(start=100.0)
    adm = Admission(max_concurrency=1, max_request_time=3.0, clock=clock)
    at = adm.intake([(b"x-request-deadline", b"10000")])
    assert not isinstance(at, str) and at is not None and at.at == pytest.approx(103.0)
    assert adm.intake([("grpc-timeout", "0m")]) == EXPIRED
    assert adm.stats.shed["deadline"] == 1
    unlimited = Admission(max_concurrency=1)
    assert unlimited.intake([]) is None
    assert Admission(max_concurrency=1, deadlines=False).intake([("grpc-timeout", "0m")]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 3),
        (b"1", 1),
        ("u=2, i", 2),
        ("9", 7),
        ("\u0663", 3),  # an Arabic-Indic digit: isdigit(), but not a priority
        (b"\xff", 3),
        ("x" * 65, 3),
    ],
)
def test_priority_values(value: Any, expected: int) -> None:
    assert parse_priority(value) == expected


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 1, "max_queue": -1}, "max_queue"),
        ({"max_concurrency": 1, "status": 500}, "status"),
        ({"max_concurrency": 1, "priority_header": ""}, "priority_header"),
        ({"max_concurrency": 1, "metrics": object()}, "metrics"),
        ({"max_concurrency": 1, "clock": object()}, "clock"),
    ],
)
def test_bad_configuration_names_the_parameter(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        Admission(**kwargs)


def test_wsgi_reads_the_priority_header_from_the_environ() -> None:
    """A full WSGI queue sheds its least urgent waiter for a more urgent newcomer."""
    release = threading.Event()
    started = threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        started.set()
        release.wait(10)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    shedder = WsgiShedder(
        app, max_concurrency=1, max_queue=1, max_queue_wait=10.0, priority_header="Priority"
    )
    statuses: dict[str, str] = {}

    def call(name: str, priority: str | None) -> None:
        environ: dict[str, Any] = {} if priority is None else {"HTTP_PRIORITY": priority}
        body = shedder(environ, lambda status, headers: statuses.__setitem__(name, status))
        close = getattr(body, "close", None)
        if close is not None:
            close()

    running = threading.Thread(target=call, args=("running", None))
    running.start()
    assert started.wait(10)
    low = threading.Thread(target=call, args=("low", "u=6"))
    low.start()
    for _ in range(1000):
        if shedder.stats.queued:
            break
        threading.Event().wait(0.01)
    urgent = threading.Thread(target=call, args=("urgent", "u=0"))
    urgent.start()
    low.join(10)
    assert statuses["low"].startswith("503")
    release.set()
    running.join(10)
    urgent.join(10)
    assert statuses == {"low": statuses["low"], "running": "200 OK", "urgent": "200 OK"}
    assert shedder.stats.shed["priority"] == 1 and shedder.stats.in_flight == 0
