"""Bring a database's cwstore schema up to date: the migration runner.

Two sources, read by :mod:`cwstore._sql`: ``schema/``, the current schema in install
order, and ``migrations/``, the deltas between releases (``0001_baseline.sql`` first).
Each migration a database holds is recorded as ``(version, name, sha256, applied_at)``
in ``cwstore.schema_migrations``, which this module creates (with the schema ``cwstore``)
before anything else runs.

How a run goes, the same for psycopg (:func:`apply_migrations_sync`) and asyncpg
(:func:`apply_migrations`):

1. Without any lock, read what is recorded and :func:`plan` the run. Planning is pure and
   shared: it refuses (:class:`~cwstore.errors.MigrationError`) a database made by the
   pre-release migration chain, or one whose recorded migration's checksum differs from
   its file, and lists the pending ones. Nothing pending (every connect of a client, on
   a current database): done, no lock taken, nothing written.
2. Otherwise, in one transaction: create the bookkeeping table if it is missing, take
   ``LOCK TABLE cwstore.schema_migrations IN EXCLUSIVE MODE`` and read again (another
   process may have migrated while we waited). A fresh database (nothing recorded) gets
   the ``schema/`` files in that transaction and is stamped with every migration as
   applied. A database with pending migrations gets each in its own transaction, under
   the same lock, re-read each time: the file runs as one multi-statement script and is
   recorded; where ``cwstore init --roles`` set the roles up, their grants are applied
   again (:mod:`cwstore.roles`) so new functions get them too.

The lock is one only the table's owner (or a role with UPDATE, DELETE or TRUNCATE on
it) can take, so a login role with no cwstore privilege cannot hold up migrations, and
readers, who hold at most ACCESS SHARE on it, never conflict with it. Every migrating
transaction runs with ``lock_timeout`` (60 s unless told otherwise): a runner that
cannot get a lock in time fails with a :class:`~cwstore.errors.MigrationError` saying
so, instead of waiting forever.

So two processes migrating at once never both apply a file: the second waits for the
lock, then finds the migration recorded. A failing migration rolls back whole and
leaves the ones before it applied. A migration therefore cannot use statements that
refuse to run in a transaction block (``CREATE INDEX CONCURRENTLY``, ``VACUUM``).

The bookkeeping SQL below stays in this module, not in ``sql/``: it is what reads and
records the files there, so it has to exist before any of them has run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, LiteralString, cast

import asyncpg
import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from cwstore._sql import Migration, SchemaFile, migrations, schema, script
from cwstore.errors import MigrationError

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "AppliedMigration",
    "MigrationStatus",
    "apply_migrations",
    "apply_migrations_sync",
    "distribute_sync",
    "plan",
    "status",
    "status_sync",
]

DEFAULT_LOCK_TIMEOUT: Final = 60.0
"""Seconds a migrating transaction waits for any lock before it gives up."""

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
    'Migrations this database holds: one row per cwstore/sql/migrations/NNNN_name.sql file, '
    'with the SHA-256 of the file as applied (or as stamped, for a database built from '
    'cwstore/sql/schema/). Never edit an applied file; add the next one.';
"""
_LOCK_TIMEOUT: Final = "SELECT set_config('lock_timeout', $1, true)"
_LOCK: Final = "LOCK TABLE cwstore.schema_migrations IN EXCLUSIVE MODE"
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
_LOCK_NOT_AVAILABLE: Final = "55P03"
_UNIQUE_VIOLATION: Final = "23505"


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
    a later cwstore release); ``pending`` the files still to apply, in order (every file,
    for a database never migrated).
    """

    applied: list[AppliedMigration]
    pending: list[Migration]

    @property
    def current_version(self) -> int:
        """The highest recorded version, 0 for a database never migrated."""
        return max((a.version for a in self.applied), default=0)


def plan(files: Sequence[Migration], applied: Sequence[AppliedMigration]) -> list[Migration]:
    """Decide which migrations to apply; pure, shared by both runners.

    Parameters
    ----------
    files:
        The migration files, in version order.
    applied:
        The rows recorded in ``cwstore.schema_migrations``.

    Returns
    -------
    list[Migration]
        The files whose version is not recorded, in version order. Recorded versions
        without a file (a later release migrated this database) are left alone.

    Raises
    ------
    MigrationError
        A recorded migration has another name than its file: the database was made by
        another chain (the pre-release 0001_schema .. 0007 chain, squashed into
        0001_baseline before the first release); it cannot be upgraded in place. Or a
        recorded migration's checksum differs from its file: the file was edited after
        it was applied. ``version`` names the migration.
    """
    recorded = {a.version: a for a in applied}
    pending: list[Migration] = []
    for migration in files:
        row = recorded.get(migration.version)
        if row is None:
            pending.append(migration)
        elif row.name != migration.name:
            raise MigrationError(
                f"this database was migrated by another migration chain: it records "
                f"{row.version:04d}_{row.name}.sql where this cwstore has "
                f"{migration.filename} (the pre-release chain 0001_schema .. "
                "0007_notify_listeners was squashed into 0001_baseline before the first "
                "release and cannot be upgraded in place). Create a new database, run "
                "`cwstore init` on it, and import the graphs again (`cwstore export` "
                "from this one, `cwstore import` into the new one)",
                migration.version,
            )
        elif row.sha256 != migration.sha256:
            raise MigrationError(
                f"migration {migration.filename} was applied with checksum {row.sha256[:12]}…, "
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


def _failed(migration: Migration, exc: Exception) -> MigrationError:
    return MigrationError(
        f"migration {migration.filename} failed and was rolled back: {exc}", migration.version
    )


def _install_failed(exc: Exception) -> MigrationError:
    return MigrationError(
        f"installing the schema (cwstore/sql/schema/) failed and was rolled back: {exc}"
    )


def _lock_timed_out(timeout: float, exc: Exception) -> MigrationError:
    return MigrationError(
        f"gave up migrating after waiting {timeout:g} s for a lock ({exc}): another "
        "session holds cwstore.schema_migrations (a migration in progress?) or a table a "
        "migration alters; nothing was changed. Retry, or look at pg_locks for the holder"
    )


def _timeout_setting(seconds: float) -> str:
    if seconds <= 0:
        raise MigrationError(f"lock_timeout must be > 0 seconds, got {seconds}")
    return f"{max(1, round(seconds * 1000))}ms"


def _script(sql: str) -> LiteralString:
    # A file shipped inside the package, never caller input, which is what the drivers'
    # LiteralString guard is about. (mypy treats LiteralString as str, so no cast.)
    return sql


def _not_in_transaction() -> MigrationError:
    return MigrationError(
        "migrations need a connection outside any transaction (each migration commits on its own)"
    )


def _default_schema(
    files: Sequence[Migration] | None, given: Sequence[SchemaFile] | None
) -> tuple[list[Migration], list[SchemaFile]]:
    if files is None:
        return migrations(), list(schema() if given is None else given)
    return list(files), list(given or [])


# ---------------------------------------------------------------- psycopg (sync)


def _cursor(conn: psycopg.Connection[Any]) -> psycopg.RawCursor[tuple[Any, ...]]:
    # $1 placeholders, as asyncpg takes them, and plain tuples whatever the connection's
    # row factory.
    return psycopg.RawCursor(conn, row_factory=tuple_row)


def _read_applied_sync(conn: psycopg.Connection[Any]) -> list[AppliedMigration] | None:
    """The recorded rows, or None when the bookkeeping table does not exist. No lock."""
    with _cursor(conn) as cur:
        exists = cur.execute(_TABLE_EXISTS).fetchone()
        if not exists or not exists[0]:
            return None
        return _applied_rows(cur.execute(_READ_APPLIED).fetchall())


def _lock_and_read_sync(conn: psycopg.Connection[Any], timeout: str) -> list[AppliedMigration]:
    with _cursor(conn) as cur:
        cur.execute(_LOCK_TIMEOUT, (timeout,))
        exists = cur.execute(_TABLE_EXISTS).fetchone()
        if not exists or not exists[0]:
            cur.execute(_BOOTSTRAP, prepare=False)
        cur.execute(_LOCK)
        return _applied_rows(cur.execute(_READ_APPLIED).fetchall())


def _install_sync(
    conn: psycopg.Connection[Any], files: Sequence[Migration], schema_files: Sequence[SchemaFile]
) -> None:
    for f in schema_files:
        # Multi-statement scripts: never prepared, whatever prepare_threshold says.
        conn.execute(_script(f.sql), prepare=False)
    with _cursor(conn) as cur:
        for migration in files:
            cur.execute(_RECORD, (migration.version, migration.name, migration.sha256))
        cur.execute(_REGRANT, prepare=False)


def _first_run_sync(
    conn: psycopg.Connection[Any],
    files: Sequence[Migration],
    schema_files: Sequence[SchemaFile],
    timeout: str,
) -> tuple[list[int], list[Migration]]:
    """Under the lock: install a fresh database, or plan the pending migrations."""
    # Two runners creating the bookkeeping table at once: the second fails on the
    # catalog's unique index once the first commits. Run again: it now exists.
    for attempt in (1, 2):
        try:
            with conn.transaction():
                applied = _lock_and_read_sync(conn, timeout)
                if applied or not schema_files:
                    return [], plan(files, applied)
                try:
                    _install_sync(conn, files, schema_files)
                except psycopg.Error as exc:
                    if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                        raise
                    raise _install_failed(exc) from exc
                return [m.version for m in files], []
        except psycopg.Error as exc:
            if exc.sqlstate != _UNIQUE_VIOLATION or attempt == 2:
                raise
    raise AssertionError("unreachable")


def apply_migrations_sync(
    conn: psycopg.Connection[Any],
    files: Sequence[Migration] | None = None,
    *,
    schema_files: Sequence[SchemaFile] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> list[int]:
    """Bring the schema up to date over a psycopg connection.

    Parameters
    ----------
    conn:
        An open connection, autocommit or not, with no transaction in progress. Each
        step commits on it as it goes.
    files:
        The migrations; defaults to :func:`cwstore._sql.migrations`.
    schema_files:
        What a fresh database (nothing recorded) is built from, in one transaction,
        before it is stamped with every migration in ``files``. Defaults to
        :func:`cwstore._sql.schema` when ``files`` is defaulted too; when ``files`` is
        given and this is not, a fresh database runs ``files`` one by one.
    lock_timeout:
        Seconds each migrating transaction waits for a lock (see the module's doc).

    Returns
    -------
    list[int]
        The versions this call applied (or stamped, on a fresh database), in order;
        empty when the database was current, in which case no lock was taken.

    Raises
    ------
    MigrationError
        The database was made by another migration chain, an applied migration's file
        changed, the connection is inside a transaction, a lock was not granted within
        ``lock_timeout``, or a step failed (it is rolled back; ``__cause__`` is the
        driver's error, and the migrations before it stay applied).
    """
    files, schema_files = _default_schema(files, schema_files)
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise _not_in_transaction()
    timeout = _timeout_setting(lock_timeout)
    with conn.transaction():
        applied = _read_applied_sync(conn)
    if applied is not None and not plan(files, applied):
        return []
    try:
        done, todo = _first_run_sync(conn, files, schema_files, timeout)
        for migration in todo:
            try:
                with conn.transaction():
                    if not plan([migration], _lock_and_read_sync(conn, timeout)):
                        continue  # another process applied it while we waited for the lock
                    conn.execute(_script(migration.sql), prepare=False)
                    with _cursor(conn) as cur:
                        cur.execute(_RECORD, (migration.version, migration.name, migration.sha256))
                        cur.execute(_REGRANT, prepare=False)
            except psycopg.Error as exc:
                if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                    raise
                raise _failed(migration, exc) from exc
            done.append(migration.version)
    except psycopg.Error as exc:
        if exc.sqlstate == _LOCK_NOT_AVAILABLE:
            raise _lock_timed_out(lock_timeout, exc) from exc
        raise MigrationError(f"migrating failed: {exc}") from exc
    return done


def status_sync(
    conn: psycopg.Connection[Any], files: Sequence[Migration] | None = None
) -> MigrationStatus:
    """Report applied and pending migrations over a psycopg connection; changes nothing.

    Parameters
    ----------
    conn:
        An open connection; reads only, without taking any lock.
    files:
        The migrations to compare against; defaults to :func:`cwstore._sql.migrations`.

    Raises
    ------
    MigrationError
        The database was made by another migration chain, or an applied migration's
        file changed (see :func:`plan`).
    """
    files = migrations() if files is None else files
    with conn.transaction():  # so a non-autocommit connection is left as it was found
        applied = _read_applied_sync(conn) or []
    return MigrationStatus(applied=applied, pending=plan(files, applied))


# ---------------------------------------------------------------- asyncpg


async def _read_applied(conn: asyncpg.Connection) -> list[AppliedMigration] | None:
    if not await conn.fetchval(_TABLE_EXISTS):
        return None
    return _applied_rows([tuple(r) for r in await conn.fetch(_READ_APPLIED)])


async def _lock_and_read(conn: asyncpg.Connection, timeout: str) -> list[AppliedMigration]:
    await conn.execute(_LOCK_TIMEOUT, timeout)
    if not await conn.fetchval(_TABLE_EXISTS):
        await conn.execute(_BOOTSTRAP)
    await conn.execute(_LOCK)
    return _applied_rows([tuple(r) for r in await conn.fetch(_READ_APPLIED)])


async def _install(
    conn: asyncpg.Connection, files: Sequence[Migration], schema_files: Sequence[SchemaFile]
) -> None:
    for f in schema_files:
        await conn.execute(f.sql)
    for migration in files:
        await conn.execute(_RECORD, migration.version, migration.name, migration.sha256)
    await conn.execute(_REGRANT)


async def _first_run(
    conn: asyncpg.Connection,
    files: Sequence[Migration],
    schema_files: Sequence[SchemaFile],
    timeout: str,
) -> tuple[list[int], list[Migration]]:
    """The asyncpg twin of :func:`_first_run_sync`."""
    for attempt in (1, 2):
        try:
            async with conn.transaction():
                applied = await _lock_and_read(conn, timeout)
                if applied or not schema_files:
                    return [], plan(files, applied)
                try:
                    await _install(conn, files, schema_files)
                except asyncpg.PostgresError as exc:
                    if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                        raise
                    raise _install_failed(exc) from exc
                return [m.version for m in files], []
        except asyncpg.UniqueViolationError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def apply_migrations(
    conn: asyncpg.Connection,
    files: Sequence[Migration] | None = None,
    *,
    schema_files: Sequence[SchemaFile] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> list[int]:
    """Bring the schema up to date over an asyncpg connection.

    The asyncpg twin of :func:`apply_migrations_sync`: same parameters, result and
    errors. ``conn`` must not be inside a transaction.
    """
    files, schema_files = _default_schema(files, schema_files)
    if conn.is_in_transaction():
        raise _not_in_transaction()
    timeout = _timeout_setting(lock_timeout)
    applied = await _read_applied(conn)
    if applied is not None and not plan(files, applied):
        return []
    try:
        done, todo = await _first_run(conn, files, schema_files, timeout)
        for migration in todo:
            try:
                async with conn.transaction():
                    if not plan([migration], await _lock_and_read(conn, timeout)):
                        continue  # another process applied it while we waited for the lock
                    await conn.execute(migration.sql)
                    await conn.execute(_RECORD, migration.version, migration.name, migration.sha256)
                    await conn.execute(_REGRANT)
            except asyncpg.PostgresError as exc:
                if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                    raise
                raise _failed(migration, exc) from exc
            done.append(migration.version)
    except asyncpg.PostgresError as exc:
        if exc.sqlstate == _LOCK_NOT_AVAILABLE:
            raise _lock_timed_out(lock_timeout, exc) from exc
        raise MigrationError(f"migrating failed: {exc}") from exc
    return done


async def status(
    conn: asyncpg.Connection, files: Sequence[Migration] | None = None
) -> MigrationStatus:
    """Report applied and pending migrations over an asyncpg connection; changes nothing.

    The asyncpg twin of :func:`status_sync`.
    """
    files = migrations() if files is None else files
    applied = await _read_applied(conn) or []
    return MigrationStatus(applied=applied, pending=plan(files, applied))


def distribute_sync(conn: psycopg.Connection[Any]) -> None:
    """Distribute a migrated schema on a Citus cluster (``cwstore init --citus``).

    Runs ``cwstore/sql/citus.sql`` in one transaction on the coordinator: every table
    keyed by graph distributed by ``graph_id`` and co-located, the shared tables as
    reference tables (see docs/scaling.md). Idempotent. Raises
    :class:`~cwstore.errors.MigrationError` when the database has no citus extension
    or Citus refuses a step (nothing is changed).
    """
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise _not_in_transaction()
    try:
        with conn.transaction():
            conn.execute(script("citus.sql"), prepare=False)
    except psycopg.Error as exc:
        raise MigrationError(f"distributing the schema on Citus failed: {exc}") from exc


def citus_installed_sync(conn: psycopg.Connection[Any]) -> bool:
    """Whether the database has the citus extension."""
    with conn.transaction():
        row = conn.execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus'")
        return row.fetchone() is not None
