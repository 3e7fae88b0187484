"""Fixtures: SQLite files in tmp_path, and a throwaway PostgreSQL cluster on a loopback port.

The cluster is started once per session as the user ``postgres`` (initdb into a temporary
directory owned by that user, then ``pg_ctl start``) and stopped at the end; each test gets a
database of its own. Without a PostgreSQL server the PostgreSQL tests are skipped, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import pathlib
import sys
import uuid
from collections.abc import Iterator

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from postgres_cluster import Cluster  # noqa: E402 - after the path is set


def _started() -> Cluster:
    """A new cluster; one that cannot start fails the test in CI, and skips it elsewhere."""
    try:
        return Cluster()
    except Exception as err:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL could not start: {err}")
        pytest.skip(f"PostgreSQL could not start: {err}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL of the session's PostgreSQL cluster (database ``postgres``)."""
    cluster = _started()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of the test's own (one it restarts)."""
    cluster = _started()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database on the session's cluster."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = postgres_server.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: pathlib.Path) -> str:
    return f"sqlite:///{tmp_path}/saga.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """Each store in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/saga.db"
    return str(request.getfixturevalue("pg_url"))
