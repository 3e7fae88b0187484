"""Counting the instructions a benchmark's contender executes, under valgrind's cachegrind.

A script using this runs itself as ``SCRIPT --child KIND N`` (make *N* calls of the contender
*KIND*); :func:`per_call` runs that child under valgrind twice (a warm-up, then the warm-up and
the calls) and gives the difference per call, so start-up and imports cancel out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable

#: The children's whole environment, the same on every machine and run: requests reads the
#: proxy variables on every request, and a different environment (another variable, a longer
#: PATH) moved the bare requests count by up to 30,000 instructions and seawall's excess
#: over it between +12,000 and +20,000. Fixed hashing, for the same reason.
CHILD_ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}


def require_valgrind() -> None:
    """Exit with a message when valgrind is not on the PATH."""
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is needed: apt-get install valgrind")


def child_environment(src: str | None = None) -> dict[str, str]:
    """CHILD_ENVIRONMENT, with *src* (another copy of seawall) or else this process's
    PYTHONPATH if it has one: a checkout measured with ``PYTHONPATH=src`` is the seawall its
    children import, not an installed one."""
    path = src or os.environ.get("PYTHONPATH")
    return CHILD_ENVIRONMENT if not path else {**CHILD_ENVIRONMENT, "PYTHONPATH": path}


def _child(script: str, kind: str, number: int) -> list[str]:
    return [sys.executable, os.path.abspath(script), "--child", kind, str(number)]


def warm(script: str, kinds: Iterable[str], sources: Iterable[str | None] = (None,)) -> None:
    """Run each contender once outside valgrind, from each source tree: a module whose bytecode
    cache is stale (a changed source) is compiled by the first process that imports it, which
    must not be a counted one."""
    kinds = list(kinds)
    for src in sources:
        for kind in kinds:
            subprocess.run(_child(script, kind, 1), env=child_environment(src), check=True)


def instructions(script: str, kind: str, number: int, src: str | None = None) -> int:
    """Instructions executed by *script* making *number* calls of *kind*, importing seawall
    from *src* (else as this process does)."""
    valgrind = shutil.which("valgrind") or "valgrind"
    out = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *_child(script, kind, number),
        ],
        env=child_environment(src),
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out}")
    return int(found.group(1).replace(",", ""))


def per_call(script: str, kind: str, calls: int, warmup: int, src: str | None = None) -> float:
    """Instructions per call of *kind*: *calls* calls after *warmup*, start-up subtracted."""
    total = instructions(script, kind, warmup + calls, src)
    return (total - instructions(script, kind, warmup, src)) / calls
