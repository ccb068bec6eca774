"""Roles and tenants, with real login roles: nobody reads or writes what is not theirs.

The module's database gets ``cwstore init --roles`` (:func:`cwstore.roles.install_roles_sync`)
and three login roles made for this run:

- ``alice``: ``cwstore_writer``, tenant ``acme``;
- ``bob``: ``cwstore_writer``, tenant ``globex``;
- ``carol``: ``cwstore_reader``, tenant ``acme``.

Every store-level test runs once per client (asyncpg and psycopg), each role through a
store opened with that role's own DSN. What is stored is checked with the superuser's
connection, so "nothing was written" is read from the tables, not from the refused
role's (filtered) view of them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import sql
from support.documents import GraphBuilder
from support.stores import ThreadedStore, dsn_as

import cwstore
from cwstore import migrate, roles
from cwstore._sql import Migration, migrations
from cwstore.drivers.psycopg import PsycopgConnection

READ_API = {
    "seq_at_time(text,timestampwithtimezone)",
    "frontier_at(text,bigint)",
    "heads_at(text,bigint)",
    "semantic_at(text,bigint)",
    "ancestors(text,text,integer)",
    "descendants(text,text,integer)",
    "path(text,text,text)",
    "key_history(text,text)",
    "projection_v1(text,bigint)",
    "listen_v1()",
    "unlisten_v1()",
    "export_v1(text,bigint,timestampwithtimezone)",
    "export_parts_v1(text,bigint,timestampwithtimezone,bigint)",
    "_erasure_events(bigint,bigint,bigint,bigint,integer)",
}
WRITE_API = {
    "append_v1(text,json,bigint,json,bigint)",
    "begin_import_v1(text,text[])",
    "declare_frontier_v1(bigint,text[])",
    "derive_v1(text)",
    "ensure_graph_v1(text,text[])",
    "import_rows_v1(bigint,bigint[],text[],text[],text[],text[],text[],text[])",
}
ERASE_API = {
    "erase_graph_v1(text,text)",
    "erase_tenant_v1(text,text,integer)",
    "idle_graphs_v1(interval,text)",
    "erase_idle_v1(interval,text,text,integer)",
}
"""Run by cwstore_admin only (docs/erasure.md), checked again inside per tenant."""


@dataclass
class Roles:
    admin: str
    alice: str
    bob: str
    carol: str
    names: dict[str, str]


@pytest.fixture(scope="module")
def setup(db_dsn: str) -> Iterator[Roles]:
    tag = uuid.uuid4().hex[:8]
    names = {who: f"cw_{tag}_{who}" for who in ("alice", "bob", "carol")}
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))
        for who, group in (("alice", "writer"), ("bob", "writer"), ("carol", "reader")):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(names[who]), sql.Identifier(f"cwstore_{group}")
                )
            )
        roles.add_tenant_member_sync(PsycopgConnection(conn), "acme", names["alice"])
        roles.add_tenant_member_sync(PsycopgConnection(conn), "globex", names["bob"])
        roles.add_tenant_member_sync(PsycopgConnection(conn), "acme", names["carol"])
    try:
        alice, bob, carol = (dsn_as(db_dsn, names[w]) for w in ("alice", "bob", "carol"))
        yield Roles(db_dsn, alice, bob, carol, names)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


Opener = Callable[..., Awaitable[Any]]


@pytest.fixture(params=["asyncpg", "psycopg-sync"])
async def open_store(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """``await open_store(dsn, tenant=None)``: a store of that client, closed after."""
    opened: list[Any] = []

    async def open_(dsn: str, tenant: str | None = None) -> Any:
        if request.param == "asyncpg":
            s: Any = await cwstore.connect(dsn, max_size=2, migrate_schema=False, tenant=tenant)
        else:
            s = ThreadedStore(
                await asyncio.to_thread(
                    cwstore.connect_sync, dsn, max_size=2, migrate_schema=False, tenant=tenant
                )
            )
        opened.append(s)
        return s

    try:
        yield open_
    finally:
        for s in opened:
            await s.close()


def turn(text: str) -> GraphBuilder:
    b = GraphBuilder()
    b.system(f"contract {text}")
    b.goal(text)
    return b


def stored(admin: str, graph: str) -> tuple[str | None, int]:
    """(tenant, number of node rows) of a graph, read by the superuser."""
    with psycopg.connect(admin, autocommit=True) as c:
        row = c.execute(
            "SELECT g.tenant, (SELECT count(*) FROM cwstore.nodes n WHERE n.graph_id = g.graph_id)"
            " FROM cwstore.graphs g WHERE g.name = %s",
            (graph,),
        ).fetchone()
    return (None, 0) if row is None else (row[0], int(row[1]))


def graph_name() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


# --- tenants: reading and writing one's own ---------------------------------------------


async def test_a_writer_appends_and_imports_into_its_tenant(
    setup: Roles, open_store: Opener
) -> None:
    alice = await open_store(setup.alice)
    live, imported = graph_name(), graph_name()
    b = turn("alice")
    await alice.append(live, b.nodes)
    assert await alice.import_state(imported, b.state()) == 2
    assert stored(setup.admin, live) == ("acme", 2)
    assert stored(setup.admin, imported) == ("acme", 2)
    exported = await alice.export_json(imported)
    assert cwstore._jsontext.loads(exported) == b.state()
    names = {g.name: g.tenant for g in await alice.graphs()}
    assert names[live] == names[imported] == "acme"


async def test_a_large_import_by_a_writer_goes_through_in_slices(
    setup: Roles, open_store: Opener
) -> None:
    """More nodes than one import_rows_v1 slice: the slices land in one transaction."""
    alice = await open_store(setup.alice)
    b = turn("slices")
    for i in range(5200):
        b.inference(f"step {i}")
    g = graph_name()
    assert await alice.import_state(g, b.state()) == len(b.nodes)
    assert stored(setup.admin, g) == ("acme", len(b.nodes))
    assert list((await alice.replay(g)).frontier) == b.frontier


async def test_a_refused_import_by_a_writer_leaves_nothing(
    setup: Roles, open_store: Opener
) -> None:
    alice = await open_store(setup.alice)
    b = turn("broken")
    for i in range(6000):
        b.inference(f"step {i}")
    doc = b.state()
    doc["nodes"][5500]["parents"] = ["cw_" + "0" * 24]
    g = graph_name()
    with pytest.raises(cwstore.ValidationError) as err:
        await alice.import_state(g, doc)
    assert "missing_parent" in err.value.codes
    assert stored(setup.admin, g)[1] == 0


async def test_a_reader_of_the_tenant_reads_but_cannot_write(
    setup: Roles, open_store: Opener
) -> None:
    alice, carol = await open_store(setup.alice), await open_store(setup.carol)
    g = graph_name()
    b = turn("for carol")
    await alice.append(g, b.nodes)
    state = await carol.replay(g)
    assert [n.id for n in state.nodes] == [n["id"] for n in b.nodes]
    assert g in {x.name for x in await carol.graphs()}
    more = turn("carol writes")
    with pytest.raises(cwstore.PermissionDeniedError):
        await carol.append(g, more.nodes)
    with pytest.raises(cwstore.PermissionDeniedError):
        await carol.import_state(graph_name(), more.state())
    assert stored(setup.admin, g) == ("acme", 2)


async def test_a_reader_reads_what_the_owner_reads(setup: Roles, open_store: Opener) -> None:
    """The read functions run as their owner after one check: same answers for the
    tenant's reader, at every point."""
    admin, carol = await open_store(setup.admin, tenant="acme"), await open_store(setup.carol)
    g = graph_name()
    b = turn("same")
    for i in range(30):
        b.inference(f"step {i}")
        if i % 7 == 0:
            b.semantic("fact", f"k{i % 3}", f"value {i}")
    await admin.import_state(g, b.state())
    for as_of in (None, 1, 10, len(b.nodes) - 3):
        assert await carol.project(g, as_of) == await admin.project(g, as_of)
        assert await carol.export_json(g, as_of) == await admin.export_json(g, as_of)
    assert await carol.history(g, "semantic:fact:k0") == await admin.history(g, "semantic:fact:k0")


