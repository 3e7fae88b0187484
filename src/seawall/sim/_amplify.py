"""Scenario ``amplify``: how nested retries multiply the load on a failing dependency."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from seawall._core import validate as _validate
from seawall._core.clock import VirtualClock
from seawall._strategies.backoff import Backoff
from seawall._strategies.budget import RetryBudget
from seawall._strategies.retry import RetryPolicy
from seawall.sim._metrics import retry_hooks
from seawall.sim._util import check_volume, isolated, simulate, trial_rng

__all__ = ["AMPLIFY_STRATEGIES", "AmplifyResult", "AmplifyRow", "amplify"]

AMPLIFY_STRATEGIES: tuple[str, ...] = ("naive", "one_layer", "budget", "budget_every_layer")


class LeafDown(ConnectionError):
    """The leaf dependency failed the call."""


@dataclasses.dataclass(frozen=True, slots=True)
class AmplifyRow:
    """Leaf load for one strategy.

    Attributes:
        strategy: one of :data:`AMPLIFY_STRATEGIES`.
        leaf_calls: calls the leaf received, all requests together.
        per_request: ``leaf_calls / requests``: the amplification.
        bound: what the arithmetic predicts.
    """

    strategy: str
    leaf_calls: int
    per_request: float
    bound: float


@dataclasses.dataclass(frozen=True, slots=True)
class AmplifyResult:
    """The result of :func:`amplify`."""

    layers: int
    attempts: int
    requests: int
    ratio: float
    rows: tuple[AmplifyRow, ...]

    def row(self, strategy: str) -> AmplifyRow:
        for r in self.rows:
            if r.strategy == strategy:
                return r
        raise KeyError(strategy)


@isolated
def amplify(
    layers: int = 3,
    attempts: int = 4,
    requests: int = 1000,
    *,
    ratio: float = 0.1,
    rate: float = 10.0,
    seed: int = 0,
) -> AmplifyResult:
    """Send *requests* through *layers* services, each retrying, to a leaf that always fails.

    Every layer is a real :class:`~seawall.RetryPolicy` with ``max_attempts=attempts`` whose
    function calls the next layer's policy; the innermost one calls the leaf. Calls run through
    the real synchronous driver on a virtual clock, one request every ``1/rate`` seconds. The
    defaults are the Google SRE book's example (ch. 22, "Addressing Cascading Failures"): 3
    retries, so 4 attempts, at each of 3 layers: 64 calls at the leaf for one request.

    Strategies:

    - ``naive``: every layer retries every error (``retry_nested=True``): ``attempts**layers``.
    - ``one_layer``: seawall's default: a layer passes through an error the layer below already
      retried, so only the innermost retries: ``attempts``.
    - ``budget``: the default plus a :class:`~seawall.RetryBudget` of ``ratio`` per layer:
      about ``1 + ratio``.
    - ``budget_every_layer``: every layer retries and each has a budget: at most
      ``(1 + ratio)**layers``.

    The budgets have no per-second floor here (``min_per_second=0``): the floor exists so that a
    quiet client can still retry, and at this request rate it would hide the ratio.

    Args:
        layers: services stacked above the leaf (L).
        attempts: attempts per call at each layer (A).
        requests: logical requests sent to the top layer.
        ratio: the retry budgets' ratio.
        rate: requests per second at the top (virtual time).
        seed: the seed for the backoff jitter.

    Returns:
        An :class:`AmplifyResult`.
    """
    layers = _validate.count("layers", layers, minimum=1)
    attempts = _validate.count("attempts", attempts, minimum=1)
    requests = _validate.count("requests", requests, minimum=1)
    ratio = _validate.ratio("ratio", ratio)
    if ratio == 0:
        raise ValueError("ratio must be > 0, got 0")
    rate = _validate.number("rate", rate, minimum=0.0, above=True, finite=True)
    seed = _validate.count("seed", seed, minimum=0)
    if attempts**layers > 10**7:
        raise ValueError(f"attempts**layers must be <= 10**7, got {attempts}**{layers}")
    check_volume("requests * attempts**layers", requests * attempts**layers)
    rows = []
    for strategy in AMPLIFY_STRATEGIES:
        calls, bound = simulate(_run, strategy, layers, attempts, requests, ratio, rate, seed)
        rows.append(AmplifyRow(strategy, calls, calls / requests, bound))
    return AmplifyResult(layers, attempts, requests, ratio, tuple(rows))


def _run(
    strategy: str, layers: int, attempts: int, requests: int, ratio: float, rate: float, seed: int
) -> tuple[int, float]:
    clock = VirtualClock()
    rng = trial_rng(seed, "amplify", strategy)
    nested = strategy in ("naive", "budget_every_layer")
    with_budget = strategy in ("budget", "budget_every_layer")
    leaf_calls = 0

    def leaf() -> None:
        nonlocal leaf_calls
        leaf_calls += 1
        clock.sleep(0.001)
        raise LeafDown("leaf unavailable")  # a fresh instance per failure: policies mark it

    call: Callable[[], None] = leaf
    for _ in range(layers):
        policy = RetryPolicy(
            max_attempts=attempts,
            backoff=Backoff(base=0.001, cap=0.01),
            budget=RetryBudget(ratio=ratio, min_per_second=0.0, clock=clock)
            if with_budget
            else None,
            retry_nested=nested,
            clock=clock,
            rng=rng,
            name="amplify",
            hooks=retry_hooks(),
        )
        call = _layer(policy, call)
    interval = 1.0 / rate
    for _ in range(requests):
        start = clock.now()
        with contextlib.suppress(LeafDown):
            call()
        clock.advance(max(0.0, start + interval - clock.now()))
    if strategy == "naive":
        bound = float(attempts**layers)
    elif strategy == "one_layer":
        bound = float(attempts)
    elif strategy == "budget":
        bound = min(float(attempts), 1.0 + ratio)
    else:
        bound = min(float(attempts), 1.0 + ratio) ** layers
    return leaf_calls, bound


def _layer(policy: RetryPolicy, inner: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        policy.call(inner)

    return call
