"""Login roles in two tenants, and a graph that changes hands while a call waits.

:func:`tenant_roles` makes, in one database, an admin, a writer and a reader of tenant
``acme`` and an admin and a writer of ``globex`` (``cwstore init --roles`` first), and
drops them afterwards. :class:`ChangingHands` makes deterministic the race where a
graph of one tenant is erased and made again, under the same name (so the same key), by
another tenant, between a call's unlocked read of the graph and its lock: the call
waits on a table lock held by the test, which erases and re-creates the graph in that
same transaction and commits; the call then locks whatever holds the key.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cwstore import _jsontext, roles
from cwstore.drivers.psycopg import PsycopgConnection

from .nodes import node
from .stores import dsn_as


@dataclass(frozen=True)
class Roles:
    """DSNs of the owner (the test's superuser) and of the login roles made, and their
    role names by part (``names["writer_a"]``)."""

    owner: str
    admin_a: str
    admin_b: str
    writer_a: str
    writer_b: str
    reader_a: str
    names: dict[str, str]


TENANT_A = "acme"
TENANT_B = "globex"
_ROLES = (
    ("admin_a", "cwstore_admin", TENANT_A),
    ("admin_b", "cwstore_admin", TENANT_B),
    ("writer_a", "cwstore_writer", TENANT_A),
    ("writer_b", "cwstore_writer", TENANT_B),
    ("reader_a", "cwstore_reader", TENANT_A),
)


@contextmanager
def tenant_roles(dsn: str) -> Iterator[Roles]:
    """The roles of :class:`Roles`, made in the database of ``dsn`` (a superuser's) and
    dropped on exit."""
    tag = uuid.uuid4().hex[:8]
    names = {who: f"cw_{tag}_{who}" for who, _, _ in _ROLES}
    with psycopg.connect(dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))
        for who, group, _ in _ROLES:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(names[who]), sql.Identifier(group)
                )
            )
    made = Roles(dsn, **{w: dsn_as(dsn, names[w]) for w, _, _ in _ROLES}, names=names)
    rejoin(made)
    try:
        yield made
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def rejoin(made: Roles) -> None:
    """Each role of ``made`` in its tenant again (erasing the last graph of a tenant
    removes its memberships)."""
    with psycopg.connect(made.owner, autocommit=True) as conn:
        for who, _, tenant in _ROLES:
            roles.add_tenant_member_sync(PsycopgConnection(conn), tenant, made.names[who])


@dataclass(frozen=True)
class Held:
    """What a graph looked like after :class:`ChangingHands` gave it to tenant B."""

    graph_id: int
    incarnation: int
    tenant: str
    ids: list[str]
    erasures: list[tuple[int, str]]
    """(incarnation, tenant) of every audit record of the graph's key."""


class ChangingHands:
    """A graph of tenant A (``name``, made by the owner with ``nodes`` nodes of A's
    own, or none) that is erased and made again, empty, by tenant B, at the moment a
    call is waiting for it.

    ``with hands.hold():`` holds ``EXCLUSIVE`` on ``cwstore.graphs`` (reads go on;
    locking a graph's row waits). Start the call in a thread, then :meth:`swap` once it
    waits (:meth:`wait_for`): the graph is erased and made again for tenant B in the
    holding transaction, which commits, and the call goes on.
    """

    def __init__(self, owner: str, name: str, nodes: int = 1) -> None:
        self.owner = owner
        self.name = name
        self.a_nodes = [node("goal", f"{name}: tenant A's secret {i}") for i in range(nodes)]
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("SELECT set_config('cwstore.tenant', %s, false)", (TENANT_A,))
            conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (name,))
            if self.a_nodes:
                conn.execute(
                    "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                    (name, _jsontext.dumps(self.a_nodes)),
                )
            self.graph_id, self.a_incarnation = self._row(conn)
        self._holder: psycopg.Connection[Any] | None = None

    def _row(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        row = conn.execute(
            "SELECT graph_id, incarnation FROM cwstore.graphs WHERE name = %s", (self.name,)
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    @contextmanager
    def hold(self) -> Iterator[None]:
        """The table lock, held until :meth:`swap` (or the block's end)."""
        with psycopg.connect(self.owner) as holder:
            holder.execute("LOCK TABLE cwstore.graphs IN EXCLUSIVE MODE")
            self._holder = holder
            try:
                yield
            finally:
                self._holder = None
                holder.rollback()

    def wait_for(self, waiting: Callable[[psycopg.Connection[Any]], bool]) -> None:
        """Return once ``waiting(conn)`` (asked on a connection of the owner's) is true,
        within 30 s."""
        deadline = time.monotonic() + 30
        with psycopg.connect(self.owner, autocommit=True) as conn:
            while not waiting(conn):
                assert time.monotonic() < deadline, "the call never waited for the lock"
                time.sleep(0.02)

    def swap(self) -> None:
        """Erase the graph and make it again (empty: a life's first node must come from a
        transaction newer than the erasure) for tenant B, in the holding transaction, and
        commit."""
        holder = self._holder
        assert holder is not None, "swap() inside hold() only"
        holder.execute("SELECT cwstore.erase_graph_v1(%s, 'changing hands')", (self.name,))
        holder.execute("SELECT set_config('cwstore.tenant', %s, true)", (TENANT_B,))
        holder.execute("SELECT cwstore.ensure_graph_v1(%s)", (self.name,))
        holder.commit()

    def now(self) -> Held:
        """The graph of the name as stored now, read by the owner."""
        with psycopg.connect(self.owner, autocommit=True) as conn:
            row = conn.execute(
                "SELECT graph_id, incarnation, tenant FROM cwstore.graphs WHERE name = %s",
                (self.name,),
            ).fetchone()
            assert row is not None, "the graph is gone"
            ids = [
                str(r[0])
                for r in conn.execute(
                    "SELECT id FROM cwstore.nodes WHERE graph_id = %s ORDER BY seq", (row[0],)
                ).fetchall()
            ]
            erasures = [
                (int(r[0]), str(r[1]))
                for r in conn.execute(
                    "SELECT incarnation, tenant FROM cwstore.erasures WHERE graph_id = %s"
                    " ORDER BY erasure_id",
                    (row[0],),
                ).fetchall()
            ]
        return Held(int(row[0]), int(row[1]), str(row[2]), ids, erasures)

    def assert_b_untouched(self) -> Held:
        """The graph is tenant B's, still empty, and the only erasure recorded is the
        swap's, of A's life."""
        held = self.now()
        assert held.tenant == TENANT_B
        assert held.incarnation != self.a_incarnation
        assert held.ids == []
        assert held.erasures == [(self.a_incarnation, TENANT_A)]
        return held


def waiting_on_lock(usename: str) -> Callable[[psycopg.Connection[Any]], bool]:
    """Whether a backend of login role ``usename`` in the asking connection's database
    waits for a lock."""

    def check(conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s"
            " AND datname = current_database() AND wait_event_type = 'Lock'",
            (usename,),
        ).fetchone()
        return row is not None and int(row[0]) > 0

    return check


def in_thread(call: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``call`` in a thread now; the returned function joins it (60 s at most) and
    returns what it returned, or the exception it raised."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> Any:
        thread.join(60)
        assert not thread.is_alive(), "the call did not finish"
        return box[0]

    return join
