"""The public surface: every public class shows its public module, configurations pickle, and
importing seawall stays cheap."""

from __future__ import annotations

import concurrent.futures
import importlib
import pickle
import pkgutil
import random
import subprocess
import sys
import types

import pytest

import seawall

PUBLIC_MODULES = (
    "seawall",
    "seawall.lowlevel",
    "seawall.propagation",
    "seawall.config",
    "seawall.http",
    "seawall.testing",
    "seawall.faults",
    "seawall.instrumentation",
    "seawall.server",
    "seawall.grpc",
    "seawall.redis",
    "seawall.httpx",
    "seawall.requests",
    "seawall.aiohttp",
    "seawall.web",
    "seawall.saga",
    "seawall.sim",
)
# Names that still show a private module (none).
NOT_YET: set[str] = set()


def test_every_public_package_is_listed() -> None:
    packages = {
        f"seawall.{info.name}"
        for info in pkgutil.iter_modules(seawall.__path__)
        if not info.name.startswith("_") and info.name not in ("cli", "pytest_plugin")
    }
    assert packages <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_names_show_a_public_module(name: str) -> None:
    module = pytest.importorskip(name)  # the integrations need their extras
    private = []
    for attr in module.__all__:
        obj = getattr(module, attr)
        if isinstance(obj, (type, types.FunctionType)):
            private_home = any(part.startswith("_") for part in obj.__module__.split("."))
            if private_home and f"{obj.__module__}.{attr}" not in NOT_YET:
                private.append(f"{attr}: {obj.__module__}")
            # And that module really exports it (pickle and the docs look it up there).
            assert getattr(importlib.import_module(obj.__module__), obj.__name__) is obj
    assert private == []
    assert repr(seawall.RetryPolicy) == "<class 'seawall.RetryPolicy'>"


def test_saga_and_sim_reprs_name_their_public_package() -> None:
    from seawall import saga, sim

    assert repr(saga.Step) == "<class 'seawall.saga.Step'>"
    assert repr(saga.Status.SUCCEEDED).startswith("<Status.SUCCEEDED")
    assert saga.Orchestrator.__module__ == "seawall.saga"
    assert repr(sim.SweepRow) == "<class 'seawall.sim.SweepRow'>"
    assert sim.storm.__module__ == "seawall.sim"
    assert seawall.retry.__module__ == "seawall"


def test_saga_and_sim_values_pickle_by_their_public_names() -> None:
    from seawall import saga, sim

    values = (saga.Status.SUCCEEDED, saga.Step, saga.Orchestrator, sim.sweep, sim.SimClock)
    for obj in (*values, seawall.retry):
        data = pickle.dumps(obj)
        assert b"seawall.saga._" not in data and b"seawall.sim._" not in data
        assert pickle.loads(data) is obj
    err = pickle.loads(pickle.dumps(saga.SchemaVersionError("schema 9 is newer")))
    assert type(err) is saga.SchemaVersionError and str(err) == "schema 9 is newer"
    step = pickle.loads(pickle.dumps(saga.Step("reserve", _reserve, on_exhausted="park")))
    assert (step.name, step.action, step.on_exhausted) == ("reserve", _reserve, "park")


def _reserve(ctx: object) -> dict[str, bool]:
    return {"ok": True}


def _configurations() -> list[object]:
    clock = seawall.VirtualClock(start=5.0)
    return [
        seawall.Backoff(base=0.2, cap=5.0, jitter="equal"),
        seawall.RetryBudget(ratio=0.2, min_per_second=3.0, window=30.0, clock=clock),
        seawall.TokenBucket(max_tokens=4, token_ratio=0.5),
        seawall.RetryQuota.aws_standard(),
        seawall.AdaptiveThrottle(k=1.5, window=60.0, rng=random.Random(3), min_requests=5),
        seawall.CircuitBreaker(failure_ratio=0.3, minimum_calls=5, name="db", clock=clock),
        seawall.RetryPolicy(
            max_attempts=4,
            backoff=seawall.Backoff(0.5),
            retry_on=(ConnectionError, KeyError),
            timeout=30.0,
            budget=seawall.TokenBucket(),
            rng=random.Random(1),
            name="users",
        ),
    ]


@pytest.mark.parametrize("obj", _configurations(), ids=lambda o: type(o).__name__)
def test_configurations_pickle(obj: object) -> None:
    copy = pickle.loads(pickle.dumps(obj))
    assert type(copy) is type(obj)
    assert repr(copy).split("(")[0] == repr(obj).split("(")[0]
    if isinstance(obj, seawall.RetryPolicy):
        assert isinstance(copy, seawall.RetryPolicy)
        assert copy.replace(budget=None, rng=None) == obj.replace(budget=None, rng=None)
        assert isinstance(copy.budget, seawall.TokenBucket)
        assert copy.budget is not obj.budget  # the budget travels as its configuration
    elif isinstance(obj, seawall.Backoff):
        assert copy == obj
    else:
        for attr in (
            "ratio",
            "min_per_second",
            "window",
            "max_tokens",
            "token_ratio",
            "k",
            "min_requests",
            "capacity",
            "retry_cost",
            "failure_ratio",
            "minimum_calls",
            "name",
        ):
            if hasattr(obj, attr):
                assert getattr(copy, attr) == getattr(obj, attr), attr


def _flaky_in_a_worker(policy: seawall.RetryPolicy) -> int:
    calls = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("transient")
        return len(calls)

    with seawall.testing.instant():
        return policy.call(flaky)


def test_a_policy_runs_in_a_process_pool() -> None:
    policy = seawall.RetryPolicy(max_attempts=3, hooks=(), budget=seawall.RetryBudget())
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        assert pool.submit(_flaky_in_a_worker, policy).result(timeout=60) == 3


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_import_seawall_loads_nothing_heavy() -> None:
    loaded = _modules_after("import seawall")
    assert "asyncio" not in loaded
    assert not {m for m in loaded if m.startswith("seawall._strategies")}
    used = _modules_after("import seawall\nseawall.RetryPolicy(budget=seawall.RetryBudget())")
    assert "asyncio" not in used


def test_the_readme_first_names_are_reachable_from_import_seawall_alone() -> None:
    loaded = _modules_after(
        "import seawall\nseawall.httpx.RetryTransport\nseawall.requests\nseawall.server\n"
        "seawall.testing.instant"
    )
    assert {"seawall.httpx", "seawall.requests", "seawall.server", "seawall.testing"} <= loaded
