"""The migration runner on a real server: empty to head, again as a no-op, two runners
racing, an edited migration refused, a failing one rolled back, the fresh install from
schema/, the lock (not taken when nothing is pending, not one a role without privileges
can hold), and a database of the pre-release chain refused; psycopg and asyncpg.

Each test gets a fresh empty database (``empty_db_dsn``), not the migrated template.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import psycopg
import pytest
from psycopg import sql
from support import GRAPH_TABLES

from cwstore._migration_plan import _BOOTSTRAP
from cwstore._sql import Migration, migrations
from cwstore.drivers.asyncpg import AsyncpgConnection
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.errors import DatabaseError, MigrationError, StoreTimeoutError
from cwstore.migrate import (
    apply_migrations,
    apply_migrations_sync,
    status,
    status_sync,
)


def dsn_as(dsn: str, user: str) -> str:
    """``dsn`` (a URL) logging in as ``user`` instead, without a password."""
    parts = urlsplit(dsn)
    hostport = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{hostport}"))


def _recorded(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT version, name, sha256 FROM cwstore.schema_migrations ORDER BY version"
        ).fetchall()


def test_real_chain_applies_then_is_a_noop(empty_db_dsn: str) -> None:
    files = migrations()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn)) == [m.version for m in files]
        assert apply_migrations_sync(PsycopgConnection(conn)) == []
        assert status_sync(PsycopgConnection(conn)).pending == []
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in files]


async def test_real_chain_applies_then_is_a_noop_asyncpg(empty_db_dsn: str) -> None:
    files = migrations()
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        assert await apply_migrations(AsyncpgConnection(conn)) == [m.version for m in files]
        assert await apply_migrations(AsyncpgConnection(conn)) == []
        assert (await status(AsyncpgConnection(conn))).current_version == len(files)
    finally:
        await conn.close()
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in files]


def test_scratch_chain(empty_db_dsn: str, scratch_migrations: list[Migration]) -> None:
    with psycopg.connect(empty_db_dsn) as conn:  # not autocommit: each step commits itself
        before = status_sync(PsycopgConnection(conn), scratch_migrations)
        assert (before.applied, before.pending) == ([], scratch_migrations)
        assert apply_migrations_sync(PsycopgConnection(conn), scratch_migrations) == [1, 2, 3]
        assert apply_migrations_sync(PsycopgConnection(conn), scratch_migrations) == []
        assert conn.execute("SELECT cwstore.scratch_answer()").fetchone() == (42,)
        note = conn.execute("SELECT note FROM cwstore.scratch_one").fetchone()
        assert note == ("a literal % sign and $1 stay as they are",)
        after = status_sync(PsycopgConnection(conn), scratch_migrations)
        assert [a.version for a in after.applied] == [1, 2, 3]
        assert after.pending == []
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in scratch_migrations]


def test_applies_only_the_new_ones(empty_db_dsn: str, scratch_migrations: list[Migration]) -> None:
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn), scratch_migrations[:1]) == [1]
        assert [
            m.version for m in status_sync(PsycopgConnection(conn), scratch_migrations).pending
        ] == [2, 3]
        assert apply_migrations_sync(PsycopgConnection(conn), scratch_migrations) == [2, 3]


async def test_asyncpg_applies_only_the_new_ones(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        assert await apply_migrations(AsyncpgConnection(conn), scratch_migrations[:2]) == [1, 2]
        assert await apply_migrations(AsyncpgConnection(conn), scratch_migrations) == [3]
        assert await conn.fetchval("SELECT cwstore.scratch_answer()") == 42
    finally:
        await conn.close()


def test_edited_migration_is_refused(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    edited = [
        *scratch_migrations[:1],
        Migration.from_text(2, scratch_migrations[1].name, scratch_migrations[1].sql + "\n-- x"),
        *scratch_migrations[2:],
    ]
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn), scratch_migrations[:2])
        with pytest.raises(MigrationError) as caught:
            apply_migrations_sync(PsycopgConnection(conn), edited)
        assert caught.value.version == 2
        with pytest.raises(MigrationError):
            status_sync(PsycopgConnection(conn), edited)
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2]  # 3 was not applied either


async def test_edited_migration_is_refused_asyncpg(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    first = scratch_migrations[0]
    edited = [dataclasses.replace(first, sha256="0" * 64), *scratch_migrations[1:]]
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        await apply_migrations(AsyncpgConnection(conn), scratch_migrations[:1])
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(AsyncpgConnection(conn), edited)
        assert caught.value.version == 1
    finally:
        await conn.close()


def test_failing_migration_rolls_back_whole(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    broken = Migration.from_text(
        4, "broken", "CREATE TABLE cwstore.half_done (x int);\nSELECT no_such_function();"
    )
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        with pytest.raises(MigrationError) as caught:
            apply_migrations_sync(PsycopgConnection(conn), [*scratch_migrations, broken])
        assert caught.value.version == 4
        cause = caught.value.__cause__
        assert isinstance(cause, DatabaseError) and cause.sqlstate == "42883"
        exists = conn.execute("SELECT to_regclass('cwstore.half_done')").fetchone()
        assert exists == (None,)
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2, 3]


def test_a_failing_migration_says_what_the_server_said(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    """A constraint named like one of the node tables' maps, in a write, to a document's
    violation; a migration that breaks it is reported in the server's words."""
    broken = Migration.from_text(
        4,
        "broken",
        "CREATE TABLE cwstore.rekeyed (x int CONSTRAINT nodes_pkey PRIMARY KEY);\n"
        "INSERT INTO cwstore.rekeyed VALUES (1), (1);",
    )
    with (
        psycopg.connect(empty_db_dsn, autocommit=True) as conn,
        pytest.raises(MigrationError) as caught,
    ):
        apply_migrations_sync(PsycopgConnection(conn), [*scratch_migrations, broken])
    message = str(caught.value)
    assert "0004_broken.sql failed and was rolled back" in message
    assert 'unique constraint "nodes_pkey"' in message
    assert "document" not in message and "$.sequence" not in message


