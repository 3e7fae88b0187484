"""The records of a worker's round: a claimed run, the attempt it is running, its outcome."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from seawall._strategies.retry import RetryState
from seawall.saga._model import Saga, SagaEvent, StepContext
from seawall.saga._rows import Loaded

__all__ = ["Outcome", "Pending", "Work", "is_async"]


@dataclasses.dataclass(slots=True)
class Pending:
    """An attempt the log says has started: run it, then record its outcome."""

    index: int
    phase: str  # "action" | "compensation"
    state: RetryState
    deadline: float  # wall clock; inf for none
    fn: Callable[[StepContext], Any]
    ctx: StepContext
    started: float
    is_async: bool
    #: Whether its outcome was put to its policy (the budget told, the policy's hooks heard):
    #: by a recording whose commit may have been lost (:meth:`Transitions.resumed`).
    told: bool = False


class Outcome(NamedTuple):
    """How an attempt ended."""

    ok: bool  # it returned (else it raised)
    value: Any  # what it returned, or the exception it raised
    duration: float  # seconds it took, on the worker's clock


class Work:
    """A claimed run in a round: its rows, the attempt it is running, and the events to emit."""

    __slots__ = ("events", "loaded", "lost", "outcome", "pending", "problem", "saga", "token")

    def __init__(self, loaded: Loaded, saga: Saga | None, problem: str | None = None) -> None:
        self.loaded = loaded
        #: The definition the run started under; ``None`` when it is not registered here
        #: (``problem`` says why): the run parks, and no function runs for it.
        self.saga: Saga = saga  # type: ignore[assignment]
        self.problem = problem
        self.token = loaded.run.token
        self.pending: Pending | None = None
        self.outcome: Outcome | None = None
        self.lost = False
        self.events: list[SagaEvent] = []


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether *fn* is ``async def`` (a function, or a callable object's ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )
