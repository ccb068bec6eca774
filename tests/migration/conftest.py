"""Fixtures of the migration tests: new empty databases on the test server (the server
fixtures live in ``tests/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo


@pytest.fixture(scope="module")
def new_database(pg_admin_dsn: str) -> Iterator[Callable[[], str]]:
    """A factory of empty databases (from ``template0``), all dropped after the test module.

    Each call returns a psycopg connection string for a new database.
    """
    made: list[str] = []

    def make() -> str:
        name = f"m_{uuid.uuid4().hex}"
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name))
            )
        made.append(name)
        return make_conninfo(pg_admin_dsn, dbname=name)

    yield make
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
