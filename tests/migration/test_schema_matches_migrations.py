"""The schema files and the migration chain build the same database.

One database is built the way a fresh install is (``schema/`` at once, then stamped),
another by running every migration in ``migrations/`` in order (``0001_baseline`` and the
deltas after it), as an existing database is brought up to date. Their catalogs must be
identical (see ``tests/support/schema_catalog.py`` for what is compared): a change to ``schema/``
without its migration, or a migration without its ``schema/`` change, fails here with a
diff naming the objects that differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from support.schema_catalog import diff, snapshot

from cwstore._sql import migrations
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

ADVICE = (
    "sql/schema/ and sql/migrations/ disagree. A schema change is an edit "
    "of schema/ plus a new migration NNNN_*.sql that makes the same change; the diff "
    "below goes from the migration chain (-) to schema/ (+):\n"
)


def _recorded(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT version, name, sha256 FROM cwstore.schema_migrations ORDER BY version"
    ).fetchall()


@pytest.fixture(scope="module")
def built(new_database: Callable[[], str]) -> tuple[str, str]:
    """(from schema/, from the migration chain): two databases, the same files."""
    from_schema, from_chain = new_database(), new_database()
    files = migrations()
    with psycopg.connect(from_schema, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn)) == [m.version for m in files]
    with psycopg.connect(from_chain, autocommit=True) as conn:
        # files given, no schema files: every migration runs in order.
        assert apply_migrations_sync(PsycopgConnection(conn), files) == [m.version for m in files]
    return from_schema, from_chain


def test_schema_and_migrations_build_the_same_database(built: tuple[str, str]) -> None:
    from_schema, from_chain = built
    with psycopg.connect(from_schema) as a, psycopg.connect(from_chain) as b:
        expected, actual = snapshot(b), snapshot(a)
        assert _recorded(a) == _recorded(b)
    assert len(actual) > 200  # functions, tables, columns, ...: the snapshot sees them
    found = diff(expected, actual, names=("migrations", "schema"))
    if found:
        pytest.fail(ADVICE + found, pytrace=False)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER FUNCTION cwstore._nodes_inserted() SET work_mem = '32MB'",
        "ALTER FUNCTION cwstore.append_v1(text, json, bigint, json, bigint) RESET plan_cache_mode",
        "ALTER FUNCTION cwstore.frontier_at(text, bigint) SECURITY INVOKER",
        "COMMENT ON FUNCTION cwstore.heads_at(text, bigint) IS 'changed'",
        "CREATE OR REPLACE FUNCTION cwstore._at(p_seq bigint, p_length bigint) RETURNS bigint "
        "LANGUAGE sql IMMUTABLE AS 'SELECT p_seq'",
        "REVOKE EXECUTE ON FUNCTION cwstore.sees_all(name) FROM PUBLIC",
        "DROP POLICY edges_tenant ON cwstore.edges",
        "ALTER TABLE cwstore.kind_counts DISABLE ROW LEVEL SECURITY",
        "DROP INDEX cwstore.key_heads_semantic_idx",
        "ALTER TABLE cwstore.frontier_spans DROP CONSTRAINT frontier_spans_check",
        "ALTER TABLE cwstore.graphs ALTER COLUMN tenant SET DEFAULT 'other'",
        "ALTER TABLE cwstore.key_heads DISABLE TRIGGER key_heads_no_truncate",
        "ALTER VIEW cwstore.node_view RESET (security_invoker)",
        "CREATE FUNCTION cwstore.extra() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    ],
)
def test_the_comparison_sees_a_change(built: tuple[str, str], change: str) -> None:
    from_schema, _ = built
    with psycopg.connect(from_schema) as conn:
        before = snapshot(conn)
        conn.execute(change)  # in a transaction, rolled back when the block ends
        after = snapshot(conn)
        conn.rollback()
    assert diff(before, after, names=("before", "after")) != "", change
