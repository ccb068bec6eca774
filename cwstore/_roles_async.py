"""Installing the roles and tenant members over the driver layer, written once.

``tools/async_to_sync.py`` generates ``cwstore/_roles_sync.py`` from
``cwstore/_roles_async.py``; :mod:`cwstore.roles` exports both (the generated functions
with ``_sync`` added) and says what the roles are.
"""

from __future__ import annotations

from typing import Final

from ._sql import script
from .drivers.asyncpg import AsyncpgConnection, RawConnection

__all__ = ["add_tenant_member", "install_roles"]

_ADD_MEMBER: Final = "SELECT cwstore.add_tenant_member($1, $2)"


async def install_roles(conn: RawConnection) -> None:
    """Create the two roles if missing and (re)apply their grants, in one transaction
    (``cwstore/sql/roles.sql``).

    Needs a migrated schema and a role that owns it and may create roles.
    """
    c = AsyncpgConnection(conn)
    async with c.transaction():
        await c.execute_script(script("roles.sql"))


async def add_tenant_member(conn: RawConnection, tenant: str, role: str) -> None:
    """Let ``role`` (and its members) read and write the graphs of ``tenant``."""
    await AsyncpgConnection(conn).execute(_ADD_MEMBER, tenant, role)