async def test_failing_migration_rolls_back_whole_asyncpg(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    broken = Migration.from_text(2, "broken", "CREATE TABLE cwstore.half_done (x int); SELECT 1/0;")
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(AsyncpgConnection(conn), [scratch_migrations[0], broken])
        assert caught.value.version == 2
        cause = caught.value.__cause__
        assert isinstance(cause, DatabaseError) and cause.sqlstate == "22012"
        assert await conn.fetchval("SELECT to_regclass('cwstore.half_done')") is None
    finally:
        await conn.close()
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1]


def test_refuses_a_connection_inside_a_transaction(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    with psycopg.connect(empty_db_dsn) as conn:
        conn.execute("SELECT 1")  # opens a transaction (not autocommit)
        with pytest.raises(MigrationError):
            apply_migrations_sync(PsycopgConnection(conn), scratch_migrations)


def test_two_threads_at_once(empty_db_dsn: str, scratch_migrations: list[Migration]) -> None:
    # A slow first migration keeps the lock held while the other runner arrives.
    slow = [
        Migration.from_text(1, "slow", "SELECT pg_sleep(0.3);\n" + scratch_migrations[0].sql),
        *scratch_migrations[1:],
    ]
    start = threading.Barrier(2)
    results: list[list[int]] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
                start.wait()
                results.append(apply_migrations_sync(PsycopgConnection(conn), slow))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert failures == []
    assert sorted(v for r in results for v in r) == [1, 2, 3]  # each applied exactly once
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2, 3]


async def test_three_asyncpg_runners_at_once(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    conns = [await asyncpg.connect(empty_db_dsn) for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(apply_migrations(AsyncpgConnection(c), scratch_migrations) for c in conns)
        )
    finally:
        for c in conns:
            await c.close()
    assert sorted(v for r in results for v in r) == [1, 2, 3]
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2, 3]