# --- isolation -----------------------------------------------------------------------------


async def test_another_tenant_sees_nothing_of_a_graph(setup: Roles, open_store: Opener) -> None:
    alice, bob = await open_store(setup.alice), await open_store(setup.bob)
    g = graph_name()
    await alice.append(g, turn("secret").nodes)
    assert g not in {x.name for x in await bob.graphs()}
    for read in (
        bob.replay(g),
        bob.export_json(g),
        bob.project(g),
        bob.length(g),
        bob.frontier(g),
        bob.history(g, "semantic:fact:x"),
    ):
        with pytest.raises(cwstore.UnknownGraphError):
            await read


async def test_another_tenant_cannot_write_a_graph(setup: Roles, open_store: Opener) -> None:
    alice, bob = await open_store(setup.alice), await open_store(setup.bob)
    g = graph_name()
    b = turn("mine")
    await alice.append(g, b.nodes)
    b.goal("bob was here")
    with pytest.raises(cwstore.PermissionDeniedError) as err:
        await bob.append(g, b.nodes[2:])
    assert err.value.graph == g
    assert err.value.role == setup.names["bob"]
    with pytest.raises(cwstore.PermissionDeniedError):
        await bob.import_state(g, turn("over it").state())
    assert stored(setup.admin, g) == ("acme", 2)


