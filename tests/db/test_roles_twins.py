"""The roles' installers, async (asyncpg) and generated sync (psycopg), do the same."""

from __future__ import annotations

from typing import Any

import asyncpg
import psycopg

from cwstore import roles
from cwstore.drivers.asyncpg import AsyncpgConnection
from cwstore.drivers.psycopg import PsycopgConnection

_MEMBERS = "SELECT tenant, member::text FROM cwstore.tenant_members WHERE tenant = $1"


async def test_install_roles_and_members_async(aconn: asyncpg.Connection) -> None:
    await roles.install_roles(AsyncpgConnection(aconn))
    await roles.install_roles(AsyncpgConnection(aconn))  # again: idempotent
    await roles.add_tenant_member(AsyncpgConnection(aconn), "acme-async", roles.READER)
    rows = await aconn.fetch(_MEMBERS, "acme-async")
    assert [tuple(r) for r in rows] == [("acme-async", roles.READER)]
    granted = await aconn.fetchval(
        "SELECT has_function_privilege($1, 'cwstore.projection_v1(text, bigint)', 'EXECUTE')",
        roles.READER,
    )
    assert granted is True


def test_install_roles_and_members_sync(conn: psycopg.Connection[Any]) -> None:
    roles.install_roles_sync(PsycopgConnection(conn))
    roles.add_tenant_member_sync(PsycopgConnection(conn), "acme-sync", roles.WRITER)
    rows = conn.execute(
        "SELECT tenant, member::text FROM cwstore.tenant_members WHERE tenant = %s",
        ("acme-sync",),
    ).fetchall()
    assert rows == [("acme-sync", roles.WRITER)]
