"""Figures the fuzz and soak runs produce, for ``docs/reliability.md``.

Each run writes one JSON file, ``<name>.json``, into the directory named by the environment
variable ``SEAWALL_FIGURES`` (``make reliability`` sets it to ``docs/figures``), else into
``.figures/`` at the top of the checkout (ignored by git). ``scripts/reliability.py`` renders the
page's tables from the files in ``docs/figures``; ``tests/test_reliability_docs.py`` checks that
the page shows what those files say.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent


def figures_dir() -> pathlib.Path:
    chosen = os.environ.get("SEAWALL_FIGURES")
    return pathlib.Path(chosen) if chosen else ROOT / ".figures"


def record_figures(name: str, figures: dict[str, Any]) -> pathlib.Path:
    """Write *figures* (with the Python version and CPU count of the run) to ``<name>.json``."""
    import seawall

    directory = figures_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    data = {
        "run": {
            "seawall": seawall.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        **figures,
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