async def test_the_tenant_of_a_new_graph(setup: Roles, open_store: Opener) -> None:
    """From the store's tenant= option, else the role's only tenant; never one the role
    is not in."""
    bob = await open_store(setup.bob)
    g = graph_name()
    await bob.append(g, turn("bob").nodes)
    assert stored(setup.admin, g)[0] == "globex"
    chosen = await open_store(setup.bob, tenant="globex")
    g2 = graph_name()
    await chosen.append(g2, turn("bob 2").nodes)
    assert stored(setup.admin, g2)[0] == "globex"
    wrong = await open_store(setup.bob, tenant="acme")
    g3 = graph_name()
    with pytest.raises(cwstore.PermissionDeniedError):
        await wrong.append(g3, turn("bob 3").nodes)
    with pytest.raises(cwstore.PermissionDeniedError):
        await wrong.import_state(g3, turn("bob 4").state())
    assert stored(setup.admin, g3) == (None, 0)


async def test_the_owner_picks_any_tenant(setup: Roles, open_store: Opener) -> None:
    admin = await open_store(setup.admin, tenant="acme")
    g = graph_name()
    await admin.append(g, turn("owner").nodes)
    assert stored(setup.admin, g)[0] == "acme"
    plain = await open_store(setup.admin)
    g2 = graph_name()
    await plain.append(g2, turn("owner 2").nodes)
    assert stored(setup.admin, g2)[0] == "default"
    carol = await open_store(setup.carol)
    names = {x.name for x in await carol.graphs()}
    assert g in names
    assert g2 not in names


async def test_a_tenant_option_is_checked(setup: Roles) -> None:
    for bad in ("", "a\x00b"):
        with pytest.raises(cwstore.InputError):
            await cwstore.connect(setup.alice, migrate_schema=False, tenant=bad)
        with pytest.raises(cwstore.InputError):
            cwstore.connect_sync(setup.alice, migrate_schema=False, tenant=bad)


# --- the same rules for raw SQL ----------------------------------------------------------


async def test_raw_sql_of_a_writer_is_held_to_the_rules(setup: Roles) -> None:
    admin = await asyncpg.connect(setup.admin)
    bob = await asyncpg.connect(setup.bob)
    try:
        b = turn("raw")
        for i in range(40):  # past a block of counts, once derived
            b.inference(f"step {i}")
        g = graph_name()
        alice = await cwstore.connect(setup.alice, migrate_schema=False)
        try:
            await alice.append(g, b.nodes)
        finally:
            await alice.close()
        gid = await admin.fetchval("SELECT graph_id FROM cwstore.graphs WHERE name = $1", g)
        await admin.execute("SELECT cwstore.derive_v1($1)", g)

        assert await bob.fetchval("SELECT count(*) FROM cwstore.graphs WHERE name = $1", g) == 0
        assert (
            await bob.fetchval("SELECT count(*) FROM cwstore.nodes WHERE graph_id = $1", gid) == 0
        )
        for table in ("edges", "frontier_spans", "kind_counts"):
            query = f"SELECT count(*) FROM cwstore.{table} WHERE graph_id = $1"
            assert await admin.fetchval(query, gid) > 0, table
            assert await bob.fetchval(query, gid) == 0, table
        assert await bob.fetchval("SELECT count(*) FROM cwstore.node_view WHERE graph = $1", g) == 0

        refused = [
            "INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,"
            " created_at_text) VALUES (1, 99, 'cw_000000000000000000000000', 'goal', '{}',"
            " '{}', '2026-01-01T00:00:00Z')",
            "UPDATE cwstore.graphs SET tenant = 'globex'",
            "DELETE FROM cwstore.frontier_declarations",
            "TRUNCATE cwstore.kind_counts",
            "INSERT INTO cwstore.tenant_members (tenant, member) VALUES ('acme', current_user)",
            f"SELECT cwstore.ensure_graph_v1('{g}')",
            f"SELECT * FROM cwstore.append_v1('{g}', '[]')",
        ]
        for stmt in refused:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await bob.execute(stmt)
        for stmt in (
            # By graph id, another tenant's graph is one that does not exist (CW404), so
            # the refusal names nothing of it (tests/contract/test_sql_door.py).
            f"SELECT cwstore.declare_frontier_v1({gid}, '{{}}')",
            f"SELECT cwstore.import_rows_v1({gid}, '{{3}}', '{{cw_000000000000000000000000}}',"
            " '{goal}', '{\"{}\"}', '{\"{}\"}', '{2026-01-01T00:00:00Z}', '{NULL}')",
            f"SELECT cwstore.projection_v1('{g}')",
            f"SELECT * FROM cwstore.frontier_at('{g}', 1)",
            f"SELECT * FROM cwstore.ancestors('{g}', '{b.nodes[-1]['id']}')",
            f"SELECT * FROM cwstore.export_v1('{g}')",
        ):
            with pytest.raises(asyncpg.PostgresError) as unknown:
                await bob.execute(stmt)
            assert unknown.value.sqlstate == "CW404", stmt
        assert await bob.fetch(f"SELECT * FROM cwstore._frontier_at({gid}, 1)") == []
        assert stored(setup.admin, g) == ("acme", len(b.nodes))
        assert await admin.fetchval("SELECT count(*) FROM cwstore.tenant_members") == 3
    finally:
        await bob.close()
        await admin.close()


