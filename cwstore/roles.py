"""Roles and tenants: who may read and write which graphs.

Three group roles, made by :func:`install_roles_sync` (``cwstore init --roles``) from
``sql/roles.sql``: ``cwstore_reader`` reads (tables and views under row-level security,
the read functions), ``cwstore_writer`` also writes, through the SECURITY DEFINER
write functions only, and ``cwstore_admin`` also erases (docs/erasure.md). A graph
belongs to a tenant (``graphs.tenant``); a role sees and
writes the graphs of the tenants it belongs to, listed in ``cwstore.tenant_members`` for
it or a role it is a member of (:func:`add_tenant_member_sync`). Superusers, BYPASSRLS
roles and members of the schema's owner see everything. The rules themselves live in
``sql/schema/50_tenancy.sql``; the functions that run them are written with the
migration runner, in :mod:`cwstore._migrate_async` (``setup(roles=True)`` calls
:func:`install_roles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._lazy_exports import runner_attribute

if TYPE_CHECKING:
    from ._migrate_async import add_tenant_member, install_roles
    from ._migrate_sync import add_tenant_member as add_tenant_member_sync
    from ._migrate_sync import install_roles as install_roles_sync

__all__ = [
    "ADMIN",
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
ADMIN: Final = "cwstore_admin"
"""The group role that may also erase the graphs of its tenants (docs/erasure.md)."""


def __getattr__(name: str) -> Any:
    return runner_attribute(__name__, name)
