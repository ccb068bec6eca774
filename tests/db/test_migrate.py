"""The migration runner on a real server: empty to head, again as a no-op, two runners
racing, an edited migration refused, a failing one rolled back; psycopg and asyncpg.

Each test gets a fresh empty database (``empty_db_dsn``), not the migrated template.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import asyncpg
import psycopg
import pytest

from cwstore._sql import Migration, migrations
from cwstore.errors import MigrationError
from cwstore.migrate import apply_migrations, apply_migrations_sync, status, status_sync


def _recorded(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT version, name, sha256 FROM cwstore.schema_migrations ORDER BY version"
        ).fetchall()


def test_real_chain_applies_then_is_a_noop(empty_db_dsn: str) -> None:
    files = migrations()
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(conn) == [m.version for m in files]
        assert apply_migrations_sync(conn) == []
        assert status_sync(conn).pending == []
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in files]


async def test_real_chain_applies_then_is_a_noop_asyncpg(empty_db_dsn: str) -> None:
    files = migrations()
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        assert await apply_migrations(conn) == [m.version for m in files]
        assert await apply_migrations(conn) == []
        assert (await status(conn)).current_version == len(files)
    finally:
        await conn.close()
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in files]


def test_scratch_chain(empty_db_dsn: str, scratch_migrations: list[Migration]) -> None:
    with psycopg.connect(empty_db_dsn) as conn:  # not autocommit: each step commits itself
        before = status_sync(conn, scratch_migrations)
        assert (before.applied, before.pending) == ([], scratch_migrations)
        assert apply_migrations_sync(conn, scratch_migrations) == [1, 2, 3]
        assert apply_migrations_sync(conn, scratch_migrations) == []
        assert conn.execute("SELECT cwstore.scratch_answer()").fetchone() == (42,)
        note = conn.execute("SELECT note FROM cwstore.scratch_one").fetchone()
        assert note == ("a literal % sign and $1 stay as they are",)
        after = status_sync(conn, scratch_migrations)
        assert [a.version for a in after.applied] == [1, 2, 3]
        assert after.pending == []
    assert _recorded(empty_db_dsn) == [(m.version, m.name, m.sha256) for m in scratch_migrations]


def test_applies_only_the_new_ones(empty_db_dsn: str, scratch_migrations: list[Migration]) -> None:
    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        assert apply_migrations_sync(conn, scratch_migrations[:1]) == [1]
        assert [m.version for m in status_sync(conn, scratch_migrations).pending] == [2, 3]
        assert apply_migrations_sync(conn, scratch_migrations) == [2, 3]


async def test_asyncpg_applies_only_the_new_ones(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        assert await apply_migrations(conn, scratch_migrations[:2]) == [1, 2]
        assert await apply_migrations(conn, scratch_migrations) == [3]
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
        apply_migrations_sync(conn, scratch_migrations[:2])
        with pytest.raises(MigrationError) as caught:
            apply_migrations_sync(conn, edited)
        assert caught.value.version == 2
        with pytest.raises(MigrationError):
            status_sync(conn, edited)
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2]  # 3 was not applied either


async def test_edited_migration_is_refused_asyncpg(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    first = scratch_migrations[0]
    edited = [dataclasses.replace(first, sha256="0" * 64), *scratch_migrations[1:]]
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        await apply_migrations(conn, scratch_migrations[:1])
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(conn, edited)
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
            apply_migrations_sync(conn, [*scratch_migrations, broken])
        assert caught.value.version == 4
        assert isinstance(caught.value.__cause__, psycopg.Error)
        exists = conn.execute("SELECT to_regclass('cwstore.half_done')").fetchone()
        assert exists == (None,)
    assert [r[0] for r in _recorded(empty_db_dsn)] == [1, 2, 3]


async def test_failing_migration_rolls_back_whole_asyncpg(
    empty_db_dsn: str, scratch_migrations: list[Migration]
) -> None:
    broken = Migration.from_text(2, "broken", "CREATE TABLE cwstore.half_done (x int); SELECT 1/0;")
    conn = await asyncpg.connect(empty_db_dsn)
    try:
        with pytest.raises(MigrationError) as caught:
            await apply_migrations(conn, [scratch_migrations[0], broken])
        assert caught.value.version == 2
        assert isinstance(caught.value.__cause__, asyncpg.PostgresError)
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
            apply_migrations_sync(conn, scratch_migrations)


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
                results.append(apply_migrations_sync(conn, slow))
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
        results = await asyncio.gather(*(apply_migrations(c, scratch_migrations) for c in conns))
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
            results.append(apply_migrations_sync(conn, scratch_migrations))

    async def async_runner() -> list[int]:
        conn = await asyncpg.connect(empty_db_dsn)
        try:
            return await apply_migrations(conn, scratch_migrations)
        finally:
            await conn.close()

    thread = threading.Thread(target=sync_runner)
    thread.start()
    results.append(asyncio.run(async_runner()))
    thread.join(timeout=30)
    assert sorted(v for r in results for v in r) == [1, 2, 3]