async def test_a_refused_writer_holds_no_lock(setup: Roles) -> None:
    """The tenant check comes before the counter row's lock: a refused call inside an
    open transaction must not stall the graph's own writers."""
    alice = await cwstore.connect(setup.alice, migrate_schema=False)
    bob = await asyncpg.connect(setup.bob)
    try:
        g = graph_name()
        b = turn("locks")
        await alice.append(g, b.nodes[:1])
        tx = bob.transaction()
        await tx.start()
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await bob.execute(f"SELECT * FROM cwstore.append_v1('{g}', '[]')")
        await asyncio.wait_for(alice.append(g, b.nodes[1:]), timeout=10)
        await tx.rollback()
        assert stored(setup.admin, g) == ("acme", 2)
    finally:
        await bob.close()
        await alice.close()


async def test_a_reader_can_only_read(setup: Roles) -> None:
    carol = await asyncpg.connect(setup.carol)
    try:
        for stmt in (
            "SELECT cwstore.ensure_graph_v1('carol')",
            "SELECT cwstore.begin_import_v1('carol')",
            "SELECT * FROM cwstore.append_v1('carol', '[]')",
            "INSERT INTO cwstore.graphs (name) VALUES ('carol')",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await carol.execute(stmt)
        assert await carol.fetchval("SELECT cwstore.sees_all(current_user)") is False
    finally:
        await carol.close()


# --- the grants themselves -------------------------------------------------------------


def test_the_write_api_is_exactly_the_definer_functions(setup: Roles) -> None:
    """A SECURITY DEFINER function runs as the owner: each one is a door past the table
    grants, so the set is pinned here and a new one must be added on purpose."""
    with psycopg.connect(setup.admin, autocommit=True) as c:
        rows = c.execute(
            "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',"
            " has_function_privilege('cwstore_reader', p.oid, 'EXECUTE'),"
            " has_function_privilege('cwstore_writer', p.oid, 'EXECUTE'),"
            " has_function_privilege('cwstore_admin', p.oid, 'EXECUTE'),"
            " array_to_string(p.proconfig, ',')"
            " FROM pg_proc p WHERE p.pronamespace = 'cwstore'::regnamespace AND p.prosecdef"
        ).fetchall()
    found = {_sig(r[0]): r for r in rows}
    assert set(found) == WRITE_API | READ_API | ERASE_API, sorted(found)
    for sig, (_, reader, writer, admin, config) in found.items():
        expected = (
            (False, True, True)
            if sig in WRITE_API
            else (False, False, True)
            if sig in ERASE_API
            else (True, True, True)
        )
        assert (reader, writer, admin) == expected, sig
        assert "search_path=pg_catalog, pg_temp" in config, sig


def _sig(identity: str) -> str:
    """``name(type,type)`` from pg_get_function_identity_arguments' ``name(p_x type, ...)``."""
    name, _, args = identity.partition("(")
    types = []
    for arg in args.rstrip(")").split(","):
        words = arg.split()
        if words:
            types.append("".join(words[1:] if words[0].startswith("p_") else words))
    return f"{name}({','.join(types)})"


def test_no_role_may_change_a_table(setup: Roles) -> None:
    with psycopg.connect(setup.admin, autocommit=True) as c:
        rows = c.execute(
            "SELECT c.relname, r.rolname, p.priv FROM pg_class c"
            " CROSS JOIN (VALUES ('cwstore_reader'), ('cwstore_writer'), ('cwstore_admin'),"
            " ('public')) r(rolname)"
            " CROSS JOIN (VALUES ('INSERT'), ('UPDATE'), ('DELETE'), ('TRUNCATE')) p(priv)"
            " WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind IN ('r', 'v')"
            "   AND r.rolname <> 'public'"
            "   AND has_table_privilege(r.rolname, c.oid, p.priv)"
        ).fetchall()
        assert rows == []
        unread = c.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'cwstore'::regnamespace"
            " AND c.relkind IN ('r', 'v')"
            " AND NOT has_table_privilege('cwstore_reader', c.oid, 'SELECT')"
        ).fetchall()
        assert unread == [("erasures",)]  # the audit record: admins only
        assert c.execute(
            "SELECT has_table_privilege('cwstore_admin', 'cwstore.erasures', 'SELECT')"
        ).fetchone() == (True,)
        public_exec = c.execute(
            "SELECT p.proname FROM pg_proc p, aclexplode(coalesce(p.proacl,"
            " acldefault('f', p.proowner))) a WHERE p.pronamespace = 'cwstore'::regnamespace"
            " AND a.grantee = 0 AND a.privilege_type = 'EXECUTE'"
        ).fetchall()
        assert public_exec == []


