"""Bring a database's cwstore schema up to date: the migration runner.

The migrations are the numbered files read by :func:`cwstore._sql.migrations`. Each
applied one is recorded as ``(version, name, sha256, applied_at)`` in
``cwstore.schema_migrations``, which this module creates (with the ``cwstore`` schema)
before the first migration runs; a migration must therefore not fail when the schema
``cwstore`` already exists (write ``CREATE SCHEMA IF NOT EXISTS cwstore``).

How a run goes, the same for psycopg (:func:`apply_migrations_sync`) and asyncpg
(:func:`apply_migrations`):

1. In one transaction: take ``pg_advisory_xact_lock(LOCK_KEY)``, create the bookkeeping
   table if it is missing, read what is recorded, and :func:`plan` the run. Planning is
   pure and shared: it refuses (:class:`~cwstore.errors.MigrationError`) when a recorded
   migration's checksum differs from its file, and lists the pending ones.
2. For each pending migration, one transaction: take the lock again, re-read what is
   recorded (another process may have applied it while we waited), run the whole file
   as one multi-statement script, record it, re-apply the role grants where
   ``cwstore init --roles`` set them up (:mod:`cwstore.roles`), commit.

So two processes migrating at once never both apply a file: the second waits for the
lock, then finds the migration recorded. A failing migration rolls back whole and
leaves the ones before it applied. A migration therefore cannot use statements that
refuse to run in a transaction block (``CREATE INDEX CONCURRENTLY``, ``VACUUM``).

The bookkeeping SQL below stays in this module, not in ``sql/``: it is what reads and
records the files there, so it has to exist before any of them has run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, LiteralString, cast

import asyncpg
import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from cwstore._sql import Migration, migrations
from cwstore.errors import MigrationError

__all__ = [
    "LOCK_KEY",
    "AppliedMigration",
    "MigrationStatus",
    "apply_migrations",
    "apply_migrations_sync",
    "plan",
    "status",
    "status_sync",
]

LOCK_KEY: Final = 0x63_77_73_74_6F_72_65
"""Key of the transaction-level advisory lock every migration step takes ("cwstore" in ASCII)."""

_LOCK: Final = "SELECT pg_advisory_xact_lock($1)"
_TABLE_EXISTS: Final = "SELECT to_regclass('cwstore.schema_migrations') IS NOT NULL"
_BOOTSTRAP: Final = """
CREATE SCHEMA IF NOT EXISTS cwstore;
CREATE TABLE IF NOT EXISTS cwstore.schema_migrations (
    version    integer     NOT NULL,
    name       text        NOT NULL,
    sha256     text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);
COMMENT ON TABLE cwstore.schema_migrations IS
    'Migrations applied by cwstore migrate: one row per sql/migrations/NNNN_name.sql file, '
    'with the SHA-256 of the file as applied. Never edit an applied file; add the next one.';
"""
_READ_APPLIED: Final = (
    "SELECT version, name, sha256, applied_at FROM cwstore.schema_migrations ORDER BY version"
)
_RECORD: Final = "INSERT INTO cwstore.schema_migrations (version, name, sha256) VALUES ($1, $2, $3)"
# After each migration, in its transaction: where `cwstore init --roles` has set the
# roles up, the new migration's functions and tables get their grants too.
_REGRANT: Final = """
DO $regrant$
BEGIN
  IF to_regprocedure('cwstore.apply_grants()') IS NOT NULL
     AND to_regrole('cwstore_reader') IS NOT NULL THEN
    IF has_schema_privilege('cwstore_reader', 'cwstore', 'USAGE') THEN
      PERFORM cwstore.apply_grants();
    END IF;
  END IF;
