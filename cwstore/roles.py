"""Roles and tenants: who may read and write which graphs.

Two group roles, made by :func:`install_roles_sync` (``cwstore init --roles``) from
``cwstore/sql/roles.sql``: ``cwstore_reader`` reads (tables and views under row-level security,
the read functions) and ``cwstore_writer`` also writes, through the SECURITY DEFINER
write functions only. A graph belongs to a tenant (``graphs.tenant``); a role sees and
writes the graphs of the tenants it belongs to, listed in ``cwstore.tenant_members`` for
it or a role it is a member of (:func:`add_tenant_member_sync`). Superusers, BYPASSRLS
roles and members of the schema's owner see everything. The rules themselves live in
``cwstore/sql/schema/50_tenancy.sql``; this module only runs them.
"""

from __future__ import annotations

from typing import Any, Final

import asyncpg
import psycopg

from ._sql import script

__all__ = [
    "READER",
    "WRITER",
    "add_tenant_member",
    "add_tenant_member_sync",
    "install_roles",
    "install_roles_sync",
]

READER: Final = "cwstore_reader"
"""The group role that reads: grant it to login roles that only read."""
WRITER: Final = "cwstore_writer"
"""The group role that writes through the write functions (and reads)."""

_ADD_MEMBER: Final = "SELECT cwstore.add_tenant_member($1, $2)"


def install_roles_sync(conn: psycopg.Connection[Any]) -> None:
    """Create the two roles if missing and (re)apply their grants, in one transaction.

    Needs a migrated schema and a role that owns it and may create roles.
    """
    with conn.transaction():
        conn.execute(script("roles.sql"), prepare=False)


async def install_roles(conn: asyncpg.Connection) -> None:
    """The asyncpg twin of :func:`install_roles_sync`."""
    async with conn.transaction():
        await conn.execute(script("roles.sql"))


def add_tenant_member_sync(conn: psycopg.Connection[Any], tenant: str, role: str) -> None:
    """Let ``role`` (and its members) read and write the graphs of ``tenant``."""
    with psycopg.RawCursor(conn) as cur:
        cur.execute(_ADD_MEMBER, (tenant, role))


async def add_tenant_member(conn: asyncpg.Connection, tenant: str, role: str) -> None:
    """The asyncpg twin of :func:`add_tenant_member_sync`."""
    await conn.execute(_ADD_MEMBER, tenant, role)
