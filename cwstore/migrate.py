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

The runner is written once, over the driver layer, in :mod:`cwstore._migrate_async`;
:mod:`cwstore._migrate_sync` is generated from it (``tools/async_to_sync.py``) with the
same names, and this module exports those with ``_sync`` added. The
bookkeeping SQL stays in Python (:mod:`cwstore._migration_plan`), not in ``sql/``: it is
what reads and records the files there, so it has to exist before any of them has run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy_exports import runner_attribute
from ._migration_plan import DEFAULT_LOCK_TIMEOUT, AppliedMigration, MigrationStatus, Setup, plan

if TYPE_CHECKING:
    from ._migrate_async import (
        apply_migrations,
        check_schema,
        citus_installed,
        distribute,
        distributed,
        migrate_dsn,
        setup,
        status,
    )
    from ._migrate_sync import apply_migrations as apply_migrations_sync
    from ._migrate_sync import check_schema as check_schema_sync
    from ._migrate_sync import citus_installed as citus_installed_sync
    from ._migrate_sync import distribute as distribute_sync
    from ._migrate_sync import distributed as distributed_sync
    from ._migrate_sync import migrate_dsn as migrate_dsn_sync
    from ._migrate_sync import setup as setup_sync
    from ._migrate_sync import status as status_sync

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "AppliedMigration",
    "MigrationStatus",
    "Setup",
    "apply_migrations",
    "apply_migrations_sync",
    "check_schema",
    "check_schema_sync",
    "citus_installed",
    "citus_installed_sync",
    "distribute",
    "distribute_sync",
    "distributed",
    "distributed_sync",
    "migrate_dsn",
    "migrate_dsn_sync",
    "plan",
    "setup",
    "setup_sync",
    "status",
    "status_sync",
]


def __getattr__(name: str) -> Any:
    return runner_attribute(__name__, name)
