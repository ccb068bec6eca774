"""A read command never changes a database: on one without the schema, or with a schema
behind this client, it is refused naming ``cwstore init`` and nothing is written; the
commands that add data (``import``, ``append``) bring the schema up to date first."""

from __future__ import annotations

import psycopg
import pytest
from support.documents import GraphBuilder
from test_cli_refusals import assert_refused, cli

from cwstore import jsontext
from cwstore._sql import migrations
from cwstore.migrate import apply_migrations_sync

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
        apply_migrations_sync(conn, older)
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
        stdin=jsontext.dumps(b.state()).encode(),
    )
    assert run.returncode == 0, run.stderr.decode()
    assert _versions(empty_db_dsn) == [m.version for m in migrations()]
    assert cli("graphs", "--dsn", empty_db_dsn).returncode == 0
