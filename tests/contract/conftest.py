"""The contract suite's fixtures: one ``store`` with async methods, for every client.

Each test of ``tests/contract`` is written once, async, against ``store`` and runs
once per client: ``asyncpg`` (:class:`cwstore.AsyncStore`) and ``psycopg-sync``
(:class:`cwstore.Store`, each call run in a worker thread by :class:`ThreadedStore`,
here and nowhere else). The database is the module's throwaway ``db_dsn`` (see
``tests/conftest.py``); tests keep apart by using a fresh graph name each (``graph``).

With ``CWSTORE_TEST_POOLER_DSN`` (a transaction-mode pooler in front of the test
server), the stores reach that database through the pooler, with
``pooler="transaction"``; the other fixtures still connect directly.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.stores import ThreadedStore

from cwstore import AsyncStore, connect, connect_sync

CLIENTS = ["asyncpg", "psycopg-sync"]

# What does not hold yet on Citus (docs/scaling.md, "Limits"): marked as expected to
# fail there, strictly, so that each one that starts to pass fails the run until its
# line is removed. Keyed by "file::test" (every client's parameter).
CITUS_KNOWN_FAILURES: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On Citus (CWSTORE_TEST_CITUS_DSN), mark CITUS_KNOWN_FAILURES xfail(strict)."""
    if not os.environ.get("CWSTORE_TEST_CITUS_DSN"):
        return
    for item in items:
        key = f"{item.path.name}::{item.originalname}"  # type: ignore[attr-defined]
        if key in CITUS_KNOWN_FAILURES:
            item.add_marker(pytest.mark.xfail(reason=CITUS_KNOWN_FAILURES[key], strict=True))


def store_options(db_dsn: str) -> tuple[str, dict[str, Any]]:
    """The DSN and options the stores connect with: ``db_dsn`` directly, or through
    the pooler of ``CWSTORE_TEST_POOLER_DSN``."""
    pooler = os.environ.get("CWSTORE_TEST_POOLER_DSN")
    if not pooler:
        return db_dsn, {}
    dbname = str(conninfo_to_dict(db_dsn)["dbname"])
    return make_conninfo(pooler, dbname=dbname), {"pooler": "transaction"}


@pytest.fixture(params=CLIENTS)
async def store(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[Any]:
    """A store on the module's database with async methods, once per client."""
    dsn, options = store_options(db_dsn)
    if request.param == "asyncpg":
        astore: AsyncStore = await connect(
            dsn, min_size=1, max_size=4, migrate_schema=False, **options
        )
        try:
            yield astore
        finally:
            await astore.close()
    else:
        sync = await asyncio.to_thread(
            connect_sync, dsn, min_size=1, max_size=4, migrate_schema=False, **options
        )
        threaded = ThreadedStore(sync)
        try:
            yield threaded
        finally:
            await threaded.close()


@pytest.fixture
def graph() -> str:
    """A graph name no other test uses."""
    return f"g-{uuid.uuid4().hex}"


@pytest.fixture
def stored(db_dsn: str) -> Callable[[str], tuple[int | None, int]]:
    """``stored(name)`` -> (graphs.length or None when there is no such graph, number
    of rows in cwstore.nodes for it), read with a connection of its own."""

    def read(name: str) -> tuple[int | None, int]:
        with psycopg.connect(db_dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT g.length, (SELECT count(*) FROM cwstore.nodes n"
                " WHERE n.graph_id = g.graph_id) FROM cwstore.graphs g WHERE g.name = %s",
                (name,),
            ).fetchone()
        return (None, 0) if row is None else (int(row[0]), int(row[1]))

    return read