def test_sync_and_async_runners_race(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    results: list[list[int]] = []

    def sync_runner() -> None:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            results.append(apply_migrations_sync(PsycopgConnection(conn), scratch_migrations))

    async def async_runner() -> list[int]:
        conn = await asyncpg.connect(empty_db_dsn)
        try:
            return await apply_migrations(AsyncpgConnection(conn), scratch_migrations)
        finally:
            await conn.close()

    thread = threading.Thread(target=sync_runner)
    thread.start()
    results.append(asyncio.run(async_runner()))
    thread.join(timeout=30)
    assert sorted(v for r in results for v in r) == [1, 2, 3]


# --- the fresh install, the lock, and databases of the pre-release chain ----------------

# The advisory lock key runners took before they locked cwstore.schema_migrations
# instead: any login role could take it and hold every migrating client up.
_OLD_ADVISORY_KEY = 0x63_77_73_74_6F_72_65


def _later(version: int) -> Migration:
    return Migration.from_text(
        version,
        "later",
        "-- a later delta. Safe with live writers: yes.\n"
        "CREATE FUNCTION cwstore.later_answer() RETURNS int LANGUAGE sql AS 'SELECT 7';",
    )


def test_fresh_database_gets_the_schema_and_every_migration_stamped(empty_db_dsn: str) -> None:
    files = migrations()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn)) == [m.version for m in files]
        assert conn.execute("SELECT cwstore.infinity_seq()").fetchone() == (2**63 - 1,)
        # A later delta applies on top, alone.
        assert apply_migrations_sync(PsycopgConnection(conn), [*files, _later(len(files) + 1)]) == [
            len(files) + 1
        ]
        assert conn.execute("SELECT cwstore.later_answer()").fetchone() == (7,)
    assert _recorded(empty_db_dsn) == [
        *[(m.version, m.name, m.sha256) for m in files],
        (len(files) + 1, "later", _later(len(files) + 1).sha256),
    ]


async def test_three_fresh_installs_at_once(empty_db_dsn: str) -> None:
    # The bookkeeping table is created by whichever runner comes first; the others wait
    # for it, find the schema installed and do nothing.
    files = migrations()
    conns = [await asyncpg.connect(empty_db_dsn) for _ in range(3)]
    try:
        results = await asyncio.gather(*(apply_migrations(AsyncpgConnection(c)) for c in conns))
    finally:
        for c in conns:
            await c.close()
    assert sorted(results) == [[], [], [m.version for m in files]]
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in files]


def _hold(dsn: str, statement: str) -> psycopg.Connection[Any]:
    """A connection inside a transaction that ran ``statement`` (and holds its locks)."""
    holder = psycopg.connect(dsn)
    holder.execute(statement)
    return holder


def test_nothing_pending_takes_no_lock(empty_db_dsn: str) -> None:
    files = migrations()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn))
        holder = _hold(empty_db_dsn, "LOCK TABLE cwstore.schema_migrations IN EXCLUSIVE MODE")
        try:
            # Current: returns at once although the migration lock is held elsewhere.
            assert apply_migrations_sync(PsycopgConnection(conn), lock_timeout=0.2) == []
            # Pending: waits for the lock, then gives up with a clear error.
            with pytest.raises(MigrationError) as caught:
                apply_migrations_sync(
                    PsycopgConnection(conn), [*files, _later(len(files) + 1)], lock_timeout=0.2
                )
            assert "lock" in str(caught.value)
            cause = caught.value.__cause__
            assert isinstance(cause, StoreTimeoutError) and cause.sqlstate == "55P03"
        finally:
            holder.close()
        assert apply_migrations_sync(PsycopgConnection(conn), [*files, _later(len(files) + 1)]) == [
            len(files) + 1
        ]


async def test_nothing_pending_takes_no_lock_asyncpg(empty_db_dsn: str) -> None:
    files = migrations()
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        await apply_migrations(AsyncpgConnection(conn))
        holder = _hold(empty_db_dsn, "LOCK TABLE cwstore.schema_migrations IN EXCLUSIVE MODE")
        try:
            assert await apply_migrations(AsyncpgConnection(conn), lock_timeout=0.2) == []
            with pytest.raises(MigrationError) as caught:
                await apply_migrations(
                    AsyncpgConnection(conn), [*files, _later(len(files) + 1)], lock_timeout=0.2
                )
            cause = caught.value.__cause__
            assert isinstance(cause, StoreTimeoutError) and cause.sqlstate == "55P03"
        finally:
            holder.close()
        assert not conn.is_in_transaction()
    finally:
        await conn.close()


