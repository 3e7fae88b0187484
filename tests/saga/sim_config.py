"""The simulation's schedules: what each is made of, drawn from its seed (:class:`Config`),
and what it found (:class:`Result`, :class:`Violation`)."""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import inspect
import random
from collections.abc import Sequence

from seawall import saga

S = saga.Status

#: The saga every schedule runs, and its step names (a definition is a tuple of them).
SAGA = "order"
NAMES = ("reserve", "charge", "ship", "notify", "audit", "invoice", "pack", "label")
#: The steps that wait, in schedules that have one: a timer, and a wait for a signal.
SLEEP, SIGNAL = "nap", "paid"
SLEEP_SECONDS, SIGNAL_TIMEOUT = 3.0, 15.0
START = 1_700_000_000.0
LEASE = 10.0
BACKOFF_CAP = 4.0
#: Schedules of a default run (``SEAWALL_SIM_SCHEDULES`` raises it).
DEFAULT_SCHEDULES = 2000
#: A schedule that calls steps or commits more often than this has run away (a loop).
MAX_CALLS = 600
MAX_COMMITS = 3000
DRAIN_ROUNDS = 40
#: How often another worker runs ``run_due`` while a step runs (for a tenth of the lease or so).
MEANWHILE = 0.2

#: Whether the orchestrator judges leases on a clock of its own (the store's), and whether a
#: saga has versions: the harness uses both where they exist.
STORE_CLOCK = "store_clock" in inspect.signature(saga.Orchestrator).parameters
VERSIONS = "version" in inspect.signature(saga.Saga).parameters
#: Whether the orchestrator runs several attempts at once (``concurrency=``), and whether a
#: process of its own renews its leases (one a busy step cannot starve, as a thread can be).
#: The harness stands in for both: the attempts of a group run one after another once begun
#: together, and the keeper's renewals are ticks of the harness's heartbeat.
CONCURRENCY = "concurrency" in inspect.signature(saga.Orchestrator).parameters
KEEPER = importlib.util.find_spec("seawall.saga._keeper") is not None

FAULTS = ("crash", "side_crash", "skew", "slow", "deploy", "failures", "outage", "operator")


def show(names: Sequence[str], version: int | None = None) -> str:
    return ",".join(names) + ("" if version is None else f"@v{version}")


@dataclasses.dataclass(frozen=True)
class Violation:
    invariant: str
    seed: int
    op: int
    message: str
    known: bool

    def __str__(self) -> str:
        flag = " (known open)" if self.known else ""
        return f"seed {self.seed}, operation {self.op}: {self.invariant}{flag}: {self.message}"


def replay_command(seed: int) -> str:
    return f"python tests/saga/simulation.py --seed {seed} --trace"


@dataclasses.dataclass
class Config:
    """What a schedule is made of, drawn from its seed."""

    faults: frozenset[str]
    renewed: bool  # a slow step leaves its worker's renewing thread alone
    keeper_down: bool  # the keeper process is not running (where the orchestrator has one)
    batch: int
    concurrency: int
    runs: int
    ops: int
    names: tuple[str, ...]
    compensated: frozenset[str]
    attempts: dict[str, int]
    delayed: frozenset[str]
    on_exhausted: dict[str, str]
    forced: bool = False  # operators break live leases (--force) three times in ten
    asynchronous: frozenset[str] = frozenset()  # steps whose functions are ``async def``
    timeout: float | None = None  # each run's deadline (Saga(timeout=...)), from its start
    wait: str | None = None  # a step of the saga that waits: SLEEP or SIGNAL (in names)

    @property
    def tags(self) -> frozenset[str]:
        tags = set(self.faults & {"skew", "deploy", "failures", "outage", "operator"})
        if self.forced:
            tags.add("forced_lease")
        if self.timeout is not None:
            tags.add("deadline")
        if self.wait is not None:
            tags.add("sleep" if self.wait == SLEEP else "signal")
        asynchronous = self.asynchronous & set(self.names)  # (those of the saga's steps)
        if asynchronous:
            tags.add("async")
            if self.forced:
                tags.add("async_forced_lease")
        if self.faults & {"crash", "side_crash"}:
            tags.add("batch_crash" if self.batch > 1 or self.concurrency > 1 else "crash")
        if "slow" in self.faults:
            tags.add("slow_step" if self.renewed else "starved_lease")
            if not self.renewed and self.keeper_down:
                tags.add("keeper_down")
                if asynchronous:
                    tags.add("async_keeper_down")
            if self.batch > 1:
                tags.add("batch_slow")
        return frozenset(tags)


def draw_config(rng: random.Random) -> Config:
    faults = frozenset(f for f in FAULTS if rng.random() < (0.5 if f == "failures" else 0.3))
    size = rng.randint(2, 4)
    names = tuple(NAMES[:size])
    config = Config(
        faults=faults,
        renewed=rng.random() < 0.5,
        keeper_down=KEEPER and rng.random() < 0.5,
        batch=rng.choice((1, 1, 2, 32)),
        concurrency=rng.choice((1, 2, 4)) if CONCURRENCY else 1,
        runs=rng.randint(1, 4),
        ops=rng.randint(8, 16),
        names=names,
        compensated=frozenset(n for n in NAMES if rng.random() < 0.6),
        attempts={n: rng.randint(2, 4) for n in NAMES},
        delayed=frozenset(n for n in NAMES if rng.random() < 0.4),
        on_exhausted={n: rng.choice(("compensate",) * 8 + ("fail", "park")) for n in NAMES},
        forced="operator" in faults and rng.random() < 0.5,
        asynchronous=(
            frozenset(n for n in NAMES if rng.random() < 0.5) if rng.random() < 0.3 else frozenset()
        ),
        timeout=rng.choice((2.0, 8.0, 20.0)) if rng.random() < 0.3 else None,
    )
    if rng.random() < 0.3:  # a durable timer, or a wait for a signal, among the steps
        config.wait = rng.choice((SLEEP, SIGNAL))
        at = rng.randint(0, len(names))
        config.names = (*names[:at], config.wait, *names[at:])
    return config


def mutate(names: tuple[str, ...], rng: random.Random) -> tuple[tuple[str, ...], str]:
    """A changed definition: a step inserted, removed, renamed or moved."""
    kinds = ["insert", "rename"] + (["remove", "move"] if len(names) > 1 else [])
    kind = rng.choice(kinds)
    fresh = [n for n in NAMES if n not in names]
    steps = list(names)
    if kind == "insert" and fresh:
        steps.insert(rng.randint(0, len(steps)), rng.choice(fresh))
    elif kind == "rename" and fresh:
        steps[rng.randrange(len(steps))] = rng.choice(fresh)
    elif kind == "remove":
        del steps[rng.randrange(len(steps))]
    else:
        i = rng.randrange(len(steps) - 1)
        steps[i], steps[i + 1] = steps[i + 1], steps[i]
        kind = "move"
    return tuple(steps), kind


@dataclasses.dataclass
class Result:
    seed: int
    tags: frozenset[str]
    batch: int
    concurrency: int
    violations: list[Violation]
    trace: list[str]
    stats: collections.Counter[str]

    @property
    def failures(self) -> list[Violation]:
        return [v for v in self.violations if not v.known]


DONE_ACTION = frozenset({S.SUCCEEDED, S.COMPENSATING, S.COMPENSATED})
SETTLED = frozenset({S.SUCCEEDED, S.COMPENSATED, S.FAILED, S.NEEDS_ATTENTION})