def test_a_later_migration_gets_the_grants(setup: Roles) -> None:
    files = migrations()
    extra = [
        *files,
        Migration.from_text(
            len(files) + 1,
            "later_read",
            "CREATE FUNCTION cwstore.later_read() RETURNS int LANGUAGE sql AS 'SELECT 1';",
        ),
    ]
    with psycopg.connect(setup.admin, autocommit=True) as c:
        try:
            assert migrate.apply_migrations_sync(PsycopgConnection(c), extra) == [len(files) + 1]
            reader, public = c.execute(
                "SELECT has_function_privilege('cwstore_reader', 'cwstore.later_read()',"
                " 'EXECUTE'), EXISTS (SELECT 1 FROM pg_proc p, aclexplode(coalesce(p.proacl,"
                " acldefault('f', p.proowner))) a"
                " WHERE p.oid = 'cwstore.later_read()'::regprocedure"
                " AND a.grantee = 0)"
            ).fetchone() or (None, None)
            assert reader is True
            assert public is False
        finally:
            c.execute("DROP FUNCTION IF EXISTS cwstore.later_read()")
            c.execute("DELETE FROM cwstore.schema_migrations WHERE version = %s", (len(files) + 1,))


# --- the CLI ------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cwstore", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_init_roles_and_tenants(setup: Roles) -> None:
    done = _cli(
        "init", "--roles", "--tenant", f"initech={setup.names['carol']}", "--dsn", setup.admin
    )
    assert done.returncode == 0, done.stderr
    assert "cwstore_reader" in done.stderr
    with psycopg.connect(setup.admin, autocommit=True) as c:
        tenants = c.execute(
            "SELECT cwstore.tenants_of(%s) ORDER BY 1", (setup.names["carol"],)
        ).fetchall()
        assert [t[0] for t in tenants] == ["acme", "initech"]
        c.execute("SELECT cwstore.remove_tenant_member('initech', %s)", (setup.names["carol"],))


@pytest.mark.parametrize(
    ("spec", "wrong"),
    [("acme", "TENANT=ROLE"), ("=alice", "TENANT=ROLE"), ("acme=", "TENANT=ROLE")],
)
def test_cli_init_refuses_a_bad_tenant_spec(setup: Roles, spec: str, wrong: str) -> None:
    done = _cli("init", "--tenant", spec, "--dsn", setup.admin)
    assert done.returncode != 0
    assert wrong in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_init_refuses_an_unknown_role(setup: Roles) -> None:
    done = _cli("init", "--tenant", f"acme=nobody_{uuid.uuid4().hex[:6]}", "--dsn", setup.admin)
    assert done.returncode != 0
    assert "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