def test_a_role_without_privileges_cannot_hold_migrations_up(
    empty_db_dsn: str, pg_admin_dsn: str
) -> None:
    files = migrations()
    nobody = f"cw_nobody_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(nobody)))
    try:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            apply_migrations_sync(PsycopgConnection(conn))
            # What it may do at most: read the record (as a cwstore_reader may).
            conn.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA cwstore TO {0};"
                    " GRANT SELECT ON cwstore.schema_migrations TO {0}"
                ).format(sql.Identifier(nobody))
            )
            holder = psycopg.connect(dsn_as(empty_db_dsn, nobody))
            try:
                holder.execute("SELECT pg_advisory_xact_lock(%s)", (_OLD_ADVISORY_KEY,))
                holder.execute("SELECT count(*) FROM cwstore.schema_migrations").fetchone()
                for stronger in (
                    "LOCK TABLE cwstore.schema_migrations IN EXCLUSIVE MODE",
                    "SELECT 1 FROM cwstore.schema_migrations FOR UPDATE",
                ):
                    holder.execute("SAVEPOINT s")
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        holder.execute(stronger)
                    holder.execute("ROLLBACK TO SAVEPOINT s")
                # Its transaction stays open, holding the advisory lock and ACCESS SHARE.
                assert apply_migrations_sync(PsycopgConnection(conn), lock_timeout=2) == []
                extra = [*files, _later(len(files) + 1)]
                assert apply_migrations_sync(PsycopgConnection(conn), extra, lock_timeout=2) == [
                    len(files) + 1
                ]
            finally:
                holder.close()
    finally:
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(nobody)))
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(nobody)))


def _record_old_chain(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_BOOTSTRAP)
        for version, name in enumerate(
            ["schema", "write_functions", "read_functions", "tenancy", "faster_reads"], start=1
        ):
            conn.execute(
                "INSERT INTO cwstore.schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                (version, name, f"{version:064x}"),
            )


def test_a_database_of_the_pre_release_chain_is_refused(empty_db_dsn: str) -> None:
    _record_old_chain(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        for attempt in (apply_migrations_sync, status_sync):
            with pytest.raises(MigrationError) as caught:
                attempt(PsycopgConnection(conn))
            assert caught.value.version == 1
            message = str(caught.value)
            assert "0001_schema.sql" in message and "0001_baseline.sql" in message
            assert "import" in message
        exists = conn.execute("SELECT to_regprocedure('cwstore.append_v1(text,json,bigint,json)')")
        assert exists.fetchone() == (None,)  # nothing was installed over it


def test_a_database_of_the_unreleased_chain_before_0_1_0_is_refused(empty_db_dsn: str) -> None:
    """A database migrated by the development chain squashed into 0002_to_0_1_0 (it
    records 0002_sql_door, ..) is refused at version 2, nothing applied."""
    baseline = migrations()[0]
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        conn.execute(_BOOTSTRAP)
        for version, name, sha in [
            (1, baseline.name, baseline.sha256),
            (2, "sql_door", f"{2:064x}"),
            (3, "graph_keys", f"{3:064x}"),
        ]:
            conn.execute(
                "INSERT INTO cwstore.schema_migrations (version, name, sha256) VALUES (%s, %s, %s)",
                (version, name, sha),
            )
        with pytest.raises(MigrationError) as caught:
            apply_migrations_sync(PsycopgConnection(conn))
        assert caught.value.version == 2
        assert "0002_sql_door.sql" in str(caught.value)
        assert "0002_to_0_1_0.sql" in str(caught.value)
        assert conn.execute("SELECT count(*) FROM cwstore.schema_migrations").fetchone() == (3,)


async def test_a_database_of_the_pre_release_chain_is_refused_asyncpg(empty_db_dsn: str) -> None:
    _record_old_chain(empty_db_dsn)
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(AsyncpgConnection(conn))
        assert caught.value.version == 1
        with pytest.raises(MigrationError):
            await status(AsyncpgConnection(conn))
    finally:
        await conn.close()


def test_lock_timeout_must_be_positive(empty_db_dsn: str) -> None:
    with (
        psycopg.connect(empty_db_dsn, autocommit=True) as conn,
        pytest.raises(MigrationError),
    ):
        apply_migrations_sync(PsycopgConnection(conn), lock_timeout=0)


def test_graph_keys_migration_rewrites_the_ids_of_graphs_with_history(empty_db_dsn: str) -> None:
    """0002 on a database of 0001 holding graphs: every row of every
    table keyed by graph moves to graph_key(name), nothing else changes, and the graph
    takes appends and reads as before."""
    files = migrations()
    upto = [m for m in files if m.version <= 1]
    nodes = [
        f'{{"id":"cw_{1:024x}","kind":"goal","parents":[],"payload":{{"i":1}},'
        '"createdAt":"2025-01-01T00:00:00Z","resourceKey":"doc"}',
        f'{{"id":"cw_{2:024x}","kind":"answer","parents":["cw_{1:024x}"],"payload":{{"i":2}},'
        '"createdAt":"2025-01-01T00:00:01Z","resourceKey":"doc"}',
    ]
    tables = GRAPH_TABLES[1:]
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn), upto) == [1]
        for g in ("a", "b"):
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (g, f"[{nodes[0]}]")
            )
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, NULL, %s::json)",
                (g, f"[{nodes[1]}]", f'["cw_{2:024x}"]'),
            )
        before = {
            t: conn.execute(
                sql.SQL(
                    "SELECT g.name, count(*) FROM cwstore.{} x JOIN cwstore.graphs g"
                    " USING (graph_id) GROUP BY g.name ORDER BY g.name"
                ).format(sql.Identifier(t))
            ).fetchall()
            for t in tables
        }
        projection = conn.execute("SELECT cwstore.projection_v1('a')").fetchone()
        # 0002 alone: 0003 thins the rows of history (tests/migration checks those).
        assert apply_migrations_sync(PsycopgConnection(conn), files[:2]) == [2]
        assert conn.execute(
            "SELECT count(*) FROM cwstore.graphs WHERE graph_id <> cwstore.graph_key(name)"
        ).fetchone() == (0,)
        for t in tables:
            after = conn.execute(
                sql.SQL(
                    "SELECT g.name, count(*) FROM cwstore.{} x JOIN cwstore.graphs g"
                    " USING (graph_id) GROUP BY g.name ORDER BY g.name"
                ).format(sql.Identifier(t))
            ).fetchall()
            assert after == before[t] and after, t
        assert conn.execute("SELECT cwstore.projection_v1('a')").fetchone() == projection
        row = conn.execute(
            "SELECT seq FROM cwstore.append_v1('a', %s::json)",
            (
                f'[{{"id":"cw_{3:024x}","kind":"goal","parents":[],"payload":{{}},'
                '"createdAt":"2025-01-01T00:00:02Z"}]',
            ),
        ).fetchone()
        assert row == (3,)
        with pytest.raises(psycopg.Error) as refused:  # the guards are on again
            conn.execute("UPDATE cwstore.nodes SET kind = 'goal'")
        assert refused.value.sqlstate == "CW403"