END
$regrant$
"""


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    """A row of ``cwstore.schema_migrations``."""

    version: int
    name: str
    sha256: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """What a database holds against the migration files.

    ``applied`` lists the recorded rows (including any newer than the files, written by
    a later cwstore release); ``pending`` the files still to apply, in order.
    """

    applied: list[AppliedMigration]
    pending: list[Migration]

    @property
    def current_version(self) -> int:
        """The highest recorded version, 0 for a database never migrated."""
        return max((a.version for a in self.applied), default=0)


def plan(files: Sequence[Migration], applied: Mapping[int, str]) -> list[Migration]:
    """Decide which migrations to apply; pure, shared by both runners.

    Parameters
    ----------
    files:
        The migration files, in version order.
    applied:
        ``{version: sha256}`` as recorded in ``cwstore.schema_migrations``.

    Returns
    -------
    list[Migration]
        The files whose version is not recorded, in version order. Recorded versions
        without a file (a later release migrated this database) are left alone.

    Raises
    ------
    MigrationError
        A recorded migration's checksum differs from its file: the file was edited
        after it was applied (``version`` names it).
    """
    pending: list[Migration] = []
    for migration in files:
        recorded = applied.get(migration.version)
        if recorded is None:
            pending.append(migration)
        elif recorded != migration.sha256:
            raise MigrationError(
                f"migration {migration.filename} was applied with checksum {recorded[:12]}…, "
                f"but the file now has {migration.sha256[:12]}…: an applied migration must "
                "never be edited; restore the file and add the change as a new migration",
                migration.version,
            )
    return pending


def _applied_rows(rows: Sequence[Sequence[object]]) -> list[AppliedMigration]:
    return [
        AppliedMigration(
            version=cast(int, r[0]),
            name=cast(str, r[1]),
            sha256=cast(str, r[2]),
            applied_at=cast(datetime, r[3]),
        )
        for r in rows
    ]


def _checksums(applied: Sequence[AppliedMigration]) -> dict[int, str]:
    return {a.version: a.sha256 for a in applied}


def _failed(migration: Migration, exc: Exception) -> MigrationError:
    return MigrationError(
        f"migration {migration.filename} failed and was rolled back: {exc}", migration.version
    )


def _script(migration: Migration) -> LiteralString:
    # A file shipped inside the package, never caller input, which is what the drivers'
    # LiteralString guard is about. (mypy treats LiteralString as str, so no cast.)
    return migration.sql


# ---------------------------------------------------------------- psycopg (sync)


def _cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[tuple[Any, ...]]:
    # $1 placeholders, as asyncpg takes them, and plain tuples whatever the connection's
    # row factory.
    return psycopg.RawCursor(conn, row_factory=tuple_row)


def _read_applied_sync(conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
    with _cursor(conn) as cur:
        exists = cur.execute(_TABLE_EXISTS).fetchone()
        if not exists or not exists[0]:
            return []
        return _applied_rows(cur.execute(_READ_APPLIED).fetchall())


def _lock_and_read_sync(conn: psycopg.Connection[Any]) -> list[AppliedMigration]:
    with _cursor(conn) as cur:
        cur.execute(_LOCK, (LOCK_KEY,))
        exists = cur.execute(_TABLE_EXISTS).fetchone()
        if not exists or not exists[0]:
            cur.execute(_BOOTSTRAP, prepare=False)
        return _applied_rows(cur.execute(_READ_APPLIED).fetchall())


def _require_idle_sync(conn: psycopg.Connection[Any]) -> None:
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise MigrationError(
            "migrations need a connection outside any transaction "
            "(each migration commits on its own)"
        )


def apply_migrations_sync(
    conn: psycopg.Connection[Any], files: Sequence[Migration] | None = None
) -> list[int]:
    """Apply every pending migration over a psycopg connection.

    Parameters
    ----------
    conn:
        An open connection, autocommit or not, with no transaction in progress. Each
        migration commits on it as it goes.
    files:
        The migrations to apply; defaults to :func:`cwstore._sql.migrations`.

    Returns
    -------
    list[int]
        The versions this call applied, in order; empty when the database was current.

    Raises
    ------
    MigrationError
        An applied migration's file changed, the connection is inside a transaction, or
        a migration failed (it is rolled back; ``__cause__`` is the driver's error, and
        the migrations before it stay applied).
    """
    files = migrations() if files is None else files
    _require_idle_sync(conn)
    with conn.transaction():
        todo = plan(files, _checksums(_lock_and_read_sync(conn)))
    done: list[int] = []
    for migration in todo:
        try:
            with conn.transaction():
                recorded = _checksums(_lock_and_read_sync(conn))
                if not plan([migration], recorded):
                    continue  # another process applied it while we waited for the lock
                # A multi-statement script: never prepared, whatever prepare_threshold says.
                conn.execute(_script(migration), prepare=False)
                with _cursor(conn) as cur:
                    cur.execute(_RECORD, (migration.version, migration.name, migration.sha256))
                    cur.execute(_REGRANT, prepare=False)
        except psycopg.Error as exc:
            raise _failed(migration, exc) from exc
        done.append(migration.version)
    return done


def status_sync(
    conn: psycopg.Connection[Any], files: Sequence[Migration] | None = None
) -> MigrationStatus:
    """Report applied and pending migrations over a psycopg connection; changes nothing.

    Parameters
    ----------
    conn:
        An open connection; reads only, without taking the migration lock.
    files:
        The migrations to compare against; defaults to :func:`cwstore._sql.migrations`.

    Raises
    ------
    MigrationError
        An applied migration's file changed (see :func:`plan`).
    """
    files = migrations() if files is None else files
    with conn.transaction():  # so a non-autocommit connection is left as it was found
        applied = _read_applied_sync(conn)
    return MigrationStatus(applied=applied, pending=plan(files, _checksums(applied)))


# ---------------------------------------------------------------- asyncpg


async def _read_applied(conn: asyncpg.Connection) -> list[AppliedMigration]:
    if not await conn.fetchval(_TABLE_EXISTS):
        return []
    return _applied_rows([tuple(r) for r in await conn.fetch(_READ_APPLIED)])


async def _lock_and_read(conn: asyncpg.Connection) -> list[AppliedMigration]:
    await conn.execute(_LOCK, LOCK_KEY)
    if not await conn.fetchval(_TABLE_EXISTS):
        await conn.execute(_BOOTSTRAP)
    return _applied_rows([tuple(r) for r in await conn.fetch(_READ_APPLIED)])


async def apply_migrations(
    conn: asyncpg.Connection, files: Sequence[Migration] | None = None
) -> list[int]:
    """Apply every pending migration over an asyncpg connection.

    The asyncpg twin of :func:`apply_migrations_sync`: same parameters, result and
    errors. ``conn`` must not be inside a transaction.
    """
    files = migrations() if files is None else files
    if conn.is_in_transaction():
        raise MigrationError(
            "migrations need a connection outside any transaction "
            "(each migration commits on its own)"
        )
    async with conn.transaction():
        todo = plan(files, _checksums(await _lock_and_read(conn)))
    done: list[int] = []
    for migration in todo:
        try:
            async with conn.transaction():
                recorded = _checksums(await _lock_and_read(conn))
                if not plan([migration], recorded):
                    continue  # another process applied it while we waited for the lock
                await conn.execute(migration.sql)
                await conn.execute(_RECORD, migration.version, migration.name, migration.sha256)
                await conn.execute(_REGRANT)
        except asyncpg.PostgresError as exc:
            raise _failed(migration, exc) from exc
        done.append(migration.version)
    return done


async def status(
    conn: asyncpg.Connection, files: Sequence[Migration] | None = None
) -> MigrationStatus:
    """Report applied and pending migrations over an asyncpg connection; changes nothing.

    The asyncpg twin of :func:`status_sync`.
    """
    files = migrations() if files is None else files
    applied = await _read_applied(conn)
    return MigrationStatus(applied=applied, pending=plan(files, _checksums(applied)))
