"""What the migration runners share and decide without I/O: the bookkeeping SQL, the
recorded rows as values, and :func:`plan` (see :mod:`cwstore.migrate`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, LiteralString

from cwstore._sql import Migration, SchemaFile, migrations, schema
from cwstore.drivers._protocol import Row
from cwstore.errors import MigrationError, SchemaNotReadyError

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "AppliedMigration",
    "MigrationStatus",
    "Setup",
    "plan",
    "schema_verdict",
    "statements",
]

DEFAULT_LOCK_TIMEOUT: Final = 60.0
"""Seconds a migrating transaction waits for any lock before it gives up."""

_CITUS_INSTALLED: Final = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')"
)
_DISTRIBUTED: Final = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition"
    " WHERE logicalrelid = 'cwstore.graphs'::regclass)"
)
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
    'Migrations this database holds: one row per sql/migrations/NNNN_name.sql file, '
    'with the SHA-256 of the file as applied (or as stamped, for a database built from '
    'sql/schema/). Never edit an applied file; add the next one.';
"""
_READINESS: Final = (
    "SELECT to_regclass('cwstore.nodes') IS NOT NULL AS present,"
    " coalesce(pg_catalog.has_table_privilege("
    "to_regclass('cwstore.schema_migrations'), 'SELECT'), false) AS readable"
)
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


@dataclass(frozen=True, slots=True)
class Setup:
    """What :func:`cwstore.migrate.setup` did: the versions it applied (none on a current
    database), whether the schema is distributed on Citus (``on_citus``: ``citus.sql``
    applied),
    whether the database has the citus extension at all, and whether the roles were
    installed."""

    applied: list[int]
    on_citus: bool
    citus_available: bool
    roles: bool


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
        another chain (a development chain squashed before its release: 0001_schema ..
        0007 into 0001_baseline, 0002_sql_door .. 0016 into 0002_to_0_1_0); it cannot be
        upgraded in place. Or a recorded migration's checksum differs from its file: the
        file was edited after it was applied. ``version`` names the migration.
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
                f"{migration.filename} (a development chain, squashed before its "
                "release: 0001_schema .. 0007_notify_listeners into 0001_baseline, "
                "0002_sql_door .. 0016 into 0002_to_0_1_0; it cannot be upgraded in "
                "place). Create a new database, run "
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


def _applied_rows(rows: Sequence[Row]) -> list[AppliedMigration]:
    """The rows of ``_READ_APPLIED``, by column name."""
    return [
        AppliedMigration(
            version=r["version"],
            name=r["name"],
            sha256=r["sha256"],
            applied_at=r["applied_at"],
        )
        for r in rows
    ]


def _server_said(exc: Exception) -> str:
    """The server's own words for a failed step: the driver's error under the mapped one
    (a violated constraint of the node tables maps to a ``ValidationError`` about a
    document, which a migration is not)."""
    cause = exc.__cause__
    return str(cause if cause is not None else exc).strip()


def _failed(migration: Migration, exc: Exception) -> MigrationError:
    return MigrationError(
        f"migration {migration.filename} failed and was rolled back: {_server_said(exc)}",
        migration.version,
    )


def _install_failed(exc: Exception) -> MigrationError:
    return MigrationError(
        f"installing the schema (sql/schema/) failed and was rolled back: {_server_said(exc)}"
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


_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\U0010ffff][A-Za-z_0-9\x80-\U0010ffff]*)?\$")


def statements(sql: str) -> list[str]:
    """The statements of a SQL script, in order, as PostgreSQL's own client (psql)
    splits one: at each semicolon outside quotes ('…', E'…', "…", dollar quotes) and
    comments (--, nested /* */). Each keeps its comments and loses its closing
    semicolon; pieces holding only comments or whitespace are dropped.

    A migration runs one statement per query: a distributed PostgreSQL (Citus) passes
    the text of the query to its workers when it changes a distributed table, and
    refuses a text of several statements there."""
    out: list[str] = []
    start = 0
    code = False
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c == "/" and sql.startswith("/*", i):
            i = _block_comment_end(sql, i)
            continue
        if c == ";":
            if code:
                out.append(sql[start:i].strip())
            start, code, i = i + 1, False, i + 1
            continue
        if not c.isspace():
            code = True
        word = i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")
        if c == "'":
            i = _string_end(sql, i, word)
        elif c == '"':
            i = _identifier_end(sql, i)
        elif c == "$" and not word and (tag := _DOLLAR_TAG.match(sql, i)):
            end = sql.find(tag.group(), tag.end())
            i = n if end < 0 else end + len(tag.group()) - 1
        i += 1
    if code:
        out.append(sql[start:].strip())
    return out


def _block_comment_end(sql: str, i: int) -> int:
    """Past the ``/* */`` comment opening at ``i`` (comments nest), or the end of ``sql``."""
    n = len(sql)
    depth, i = 1, i + 2
    while i < n and depth:
        if sql.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif sql.startswith("*/", i):
            depth, i = depth - 1, i + 2
        else:
            i += 1
    return i


def _string_end(sql: str, i: int, word: bool) -> int:
    """The quote closing the string constant opening at ``i`` (or the end of ``sql``).

    ``''`` is a quote inside it; so is ``\\'`` in an escape string (``E'…'``: the quote
    follows an ``e`` that is a word of its own; ``word`` tells the quote follows a word
    character)."""
    n = len(sql)
    backslashes = (
        word and sql[i - 1] in "eE" and not (i > 1 and (sql[i - 2].isalnum() or sql[i - 2] in "_$"))
    )
    i += 1
    while i < n:
        if (backslashes and sql[i] == "\\") or sql.startswith("''", i):
            i += 2
        elif sql[i] == "'":
            break
        else:
            i += 1
    return i


def _identifier_end(sql: str, i: int) -> int:
    """The quote closing the quoted identifier opening at ``i`` (``""`` is a quote inside
    it), or the end of ``sql``."""
    n = len(sql)
    i += 1
    while i < n and not (sql[i] == '"' and not sql.startswith('""', i)):
        i += 2 if sql.startswith('""', i) else 1
    return i


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


def schema_verdict(present: bool, status: MigrationStatus | None) -> None:
    """The one rule for "may this client use this database's schema?", which
    :func:`cwstore.connect` and every CLI command that does not migrate apply (through
    ``check_schema``): pure, the reads are the caller's.

    ``present``: the schema's tables exist. ``status``: what the bookkeeping records
    against this client's migrations, or ``None`` when the connecting role may not
    read it (a tenant's role): then the tables existing is all that can be known.

    Raises :class:`SchemaNotReadyError` naming ``cwstore init`` when the database holds
    no cwstore schema (no tables, or nothing recorded), or when a migration of this
    client is not recorded (the schema is behind).
    """
    if not present or (status is not None and not status.applied):
        raise SchemaNotReadyError(
            "this database holds no cwstore schema: run `cwstore init` first "
            "(or connect with migrate_schema=True)"
        )
    if status is not None and status.pending:
        raise SchemaNotReadyError(
            f"this database's cwstore schema is at version {status.current_version}, "
            f"behind this client ({status.pending[0].filename} and "
            f"{len(status.pending) - 1} more pending): run `cwstore init` to bring it up "
            "to date (or connect with migrate_schema=True)"
        )