def test_erasure_migration_keeps_every_graph_and_numbers_its_life(empty_db_dsn: str) -> None:
    """0002 on a database of 0001 holding graphs: every graph is at probe 0 of its
    chain, each graph's life takes its graph_id as its
    incarnation, a new life takes one above every graph_id, and a graph of before is
    erased whole like any other."""
    files = migrations()
    upto = [m for m in files if m.version <= 1]
    nodes = (
        f'[{{"id":"cw_{1:024x}","kind":"goal","parents":[],"payload":{{"i":1}},'
        '"createdAt":"2025-01-01T00:00:00Z","resourceKey":"doc"}]'
    )
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(PsycopgConnection(conn), upto) == [1]
        for g in ("a", "b"):
            conn.execute("SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (g, nodes))
        names = conn.execute("SELECT name FROM cwstore.graphs ORDER BY name").fetchall()
        projection = conn.execute("SELECT cwstore.projection_v1('a')").fetchone()
        assert apply_migrations_sync(PsycopgConnection(conn)) == [
            m.version for m in files if m.version > 1
        ]
        ids = conn.execute(
            "SELECT name, graph_id FROM cwstore.graphs"
            " WHERE key_probe = 0 AND incarnation = graph_id ORDER BY name"
        ).fetchall()
        assert [(name,) for name, _ in ids] == names
        assert conn.execute("SELECT cwstore.projection_v1('a')").fetchone() == projection
        assert conn.execute("SELECT cwstore.erase_graph_v1('a', 'test')").fetchone() == (1,)
        conn.execute("SELECT count(*) FROM cwstore.append_v1('c', %s::json)", (nodes,))
        assert conn.execute(
            "SELECT name, incarnation > (SELECT max(graph_id) FROM cwstore.graphs)"
            " FROM cwstore.graphs ORDER BY name"
        ).fetchall() == [("b", False), ("c", True)]
        assert conn.execute(
            "SELECT count(*) FROM cwstore.nodes WHERE graph_id = %s", (ids[0][1],)
        ).fetchone() == (0,)
