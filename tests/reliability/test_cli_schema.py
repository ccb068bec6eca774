"""A read command never changes a database, and is bounded in time: on one without the
schema, or with a schema behind this client, it is refused naming ``cwstore init`` and
nothing is written; the commands that add data (``import``, ``append``) bring the schema
up to date first."""

from __future__ import annotations

import asyncio
import os
import time

import psycopg
import pytest
from support.documents import GraphBuilder
from test_cli_refusals import assert_refused, cli

import cwstore
from cwstore import _jsontext
from cwstore._sql import migrations
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync
from cwstore.store import connect_sync

READS = [
    ["graphs"],
    ["export", "--graph", "g"],
    ["erase", "--graph", "g", "--yes"],
    ["retention", "--idle", "1d", "--dry-run"],
]


def _versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('cwstore.schema_migrations')").fetchone() == (None,):
            return []
        return [r[0] for r in conn.execute("SELECT version FROM cwstore.schema_migrations")]


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_a_read_on_a_database_without_the_schema_changes_nothing(
    empty_db_dsn: str, command: list[str]
) -> None:
    assert_refused(cli(*command, "--dsn", empty_db_dsn), "cwstore init", "no cwstore schema")
    assert _versions(empty_db_dsn) == []


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_a_read_on_a_schema_behind_the_client_changes_nothing(
    empty_db_dsn: str, command: list[str]
) -> None:
    older = [m for m in migrations() if m.version < len(migrations())]
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn), older)
    before = _versions(empty_db_dsn)
    assert_refused(cli(*command, "--dsn", empty_db_dsn), "cwstore init", "behind this client")
    assert _versions(empty_db_dsn) == before


def test_an_import_brings_the_schema_up_to_date(empty_db_dsn: str) -> None:
    b = GraphBuilder()
    b.system("s")
    run = cli(
        "import",
        "-",
        "--graph",
        "g",
        "--dsn",
        empty_db_dsn,
        stdin=_jsontext.dumps(b.state()).encode(),
    )
    assert run.returncode == 0, run.stderr.decode()
    assert _versions(empty_db_dsn) == [m.version for m in migrations()]
    assert cli("graphs", "--dsn", empty_db_dsn).returncode == 0


def test_a_read_command_is_bounded_in_time(db_dsn: str) -> None:
    """A command that only reads runs each statement under a time limit
    (CWSTORE_STATEMENT_TIMEOUT, 300 s unless set): one kept waiting past it says so and
    exits 1, and leaves nothing running on the server."""
    env_before = os.environ.get("CWSTORE_STATEMENT_TIMEOUT")
    os.environ["CWSTORE_STATEMENT_TIMEOUT"] = "0.5"
    try:
        with psycopg.connect(db_dsn) as lock:
            lock.execute("LOCK TABLE cwstore.graphs IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            run = cli("graphs", "--dsn", db_dsn)
            waited = time.monotonic() - started
            lock.rollback()
    finally:
        if env_before is None:
            os.environ.pop("CWSTORE_STATEMENT_TIMEOUT", None)
        else:
            os.environ["CWSTORE_STATEMENT_TIMEOUT"] = env_before
    assert_refused(run, "cwstore graphs")
    assert run.returncode == 1
    assert waited < 60
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert left == (0,)


def _schema_at(dsn: str, state: str) -> None:
    """Leave the database at ``dsn`` empty, one migration behind, or current."""
    files = migrations()
    chosen = {"empty": [], "older": files[:-1], "current": files}[state]
    if chosen:
        with psycopg.connect(dsn, autocommit=True) as conn:
            apply_migrations_sync(PsycopgConnection(conn), chosen)


def _connect_verdict(dsn: str) -> str | None:
    """What ``connect_sync`` and ``connect`` say of the database: ``None`` when both
    open it, else the message both refuse it with (they must agree)."""

    async def by_async() -> str | None:
        try:
            store = await cwstore.connect(dsn, max_size=1)
        except cwstore.SchemaNotReadyError as exc:
            return exc.message
        await store.close()
        return None

    try:
        connect_sync(dsn, max_size=1).close()
        sync: str | None = None
    except cwstore.SchemaNotReadyError as exc:
        sync = exc.message
    assert asyncio.run(by_async()) == sync
    return sync


@pytest.mark.parametrize("state", ["empty", "older", "current"])
def test_connect_and_the_cli_give_one_verdict(empty_db_dsn: str, state: str) -> None:
    """One rule decides whether a schema is ready: a database with none, one behind this
    client, and a current one get the same verdict from connect() (both clients) and
    from a CLI command that reads."""
    _schema_at(empty_db_dsn, state)
    verdict = _connect_verdict(empty_db_dsn)
    run = cli("graphs", "--dsn", empty_db_dsn)
    if state == "current":
        assert verdict is None
        assert run.returncode == 0, run.stderr.decode()
        return
    assert verdict is not None
    words = {"empty": "no cwstore schema", "older": "behind this client"}[state]
    assert words in verdict and "cwstore init" in verdict
    assert verdict in assert_refused(run, words)
