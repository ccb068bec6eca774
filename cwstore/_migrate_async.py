"""Setting up a database over the driver layer, written once: the migration runner,
distribution on Citus, and the roles (:mod:`cwstore.roles` says what they are).

``tools/async_to_sync.py`` generates ``cwstore/_migrate_sync.py`` from
``cwstore/_migrate_async.py``; the functions keep their names in both, and
:mod:`cwstore.migrate` and :mod:`cwstore.roles` export the generated ones with ``_sync``
added. How a migration run goes is told in :mod:`cwstore.migrate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._migration_plan import (
    _BOOTSTRAP,
    _CITUS_INSTALLED,
    _DISTRIBUTED,
    _LOCK,
    _LOCK_NOT_AVAILABLE,
    _LOCK_TIMEOUT,
    _READ_APPLIED,
    _READINESS,
    _RECORD,
    _REGRANT,
    _TABLE_EXISTS,
    _UNIQUE_VIOLATION,
    DEFAULT_LOCK_TIMEOUT,
    AppliedMigration,
    MigrationStatus,
    Setup,
    _applied_rows,
    _default_schema,
    _failed,
    _install_failed,
    _lock_timed_out,
    _not_in_transaction,
    _script,
    _timeout_setting,
    plan,
    schema_verdict,
    statements,
)
from ._sql import Migration, SchemaFile, migrations, script
from .drivers._protocol import AsyncConnection
from .drivers.asyncpg import open_connection
from .errors import Error, MigrationError

__all__ = [
    "add_tenant_member",
    "apply_migrations",
    "check_schema",
    "citus_installed",
    "distribute",
    "distributed",
    "install_roles",
    "migrate_dsn",
    "setup",
    "status",
]

_ADD_MEMBER: Final = "SELECT cwstore.add_tenant_member($1, $2)"


async def _read_applied(conn: AsyncConnection) -> list[AppliedMigration] | None:
    """The recorded rows, or None when the bookkeeping table does not exist. No lock."""
    if not await conn.fetchval(_TABLE_EXISTS):
        return None
    return _applied_rows(await conn.fetch(_READ_APPLIED))


async def _lock_and_read(conn: AsyncConnection, timeout: str) -> list[AppliedMigration]:
    await conn.execute(_LOCK_TIMEOUT, timeout)
    if not await conn.fetchval(_TABLE_EXISTS):
        await conn.execute_script(_BOOTSTRAP)
    await conn.execute(_LOCK)
    return _applied_rows(await conn.fetch(_READ_APPLIED))


async def _record(conn: AsyncConnection, migration: Migration) -> None:
    await conn.execute(_RECORD, migration.version, migration.name, migration.sha256)


async def _install(
    conn: AsyncConnection, files: Sequence[Migration], schema_files: Sequence[SchemaFile]
) -> None:
    for f in schema_files:
        await conn.execute_script(_script(f.sql))
    for migration in files:
        await _record(conn, migration)
    await conn.execute_script(_REGRANT)


async def _first_run(
    conn: AsyncConnection,
    files: Sequence[Migration],
    schema_files: Sequence[SchemaFile],
    timeout: str,
) -> tuple[list[int], list[Migration]]:
    """Under the lock: install a fresh database, or plan the pending migrations."""
    # Two runners creating the bookkeeping table at once: the second fails on the
    # catalog's unique index once the first commits. Run again: it now exists.
    for attempt in (1, 2):
        try:
            async with conn.transaction():
                applied = await _lock_and_read(conn, timeout)
                if applied or not schema_files:
                    return [], plan(files, applied)
                try:
                    await _install(conn, files, schema_files)
                except Error as exc:
                    if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                        raise
                    raise _install_failed(exc) from exc
                return [m.version for m in files], []
        except MigrationError:
            raise
        except Error as exc:
            if exc.sqlstate != _UNIQUE_VIOLATION or attempt == 2:
                raise
    raise AssertionError("unreachable")


async def apply_migrations(
    conn: AsyncConnection,
    files: Sequence[Migration] | None = None,
    *,
    schema_files: Sequence[SchemaFile] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> list[int]:
    """Bring the schema up to date over a connection (of :func:`open_connection`).

    Parameters
    ----------
    conn:
        An open connection with no transaction in progress. Each step commits on it as
        it goes.
    files:
        The migrations; defaults to :func:`cwstore._sql.migrations`.
    schema_files:
        What a fresh database (nothing recorded) is built from, in one transaction,
        before it is stamped with every migration in ``files``. Defaults to
        :func:`cwstore._sql.schema` when ``files`` is defaulted too; when ``files`` is
        given and this is not, a fresh database runs ``files`` one by one.
    lock_timeout:
        Seconds each migrating transaction waits for a lock (see :mod:`cwstore.migrate`).

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
        cwstore error the step raised, and the migrations before it stay applied).
    """
    files, schema_files = _default_schema(files, schema_files)
    if conn.in_transaction():
        raise _not_in_transaction()
    timeout = _timeout_setting(lock_timeout)
    async with conn.transaction():
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
                    for statement in statements(migration.sql):
                        await conn.execute_script(_script(statement))
                    await _record(conn, migration)
                    await conn.execute_script(_REGRANT)
            except MigrationError:
                raise
            except Error as exc:
                if exc.sqlstate == _LOCK_NOT_AVAILABLE:
                    raise
                raise _failed(migration, exc) from exc
            done.append(migration.version)
    except MigrationError:
        raise
    except Error as exc:
        if exc.sqlstate == _LOCK_NOT_AVAILABLE:
            raise _lock_timed_out(lock_timeout, exc) from exc
        raise MigrationError(f"migrating failed: {exc}") from exc
    return done


async def status(
    conn: AsyncConnection, files: Sequence[Migration] | None = None
) -> MigrationStatus:
    """Report applied and pending migrations; changes nothing.

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
        file changed (see :func:`cwstore.migrate.plan`).
    """
    files = migrations() if files is None else files
    async with conn.transaction():  # every read in one snapshot
        applied = await _read_applied(conn) or []
    return MigrationStatus(applied=applied, pending=plan(files, applied))


async def check_schema(conn: AsyncConnection, files: Sequence[Migration] | None = None) -> None:
    """Refuse a database whose schema this client may not use, by
    :func:`~cwstore._migration_plan.schema_verdict` (the one rule): reads in one
    snapshot, without any lock, and changes nothing.

    Raises :class:`SchemaNotReadyError` (no schema, or one behind ``files``, by default
    :func:`cwstore._sql.migrations`), or :class:`MigrationError` for a database of
    another migration chain or an edited migration (see :func:`cwstore.migrate.plan`).
    """
    files = migrations() if files is None else files
    async with conn.transaction(snapshot=True):
        row = await conn.fetchrow(_READINESS)
        assert row is not None
        readable = None
        if row["readable"]:
            applied = _applied_rows(await conn.fetch(_READ_APPLIED))
            readable = MigrationStatus(applied=applied, pending=plan(files, applied))
    schema_verdict(bool(row["present"]), readable)


async def setup(conn: AsyncConnection, *, citus: bool = False, roles: bool = False) -> Setup:
    """Bring a database's cwstore schema up to date: the one way every caller does it
    (``cwstore init``, :func:`~cwstore.connect` with ``migrate_schema=True``, the tests).

    Applies the pending migrations (:func:`apply_migrations`); distributes the schema on
    Citus when ``citus`` is asked, and applies ``sql/citus.sql`` again on a
    database already distributed (a migration that redefines a function drops the
    settings that file gives it, and adds tables it must distribute); with ``roles``,
    creates the group roles and applies their grants (``sql/roles.sql``).
    Idempotent; on a current database that is neither asked nor distributed it reads
    and writes nothing else. Raises like the functions it runs.
    """
    applied = await apply_migrations(conn)
    spread = citus or await distributed(conn)
    if spread:
        await distribute(conn)
    if roles:
        await install_roles(conn)
    return Setup(
        applied=applied,
        on_citus=spread,
        citus_available=spread or await citus_installed(conn),
        roles=roles,
    )


async def migrate_dsn(dsn: str, *, pooled: bool = False) -> Setup:
    """:func:`setup` on a connection of its own to ``dsn``, closed after (``pooled``:
    ``dsn`` leads to a transaction-mode pooler). Raises :class:`MigrationError`, or a
    cwstore error when the server cannot be reached."""
    async with open_connection(dsn, pooled=pooled) as conn:
        return await setup(conn)


async def distribute(conn: AsyncConnection) -> None:
    """Distribute a migrated schema on a Citus cluster (``cwstore init --citus``).

    Runs ``sql/citus.sql`` in one transaction on the coordinator: every table
    keyed by graph distributed by ``graph_id`` and co-located, the shared tables as
    reference tables (docs/scaling.md). Idempotent. Raises :class:`MigrationError` when
    the connection is inside a transaction, the database has no citus extension, or
    Citus refuses a step (nothing is changed; ``__cause__`` is the cwstore error).
    """
    if conn.in_transaction():
        raise _not_in_transaction()
    try:
        async with conn.transaction():
            await conn.execute_script(script("citus.sql"))
    except Error as exc:
        raise MigrationError(f"distributing the schema on Citus failed: {exc}") from exc


async def citus_installed(conn: AsyncConnection) -> bool:
    """Whether the database has the citus extension; reads only."""
    async with conn.transaction():
        return bool(await conn.fetchval(_CITUS_INSTALLED))


async def distributed(conn: AsyncConnection) -> bool:
    """Whether the schema is distributed on Citus (:func:`distribute` ran); reads only.

    A migration that redefines a function resets the settings ``citus.sql`` gives it,
    so ``cwstore init`` runs :func:`distribute` again after migrating such a database.
    """
    async with conn.transaction():
        if not await conn.fetchval(_CITUS_INSTALLED):
            return False
        return bool(await conn.fetchval(_DISTRIBUTED))


async def install_roles(conn: AsyncConnection) -> None:
    """Create the group roles if missing and (re)apply their grants, in one transaction
    (``sql/roles.sql``).

    Needs a migrated schema and a role that owns it and may create roles.
    """
    async with conn.transaction():
        await conn.execute_script(script("roles.sql"))


async def add_tenant_member(conn: AsyncConnection, tenant: str, role: str) -> None:
    """Let ``role`` (and its members) read and write the graphs of ``tenant``."""
    await conn.execute(_ADD_MEMBER, tenant, role)
