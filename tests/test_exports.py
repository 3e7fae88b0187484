"""The top level: a curated, sorted ``__all__``, loaded lazily, with the old names deprecated."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import seawall


def test_all_is_sorted_without_duplicates() -> None:
    assert seawall.__all__ == sorted(set(seawall.__all__))


def test_all_is_complete() -> None:
    # Every name and module the lazy top level can load is exported, and nothing else is.
    assert set(seawall.__all__) == set(seawall._NAMES) | seawall._MODULES
    assert not set(seawall.__all__) & set(seawall._MOVED)


@pytest.mark.parametrize("name", seawall.__all__)
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(seawall, name)
    if name in seawall._MODULES:
        assert isinstance(value, types.ModuleType)
        assert value.__name__ == f"seawall.{name}"
    else:
        assert value is getattr(importlib.import_module(seawall._NAMES[name]), name)
    assert getattr(seawall, name) is value  # the second lookup finds the same object


def test_dir_lists_every_exported_name_and_the_version() -> None:
    assert set(dir(seawall)) == {*seawall.__all__, "__version__"}
    assert dir(seawall) == sorted(dir(seawall))


@pytest.mark.parametrize("name", sorted(seawall._MOVED))
def test_a_moved_name_warns_and_still_resolves(name: str) -> None:
    home = seawall._MOVED[name]
    expected = getattr(importlib.import_module(home), name)
    for _ in range(2):  # every use warns, not only the first
        with pytest.warns(DeprecationWarning, match=rf"seawall\.{name} moved to {home}\.{name}"):
            assert getattr(seawall, name) is expected
    assert name not in dir(seawall)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'retry_forever'"):
        seawall.retry_forever  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(seawall, "_strategies_retry")


def test_import_seawall_loads_neither_asyncio_nor_the_strategies() -> None:
    code = (
        "import sys\n"
        "import seawall\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m == 'asyncio' or m.startswith(('asyncio.', 'seawall._strategies'))))\n"
        "seawall.RetryPolicy\n"  # first use loads what the name needs
        "print('seawall._strategies.retry' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["[]", "True"]
