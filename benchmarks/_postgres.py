"""A throwaway PostgreSQL cluster for the saga benchmarks: the test suite's own
(tests/saga/postgres_cluster.py), with fsync on."""

from __future__ import annotations

import pathlib
import sys
from typing import Any


def start_postgres() -> tuple[Any, str] | None:
    """A started cluster and its URL, or ``None`` (and why, printed) when none can start."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "saga"))
    try:
        from postgres_cluster import Cluster  # the test suite's throwaway cluster, fsync on

        cluster = Cluster(durable=True)
    except Exception as err:
        print(f"PostgreSQL not measured: {err}")
        return None
    return cluster, cluster.url
