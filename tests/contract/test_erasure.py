"""Erasure and retention (docs/erasure.md), driven through the SQL functions themselves.

What the issue's "Done when" asks, checked on a real PostgreSQL:

1. After ``cwstore.erase_graph_v1`` no row carrying the graph's ``graph_id`` is left in
   any table of schema ``cwstore`` that has a ``graph_id`` column (the tables are read
   from the catalog, so a table added later is swept too), except its one audit record
   in ``cwstore.erasures``; nothing of its name, content or node ids is left anywhere;
   every other graph exports byte for byte as before.
2. Who may erase, with real login roles: an admin of the graph's tenant may; readers and
   writers get 42501; another tenant's graph answers exactly as a read of it does
   (CW404); the audit table is unreadable to readers and writers and shows an admin its
   tenants' rows only; a plain DELETE, UPDATE or TRUNCATE of history is refused.
3. Under eight live writers and a polling reader: no partial graph is ever read, every
   writer ends with success-before or CW404 ``{"erased": true}``, no backend is left
   stuck, and the name starts again from sequence 1 with nothing of the old life.
4. Retention: ``idle_graphs_v1`` lists and erases nothing; ``erase_idle_v1`` erases
   exactly the idle graphs, at most ``p_batch`` per call, within the tenant asked for.
5. Two names whose probe-0 keys collide (``tests/vectors/graph_key_collision.json``)
   both work, before and after either is erased.
6. ``tail_all_v2`` delivers the erasure event after the erased life's nodes and before
   the next life's.

The Python client's erase methods are not used: erasure is called as SQL (psycopg or
asyncpg), and graphs are written and read through the stores or the SQL API. Tests
that need a database of their own (retention, collisions: fixed names, "every idle
graph") get one cloned from the session's template (``own_db``).

Some tests check the checks: a deliberately broken erasure (rows deleted with the
triggers off, ``session_replication_role = replica``, which needs a superuser) must be
caught by the same helpers the real tests rely on.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import sql
from support import GRAPH_TABLES
from support.documents import GraphBuilder
from support.graph_keys import COLLIDING, COLLISION
from support.nodes import node
from support.stores import dsn_as

import cwstore
from cwstore import _jsontext, roles
from cwstore.drivers.psycopg import PsycopgConnection

ON_CITUS = bool(os.environ.get("CWSTORE_TEST_CITUS_DSN"))
"""The contract suite runs on a Citus cluster too (tests/conftest.py)."""
OWN_DB_WITH_ROLES = pytest.mark.skipif(
    ON_CITUS,
    reason="own_db is a plain database on the machine's server, the roles live on the cluster",
)


MAX_SEQ = 2**63 - 1
"""The seq of an erasure event in the all-graphs feed."""

ERASE = "SELECT cwstore.erase_graph_v1(%s, %s)"
VECTOR = COLLISION


# --- helpers: nodes, connections, refusals -------------------------------------------------


def new_graph(prefix: str = "er") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def append_sql(conn: psycopg.Connection[Any], graph: str, nodes: list[dict[str, Any]]) -> list[int]:
    """append_v1 through SQL; the sequences of the nodes, in order."""
    rows = conn.execute(
        "SELECT seq FROM cwstore.append_v1(%s, %s::json)", (graph, _jsontext.dumps(nodes))
    ).fetchall()
    return [int(r[0]) for r in rows]


def two_nodes(graph: str) -> list[dict[str, Any]]:
    """A system node and a goal under it, with content of this graph's own."""
    first = node("system", f"system of {graph}")
    return [first, node("goal", {"text": f"goal of {graph}"}, [first["id"]])]


@dataclass(frozen=True)
class Refusal:
    """What a refused statement answered: everything a caller can see of the error."""

    sqlstate: str | None
    message: str | None
    detail: str | None
    context: str | None

    def detail_json(self) -> Any:
        return json.loads(self.detail) if self.detail else None


def refusal(dsn: str, statement: str, params: Sequence[Any] = ()) -> Refusal:
    """Run ``statement`` as the DSN's role in a transaction rolled back afterwards; the
    error it raised. Fails the test when it was not refused."""
    with psycopg.connect(dsn) as c:
        try:
            c.execute(statement.encode(), params)
        except psycopg.Error as exc:
            d = exc.diag
            return Refusal(exc.sqlstate, d.message_primary, d.message_detail, d.context)
        finally:
            c.rollback()
    pytest.fail(f"not refused: {statement} {params!r}")


def one(conn: psycopg.Connection[Any], query: str, params: Sequence[Any] = ()) -> Any:
    row = conn.execute(query.encode(), params).fetchone()
    assert row is not None, query
    return row[0]


def graph_key(conn: psycopg.Connection[Any], name: str) -> int:
    """The graph_id of the graph of this name, read from cwstore.graphs; for a name no
    graph has, cwstore.graph_key(name) (its probe-0 key)."""
    row = conn.execute("SELECT graph_id FROM cwstore.graphs WHERE name = %s", (name,)).fetchone()
    if row is not None:
        return int(row[0])
    return int(one(conn, "SELECT cwstore.graph_key(%s)", (name,)))


# --- helpers: what the catalog says is keyed by graph ---------------------------------------


def graph_id_tables(conn: psycopg.Connection[Any]) -> list[str]:
    """Every table of schema cwstore with a column graph_id, from the catalog."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_attribute a"
        " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind IN ('r', 'p', 'm')"
        "   AND NOT c.relispartition AND a.attname = 'graph_id' AND a.attnum > 0"
        "   AND NOT a.attisdropped ORDER BY c.relname"
    ).fetchall()
    return [str(r[0]) for r in rows]


def all_tables(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c"
        " WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind IN ('r', 'p', 'm')"
        "   AND NOT c.relispartition ORDER BY c.relname"
    ).fetchall()
    return [str(r[0]) for r in rows]


def rows_of(conn: psycopg.Connection[Any], graph_id: int) -> dict[str, int]:
    """Rows with this graph_id in every table keyed by graph (read as the superuser)."""
    return {
        t: int(
            one(
                conn,
                sql.SQL("SELECT count(*) FROM cwstore.{} WHERE graph_id = %s")
                .format(sql.Identifier(t))
                .as_string(conn),
                (graph_id,),
            )
        )
        for t in graph_id_tables(conn)
    }


def leftovers(conn: psycopg.Connection[Any], graph_id: int) -> dict[str, int]:
    """Tables still holding rows of an erased graph, the audit table excepted."""
    return {t: n for t, n in rows_of(conn, graph_id).items() if n and t != "erasures"}


def mentions(conn: psycopg.Connection[Any], needles: Sequence[str]) -> list[tuple[str, str]]:
    """(table, needle) for each needle found in the text of any row of any cwstore table."""
    found: list[tuple[str, str]] = []
    for t in all_tables(conn):
        for needle in needles:  # one plain scan each: Citus pushes it to every shard
            row = conn.execute(
                sql.SQL(
                    "SELECT EXISTS (SELECT 1 FROM cwstore.{} x WHERE strpos(x::text, %s) > 0)"
                ).format(sql.Identifier(t)),
                (needle,),
            ).fetchone()
            if row is not None and row[0]:
                found.append((t, needle))
    return found


def only_ids_of(conn: psycopg.Connection[Any], graph_id: int) -> list[str]:
    """Node ids of this graph that no other graph holds."""
    rows = conn.execute(
        "SELECT id FROM cwstore.nodes WHERE graph_id = %s"
        " EXCEPT SELECT id FROM cwstore.nodes WHERE graph_id <> %s",
        (graph_id, graph_id),
    ).fetchall()
    return [str(r[0]) for r in rows]


def audit_rows(conn: psycopg.Connection[Any], graph_id: int) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT to_jsonb(e) FROM cwstore.erasures e WHERE graph_id = %s ORDER BY erasure_id",
        (graph_id,),
    )
    return [dict(r[0]) for r in cur.fetchall()]


# --- helpers: a reader's consistency check --------------------------------------------------

READ_GRAPH = """
SELECT g.length,
       (SELECT count(*) FROM cwstore.nodes n WHERE n.graph_id = $1),
       (SELECT coalesce(max(n.seq), 0) FROM cwstore.nodes n WHERE n.graph_id = $1),
       (SELECT count(*) FROM cwstore.edges e WHERE e.graph_id = $1)
  FROM (SELECT 1) one LEFT JOIN cwstore.graphs g ON g.graph_id = $1
"""
"""One statement, one snapshot: the graph's length and what its tables hold."""


def whole_or_none(row: Sequence[Any], edges_per_node: int = 1) -> bool:
    """Whether a READ_GRAPH row shows a whole graph (nodes 1..length,
    ``edges_per_node`` parents for each node after the first) or none."""
    length, count, top, edges = row
    if length is None:
        return (count, top, edges) == (0, 0, 0)
    return bool(count == top == length and edges == edges_per_node * max(length - 1, 0))


# --- fixtures ------------------------------------------------------------------------------


@dataclass
class Roles:
    owner: str
    admin_a: str
    admin_b: str
    writer_a: str
    writer_b: str
    reader_a: str
    names: dict[str, str]


_ROLES = (
    ("admin_a", "cwstore_admin", "acme"),
    ("admin_b", "cwstore_admin", "globex"),
    ("writer_a", "cwstore_writer", "acme"),
    ("writer_b", "cwstore_writer", "globex"),
    ("reader_a", "cwstore_reader", "acme"),
)


def _members(dsn: str, names: dict[str, str]) -> None:
    """``cwstore init --roles`` and the tenants of the test roles, in one database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))
        for who, _, tenant in _ROLES:
            roles.add_tenant_member_sync(PsycopgConnection(conn), tenant, names[who])


@pytest.fixture(scope="module")
def setup(db_dsn: str) -> Iterator[Roles]:
    """Login roles made for this module: an admin, a writer and a reader of tenant acme,
    an admin and a writer of globex."""
    tag = uuid.uuid4().hex[:8]
    names = {who: f"cw_{tag}_{who}" for who, _, _ in _ROLES}
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))
        for who, group, _ in _ROLES:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                    sql.Identifier(names[who]), sql.Identifier(group)
                )
            )
    _members(db_dsn, names)
    try:
        yield Roles(db_dsn, **{w: dsn_as(db_dsn, names[w]) for w, _, _ in _ROLES}, names=names)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (name,),
                )
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def own_db(pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    """A migrated database of this test's own (a clone of the session's template)."""
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    params = psycopg.conninfo.conninfo_to_dict(pg_admin_dsn)
    params["dbname"] = name
    dsn = psycopg.conninfo.make_conninfo("", **params)
    try:
        yield dsn
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _as(dsn: str, role_dsn: str) -> str:
    """``dsn`` (any form) logging in as the user of ``role_dsn`` (a URL)."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = psycopg.conninfo.conninfo_to_dict(role_dsn)["user"]
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo("", **params)


# --- 1. nothing left but the audit record ---------------------------------------------------


def rich_session(token: str) -> tuple[GraphBuilder, int]:
    """A graph of every kind, with resource keys and semantic memory in two versions
    each; every payload carries ``token``. Returns the builder and how many of its nodes
    the first part (to import) holds; the rest is to be appended with a frontier."""
    b = GraphBuilder()
    b.system(f"erasure test agent {token}")
    b.goal(f"write the report {token}")
    call = b.tool_call("write_file", {"file_path": "report.md", "content": token})
    res = b.tool_result("write_file", {"ok": True, "token": token}, parents=[call["id"]])
    b.resource("report.md", {"content": f"v1 {token}"}, parents=[res["id"]])
    b.semantic("memory", "report.owner", f"ada {token}")
    b.verification("post_mutation_read", path="report.md", token=token)
    inf = b.inference(f"planning prose {token}")
    b.protocol_error(f"not an action {token}", parents=[inf["id"]])
    first = len(b)
    b.resource("report.md", {"content": f"v2 {token}"})
    b.semantic("memory", "report.owner", f"grace {token}")
    b.semantic("preference", "style", f"terse {token}")
    b.answer(f"done {token}")
    return b, first


async def write_rich(store: Any, graph: str, token: str) -> GraphBuilder:
    b, first = rich_session(token)
    while len(b) <= 32:  # a block of counts by kind (cwstore.count_block()), once derived
        b.inference(f"{token} pad {len(b)}")
    part = b.state()
    part["nodes"] = part["nodes"][:first]
    part["frontier"] = cwstore.fold_frontier(part["nodes"])
    assert await store.import_state(graph, part) == first
    await store.append(graph, b.nodes[first:], frontier=b.frontier)
    return b


async def test_an_erased_graph_leaves_only_its_audit_record(store: Any, db_dsn: str) -> None:
    target, others = new_graph("target"), [new_graph("other") for _ in range(3)]
    token = f"secret-{uuid.uuid4().hex}"
    built = await write_rich(store, target, token)
    for i, other in enumerate(others):
        await write_rich(store, other, f"other-{i}-{uuid.uuid4().hex}")

    with psycopg.connect(db_dsn, autocommit=True) as c:
        # The frontier's history of so short a graph trails it (cwstore.derive_lag()):
        # written now, so that the sweep below finds rows of it too.
        for name in (target, *others):
            one(c, "SELECT cwstore.derive_v1(%s)", (name,))
        tables = graph_id_tables(c)
        assert set(GRAPH_TABLES) <= set(tables), tables
        assert "erasures" in tables
        gid, tenant, length, incarnation = c.execute(
            "SELECT graph_id, tenant, length, incarnation FROM cwstore.graphs WHERE name = %s",
            (target,),
        ).fetchone() or pytest.fail("no graph")
        assert length == len(built)
        before = rows_of(c, gid)
        # Every table of graph rows holds some of this graph's: the sweep below means
        # something for each of them.
        empty = {t for t, n in before.items() if n == 0} - {"erasures", "graph_key_detours"}
        assert empty == set(), empty
        assert before["erasures"] == 0
        secret_ids = only_ids_of(c, gid)
        assert len(secret_ids) == len(built)
        others_rows = {o: rows_of(c, graph_key(c, o)) for o in others}
    others_json = {o: await store.export_json(o) for o in others}

    reason = "asked to be forgotten"
    with psycopg.connect(db_dsn, autocommit=True) as c:
        me = one(c, "SELECT session_user")
        assert one(c, ERASE, (target, reason)) == len(built)
        assert leftovers(c, gid) == {}
        audit = audit_rows(c, gid)
        assert len(audit) == 1, audit
        (record,) = audit
        assert record["nodes"] == len(built)
        assert record["tenant"] == tenant
        assert record["erased_by"] == me
        assert record["reason"] == reason
        assert record["incarnation"] == incarnation
        assert record["xid"] is not None and record["erased_at"] is not None
        assert target not in json.dumps(record)
        # Nothing of the graph anywhere: its name, its content, its node ids.
        assert mentions(c, [target, token, *secret_ids]) == []
        # The other graphs keep every row.
        assert {o: rows_of(c, graph_key(c, o)) for o in others} == others_rows

    for o in others:
        assert await store.export_json(o) == others_json[o]
    with pytest.raises(cwstore.UnknownGraphError):
        await store.export_json(target)
    with pytest.raises(cwstore.UnknownGraphError):
        await store.length(target)


def test_an_empty_graph_is_erased_too(db_dsn: str) -> None:
    g = new_graph("empty")
    with psycopg.connect(db_dsn, autocommit=True) as c:
        gid = int(one(c, "SELECT cwstore.ensure_graph_v1(%s)", (g,)))
        assert one(c, ERASE, (g, None)) == 0
        assert leftovers(c, gid) == {}
        (record,) = audit_rows(c, gid)
        assert (record["nodes"], record["reason"]) == (0, None)
        assert mentions(c, [g]) == []


def test_erasing_an_unknown_graph_is_cw404(db_dsn: str) -> None:
    g = new_graph("never")
    err = refusal(db_dsn, ERASE, (g, None))
    assert err.sqlstate == "CW404"
    assert err.detail_json() == {"graph": g}
    read = refusal(db_dsn, "SELECT cwstore.projection_v1(%s)", (g,))
    assert (err.sqlstate, err.message, err.detail) == (read.sqlstate, read.message, read.detail)


def test_the_sweep_finds_what_a_broken_erasure_leaves(own_db: str) -> None:
    """The checks of test 1 fail for an erasure that forgets a table: rows deleted with
    the triggers off (a superuser's replica mode), edges left behind."""
    g = new_graph("broken")
    with psycopg.connect(own_db, autocommit=True) as c:
        append_sql(c, g, two_nodes(g))
        gid = graph_key(c, g)
        ids = only_ids_of(c, gid)
        c.execute("SET session_replication_role = replica")
        for t in graph_id_tables(c):
            if t not in ("edges", "erasures"):
                c.execute(
                    sql.SQL("DELETE FROM cwstore.{} WHERE graph_id = %s").format(sql.Identifier(t)),
                    (gid,),
                )
        c.execute("SET session_replication_role = DEFAULT")
        assert leftovers(c, gid) == {"edges": 1}
        assert mentions(c, [g, *ids]) == []  # edges hold neither name nor ids

        # A table added later, keyed by graph, is found by the sweep without being named.
        c.execute("CREATE TABLE cwstore.later_rows (graph_id bigint NOT NULL, note text)")
        c.execute("INSERT INTO cwstore.later_rows VALUES (%s, %s)", (gid, f"of {g}"))
        assert "later_rows" in graph_id_tables(c)
        assert leftovers(c, gid) == {"edges": 1, "later_rows": 1}
        assert ("later_rows", g) in mentions(c, [g])


# --- 2. who may erase ----------------------------------------------------------------------


def test_who_may_erase_a_graph(setup: Roles) -> None:
    a_graph, b_graph = new_graph("acme"), new_graph("globex")
    with psycopg.connect(setup.writer_a, autocommit=True) as w:
        append_sql(w, a_graph, two_nodes(a_graph))
    with psycopg.connect(setup.writer_b, autocommit=True) as w:
        append_sql(w, b_graph, two_nodes(b_graph))

    with psycopg.connect(setup.owner, autocommit=True) as c:
        assert one(c, "SELECT tenant FROM cwstore.graphs WHERE name = %s", (a_graph,)) == "acme"
        assert one(c, "SELECT tenant FROM cwstore.graphs WHERE name = %s", (b_graph,)) == "globex"
        a_id, b_id = graph_key(c, a_graph), graph_key(c, b_graph)

    # A reader and a writer of acme may read the graph, not erase it.
    for who in (setup.reader_a, setup.writer_a):
        with psycopg.connect(who, autocommit=True) as c:
            assert one(c, "SELECT cwstore.projection_v1(%s) IS NOT NULL", (a_graph,)) is True
        err = refusal(who, ERASE, (a_graph, "not mine to erase"))
        assert err.sqlstate == "42501", err
    # Not only the grants: a writer given EXECUTE on the function by mistake is still
    # refused by the function's own check.
    with psycopg.connect(setup.owner, autocommit=True) as c:
        grant = sql.SQL("{} EXECUTE ON FUNCTION cwstore.erase_graph_v1(text, text) {} {}")
        writer = sql.Identifier(setup.names["writer_a"])
        c.execute(grant.format(sql.SQL("GRANT"), sql.SQL("TO"), writer))
        try:
            err = refusal(setup.writer_a, ERASE, (a_graph, "granted by mistake"))
        finally:
            c.execute(grant.format(sql.SQL("REVOKE"), sql.SQL("FROM"), writer))
        assert err.sqlstate == "42501", err
        assert err.detail_json() == {"graph": a_graph, "role": setup.names["writer_a"]}
    # A writer of acme asking for globex's graph learns nothing more than for no graph.
    for who in (setup.reader_a, setup.writer_a):
        theirs = refusal(who, ERASE, (b_graph, None))
        nobody = refusal(who, ERASE, (new_graph("nobody"), None))
        assert theirs.sqlstate == nobody.sqlstate, (theirs, nobody)

    # The admin of acme, globex's graph: exactly the CW404 a read gives, to it or to a
    # reader of acme.
    as_erase = refusal(setup.admin_a, ERASE, (b_graph, None))
    as_read = refusal(setup.admin_a, "SELECT cwstore.projection_v1(%s)", (b_graph,))
    by_reader = refusal(setup.reader_a, "SELECT cwstore.projection_v1(%s)", (b_graph,))
    assert as_erase.sqlstate == "CW404"
    assert as_erase.detail_json() == {"graph": b_graph}
    assert (as_erase.message, as_erase.detail) == (as_read.message, as_read.detail)
    assert (as_read.message, as_read.detail) == (by_reader.message, by_reader.detail)

    with psycopg.connect(setup.owner, autocommit=True) as c:
        assert rows_of(c, a_id)["nodes"] == 2
        assert rows_of(c, b_id)["nodes"] == 2
        assert audit_rows(c, a_id) == audit_rows(c, b_id) == []

    # The admin of acme erases acme's graph.
    with psycopg.connect(setup.admin_a, autocommit=True) as c:
        assert one(c, ERASE, (a_graph, "admin's erasure")) == 2
    with psycopg.connect(setup.owner, autocommit=True) as c:
        assert leftovers(c, a_id) == {}
        (record,) = audit_rows(c, a_id)
        assert (record["erased_by"], record["tenant"], record["nodes"]) == (
            setup.names["admin_a"],
            "acme",
            2,
        )
        assert record["reason"] == "admin's erasure"
        # Then globex's graph goes too; the admin of acme asking for it again gets the
        # very same answer as when it existed, context included.
        assert one(c, ERASE, (b_graph, None)) == 2
    gone = refusal(setup.admin_a, ERASE, (b_graph, None))
    assert gone == as_erase


def test_the_audit_table_is_for_admins_of_its_tenants(setup: Roles) -> None:
    graphs = {"acme": new_graph("acme"), "globex": new_graph("globex")}
    with psycopg.connect(setup.owner, autocommit=True) as c:
        ids = {}
        for tenant, g in graphs.items():
            c.execute("SELECT set_config('cwstore.tenant', %s, false)", (tenant,))
            append_sql(c, g, two_nodes(g))
            ids[tenant] = graph_key(c, g)
            assert one(c, ERASE, (g, f"audit {tenant}")) == 2
        everything = {int(r[0]) for r in c.execute("SELECT graph_id FROM cwstore.erasures")}
        assert set(ids.values()) <= everything

    for who in (setup.reader_a, setup.writer_a, setup.writer_b):
        err = refusal(who, "SELECT count(*) FROM cwstore.erasures")
        assert err.sqlstate == "42501", err
    for who, tenant in ((setup.admin_a, "acme"), (setup.admin_b, "globex")):
        with psycopg.connect(who, autocommit=True) as c:
            seen = c.execute("SELECT graph_id, tenant FROM cwstore.erasures").fetchall()
        assert {t for _, t in seen} == {tenant}, seen
        assert ids[tenant] in {int(g) for g, _ in seen}


def test_an_admin_cannot_erase_another_tenant(setup: Roles) -> None:
    g = new_graph("globex")
    with psycopg.connect(setup.writer_b, autocommit=True) as w:
        append_sql(w, g, two_nodes(g))
    with psycopg.connect(setup.admin_a, autocommit=True) as c:
        for stmt in (
            "SELECT * FROM cwstore.erase_tenant_v1('globex', 'not mine')",
            "SELECT * FROM cwstore.erase_idle_v1('0 seconds', 'globex', 'not mine')",
        ):
            try:
                rows = c.execute(stmt).fetchall()
            except psycopg.Error as exc:
                assert exc.sqlstate in ("42501", "CW404"), exc
            else:
                assert rows == [], stmt
        idle = c.execute("SELECT graph FROM cwstore.idle_graphs_v1('0 seconds')").fetchall()
        assert g not in {r[0] for r in idle}
    with psycopg.connect(setup.owner, autocommit=True) as c:
        assert rows_of(c, graph_key(c, g))["nodes"] == 2
        assert one(c, "SELECT count(*) FROM cwstore.tenant_members WHERE tenant = 'globex'") == 2


def _change_statements(table: str) -> list[str]:
    t = f"cwstore.{table}"
    setter = {
        "graphs": "length = length + 1",
        "erasures": "reason = 'rewritten'",
    }.get(table, "graph_id = graph_id")
    return [f"DELETE FROM {t}", f"UPDATE {t} SET {setter}", f"TRUNCATE {t}"]


def _refused_as(dsn: str, statement: str) -> str | None:
    """The SQLSTATE a statement was refused with, or None when it went through (it is
    rolled back either way)."""
    with psycopg.connect(dsn) as c:
        try:
            c.execute(statement.encode())
        except psycopg.Error as exc:
            return exc.sqlstate
        finally:
            c.rollback()
    return None


def test_history_stays_append_only_for_every_role(setup: Roles) -> None:
    """A plain DELETE, UPDATE or TRUNCATE of any table keyed by graph (the catalog's
    list, the audit table included) is refused: CW403 for the owner, CW403 or 42501
    for the others. Every table holds rows, so a statement that went through would
    have changed something (each is rolled back)."""
    g = new_graph("kept")
    erased = new_graph("erased")
    with psycopg.connect(setup.owner, autocommit=True) as c:
        append_sql(c, g, two_nodes(g))
        one(c, "SELECT cwstore.derive_v1(%s)", (g,))  # frontier_spans gets rows
        append_sql(c, erased, two_nodes(erased))
        one(c, ERASE, (erased, None))
        for name in COLLIDING:  # the second takes a detour: graph_key_detours gets a row
            append_sql(c, name, two_nodes(name))  # (idempotent: run twice, writes once)
        tables = graph_id_tables(c)
        counts = {t: int(one(c, f"SELECT count(*) FROM cwstore.{t}")) for t in tables}
    assert "erasures" in tables and "graph_key_detours" in tables
    assert [t for t, n in counts.items() if n == 0] == []
    went_through = []
    for who in (setup.owner, setup.admin_a, setup.writer_a, setup.reader_a):
        allowed = ("CW403",) if who == setup.owner else ("CW403", "42501")
        for table in tables:
            for stmt in _change_statements(table):
                state = _refused_as(who, stmt)
                if state not in allowed:
                    went_through.append(
                        (psycopg.conninfo.conninfo_to_dict(who).get("user"), stmt, state)
                    )
    assert went_through == []
    with psycopg.connect(setup.owner, autocommit=True) as c:
        assert {t: int(one(c, f"SELECT count(*) FROM cwstore.{t}")) for t in tables} == counts


# --- 3. under live writers -----------------------------------------------------------------


APPEND_ASYNC = "SELECT seq FROM cwstore.append_v1($1, $2::json)"


async def test_erasure_under_live_writers(setup: Roles) -> None:
    """Eight writers append to one graph in a loop, a reader polls it; the admin erases
    it. Every node a writer was told is written is counted by the erasure, and no read
    ever shows part of the graph."""
    g = new_graph("live")
    seed = node("system", f"seed of {g}")
    writers = [await asyncpg.connect(setup.writer_a) for _ in range(8)]
    reader = await asyncpg.connect(setup.owner)
    eraser = await asyncpg.connect(setup.admin_a)
    try:
        await writers[0].fetch(APPEND_ASYNC, g, _jsontext.dumps([seed]))
        gid = int(await reader.fetchval("SELECT graph_id FROM cwstore.graphs WHERE name = $1", g))
        incarnation = await reader.fetchval(
            "SELECT incarnation FROM cwstore.graphs WHERE graph_id = $1", gid
        )
        written = [0] * len(writers)
        endings: list[tuple[str | None, Any, str]] = [(None, None, "")] * len(writers)
        stop = asyncio.Event()
        observed: list[tuple[Any, ...]] = []

        async def write(i: int, conn: asyncpg.Connection) -> None:
            for k in range(100_000):
                # Every node hangs under the seed: a call that starts after the erasure
                # finds no graph and, as its parent is gone, creates none.
                batch = [
                    node("inference", {"w": i, "k": k, "j": j}, [seed["id"]]) for j in range(3)
                ]
                try:
                    rows = await conn.fetch(APPEND_ASYNC, g, _jsontext.dumps(batch))
                except asyncpg.PostgresError as exc:
                    detail = json.loads(exc.detail) if exc.detail else None
                    endings[i] = (exc.sqlstate, detail, str(exc))
                    return
                assert [r[0] for r in rows] == sorted(r[0] for r in rows)
                written[i] += len(rows)
            pytest.fail("the writer never saw the erasure")

        async def read() -> None:
            while not stop.is_set():
                row = await reader.fetchrow(READ_GRAPH, gid)
                assert row is not None
                observed.append(tuple(row))
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(write(i, c)) for i, c in enumerate(writers)]
        watch = asyncio.create_task(read())
        deadline = time.monotonic() + 30
        while sum(written) < 300:
            assert time.monotonic() < deadline, "the writers did not get going"
            await asyncio.sleep(0.05)
        erased = await asyncio.wait_for(
            eraser.fetchval("SELECT cwstore.erase_graph_v1($1, 'live')", g), 60
        )
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await asyncio.sleep(0.2)
        stop.set()
        await watch

        # What the writers were told was written is what the erasure counted.
        assert erased == 1 + sum(written)
        for state, detail, text in endings:
            if state == "CW404":
                assert detail == {"graph": g, "erased": True}, text
            else:
                assert state == "CW400" and "missing_parent" in text, text
        # (That some writer was waiting when the erasure committed, and so got CW404, is
        # likely here but not certain: test_a_writer_blocked_behind_an_erasure_gets_cw404
        # makes it so.)

        bad = [row for row in observed if not whole_or_none(row)]
        assert bad == [], bad[:5]
        assert any(row[0] is not None and row[0] > 1 for row in observed)
        assert observed[-1] == (None, 0, 0, 0)

        # No backend stuck: nobody waits for a lock, nobody sits in a transaction.
        stuck = await reader.fetch(
            "SELECT pid, usename, state, wait_event_type, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            "   AND (wait_event_type = 'Lock' OR state LIKE 'idle in transaction%')"
        )
        assert stuck == []
        assert (
            await reader.fetchval(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE NOT l.granted AND a.datname = current_database()"
            )
            == 0
        )
        async with reader.transaction():
            (record,) = await reader.fetch(
                "SELECT nodes, incarnation, erased_by FROM cwstore.erasures WHERE graph_id = $1",
                gid,
            )
        assert (record["nodes"], record["incarnation"]) == (erased, incarnation)
        assert record["erased_by"] == setup.names["admin_a"]

        # The name again: a new life, from sequence 1, with nothing of the old.
        fresh = node("system", f"second life of {g}")
        assert [
            r[0] for r in await writers[0].fetch(APPEND_ASYNC, g, _jsontext.dumps([fresh]))
        ] == [1]
        row = await reader.fetchrow(
            "SELECT graph_id, length, incarnation FROM cwstore.graphs WHERE name = $1", g
        )
        assert row is not None and row["length"] == 1
        assert row["incarnation"] != incarnation
    finally:
        for conn in [*writers, reader, eraser]:
            await conn.close()
    with psycopg.connect(setup.owner, autocommit=True) as c:
        new_id = int(row["graph_id"])
        counts = rows_of(c, new_id)
        assert counts["nodes"] == 1
        assert counts["kind_counts"] == 0  # behind the watermark
        assert counts["edges"] == counts["key_versions"] == counts["key_heads"] == 0
        assert counts["erasures"] == (1 if new_id == gid else 0)
        assert one(c, "SELECT array_agg(id) FROM cwstore.nodes WHERE graph_id = %s", (new_id,)) == [
            fresh["id"]
        ]
        assert mentions(c, [seed["id"], f"seed of {g}"]) == []


def _gpid(conn: psycopg.Connection[Any]) -> int | None:
    """The session's global pid on Citus (its waits happen on the workers), else None."""
    if not ON_CITUS:
        return None
    return int(one(conn, "SELECT citus_backend_gpid()"))


def _waiting(conn: psycopg.Connection[Any], pid: int, gpid: int | None) -> bool:
    """Whether the session waits for a lock: in pg_stat_activity on one server, in
    citus_lock_waits (by its global pid) on Citus."""
    if gpid is not None:
        return bool(
            one(conn, "SELECT count(*) > 0 FROM citus_lock_waits WHERE waiting_gpid = %s", (gpid,))
        )
    return bool(
        one(
            conn,
            "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = %s",
            (pid,),
        )
    )


def _until(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_writer_blocked_behind_an_erasure_gets_cw404_erased(setup: Roles) -> None:
    g = new_graph("blocked")
    first = two_nodes(g)
    with psycopg.connect(setup.writer_a, autocommit=True) as w:
        append_sql(w, g, first)
    eraser = psycopg.connect(setup.admin_a)  # a transaction left open on purpose
    writer = psycopg.connect(setup.writer_a, autocommit=True)
    watcher = psycopg.connect(setup.owner, autocommit=True)
    outcome: list[Any] = []
    try:
        assert one(eraser, ERASE, (g, "blocking")) == 2
        pid, gpid = writer.info.backend_pid, _gpid(writer)

        def append() -> None:
            try:
                outcome.append(append_sql(writer, g, [node("answer", "late", [first[1]["id"]])]))
            except psycopg.Error as exc:
                outcome.append(exc)

        thread = threading.Thread(target=append)
        thread.start()
        _until(lambda: _waiting(watcher, pid, gpid))
        eraser.commit()
        thread.join(timeout=30)
        assert not thread.is_alive()
        (err,) = outcome
        assert isinstance(err, psycopg.Error), outcome
        assert err.sqlstate == "CW404"
        assert json.loads(err.diag.message_detail or "null") == {"graph": g, "erased": True}
        assert one(watcher, "SELECT count(*) FROM cwstore.graphs WHERE name = %s", (g,)) == 0
    finally:
        for c in (eraser, writer, watcher):
            c.close()


def test_an_erasure_waits_for_the_append_in_flight(setup: Roles) -> None:
    g = new_graph("inflight")
    first = two_nodes(g)
    with psycopg.connect(setup.writer_a, autocommit=True) as w:
        append_sql(w, g, first)
    writer = psycopg.connect(setup.writer_a)  # holds the graph's lock until commit
    eraser = psycopg.connect(setup.admin_a, autocommit=True)
    watcher = psycopg.connect(setup.owner, autocommit=True)
    outcome: list[Any] = []
    try:
        assert append_sql(writer, g, [node("answer", "in flight", [first[1]["id"]])]) == [3]
        pid, gpid = eraser.info.backend_pid, _gpid(eraser)

        def erase() -> None:
            try:
                outcome.append(one(eraser, ERASE, (g, "after the writer")))
            except psycopg.Error as exc:
                outcome.append(exc)

        thread = threading.Thread(target=erase)
        thread.start()
        _until(lambda: _waiting(watcher, pid, gpid))
        writer.commit()
        thread.join(timeout=30)
        assert outcome == [3]  # the committed append is erased with the rest
        assert leftovers(watcher, graph_key(watcher, g)) == {}
    finally:
        for c in (writer, eraser, watcher):
            c.close()


def test_an_append_expecting_a_length_does_not_bring_an_erased_graph_back(db_dsn: str) -> None:
    g = new_graph("expecting")
    with psycopg.connect(db_dsn, autocommit=True) as c:
        append_sql(c, g, two_nodes(g))
        gid = graph_key(c, g)
        one(c, ERASE, (g, None))
        for expected in (2, 5):
            err = refusal(
                db_dsn,
                "SELECT * FROM cwstore.append_v1(%s, %s::json, %s)",
                (g, _jsontext.dumps([node("goal", "again")]), expected),
            )
            assert err.sqlstate == "CW409", err
        assert one(c, "SELECT count(*) FROM cwstore.graphs WHERE name = %s", (g,)) == 0
        assert leftovers(c, gid) == {}
        # Expecting 0 is what a new graph has.
        out = c.execute(
            "SELECT seq FROM cwstore.append_v1(%s, %s::json, 0)",
            (g, _jsontext.dumps([node("goal", "again")])),
        ).fetchall()
        assert out == [(1,)]


def test_the_reader_check_sees_a_graph_erased_in_two_steps(own_db: str) -> None:
    """whole_or_none (test 3's reader) flags what a non-atomic erasure shows: nodes gone,
    the graph's row and derived rows still there."""
    g = new_graph("halves")
    with psycopg.connect(own_db, autocommit=True) as c:
        ns = two_nodes(g)
        ns.append(node("answer", "third", [ns[1]["id"]]))
        append_sql(c, g, ns)
        gid = graph_key(c, g)
        read = READ_GRAPH.replace("$1", "%(g)s")
        assert whole_or_none(c.execute(read, {"g": gid}).fetchone() or ())
        c.execute("SET session_replication_role = replica")
        c.execute("DELETE FROM cwstore.nodes WHERE graph_id = %s AND seq > 1", (gid,))
        assert not whole_or_none(c.execute(read, {"g": gid}).fetchone() or ())
        for t in graph_id_tables(c):
            if t != "erasures":
                c.execute(
                    sql.SQL("DELETE FROM cwstore.{} WHERE graph_id = %s").format(sql.Identifier(t)),
                    (gid,),
                )
        c.execute("SET session_replication_role = DEFAULT")
        assert whole_or_none(c.execute(read, {"g": gid}).fetchone() or ())


# --- erase a tenant ------------------------------------------------------------------------


def test_erase_tenant_in_batches_then_its_members(setup: Roles) -> None:
    tenant = f"ten-{uuid.uuid4().hex[:8]}"
    names = [new_graph("ten") for _ in range(5)]
    bystander = new_graph("bystander")
    with psycopg.connect(setup.owner, autocommit=True) as c:
        c.execute("SELECT cwstore.add_tenant_member(%s, %s)", (tenant, setup.names["reader_a"]))
        c.execute("SELECT set_config('cwstore.tenant', %s, false)", (tenant,))
        for g in names:
            append_sql(c, g, two_nodes(g))
        ids = {g: graph_key(c, g) for g in names}
        c.execute("SELECT set_config('cwstore.tenant', 'acme', false)")
        append_sql(c, bystander, two_nodes(bystander))
        bystander_rows = rows_of(c, graph_key(c, bystander))

        batches: list[list[tuple[str, int]]] = []
        for _ in range(10):
            members = one(
                c, "SELECT count(*) FROM cwstore.tenant_members WHERE tenant = %s", (tenant,)
            )
            rows = c.execute(
                "SELECT graph, nodes FROM cwstore.erase_tenant_v1(%s, 'contract ended', 2)",
                (tenant,),
            ).fetchall()
            batches.append([(str(r[0]), int(r[1])) for r in rows])
            if not rows:
                break
            assert members == 1, "the members went before the last graph"
        assert [len(b) for b in batches] == [2, 2, 1, 0]
        assert sorted(g for b in batches for g, _ in b) == sorted(names)
        assert {n for b in batches for _, n in b} == {2}
        assert (
            one(c, "SELECT count(*) FROM cwstore.tenant_members WHERE tenant = %s", (tenant,)) == 0
        )
        for g, gid in ids.items():
            assert leftovers(c, gid) == {}, g
            (record,) = audit_rows(c, gid)
            assert (record["tenant"], record["reason"], record["nodes"]) == (
                tenant,
                "contract ended",
                2,
            )
        assert rows_of(c, graph_key(c, bystander)) == bystander_rows
        assert mentions(c, names) == []


# --- 4. retention --------------------------------------------------------------------------


IDLE_SINCE = "now() - %s::timestamptz"
"""An idle interval that makes everything last written before the given moment idle:
the functions compare with now(), the start of the calling transaction."""


@OWN_DB_WITH_ROLES
def test_retention_erases_exactly_the_idle_graphs(own_db: str, setup: Roles) -> None:
    _members(own_db, setup.names)
    admin_a = _as(own_db, setup.admin_a)
    with psycopg.connect(own_db, autocommit=True) as c:

        def make(tenant: str, prefix: str, nodes: bool = True) -> str:
            g = new_graph(prefix)
            c.execute("SELECT set_config('cwstore.tenant', %s, false)", (tenant,))
            if nodes:
                append_sql(c, g, two_nodes(g))
            else:
                c.execute("SELECT cwstore.ensure_graph_v1(%s)", (g,))
            return g

        old_acme = [make("acme", "old") for _ in range(3)] + [make("acme", "old-empty", False)]
        touched = make("acme", "touched")
        old_globex = [make("globex", "old") for _ in range(2)]
        time.sleep(0.3)
        cut = one(c, "SELECT clock_timestamp()")
        time.sleep(0.3)
        fresh = [make("acme", "fresh"), make("acme", "fresh-empty", False), make("globex", "fresh")]
        c.execute("SELECT set_config('cwstore.tenant', 'acme', false)")
        first = c.execute(
            "SELECT n.id FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
            " WHERE g.name = %s AND n.seq = 2",
            (touched,),
        ).fetchone()
        assert first is not None
        append_sql(c, touched, [node("answer", "recent", [str(first[0])])])
        idle_acme, idle_globex = set(old_acme), set(old_globex)

        def totals() -> tuple[int, int, int]:
            row = c.execute(
                "SELECT (SELECT count(*) FROM cwstore.graphs),"
                " (SELECT count(*) FROM cwstore.nodes), (SELECT count(*) FROM cwstore.erasures)"
            ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1]), int(row[2])

        # The dry run: what would go, with its length and last write; nothing goes.
        before = totals()
        listed = c.execute(
            f"SELECT graph, tenant, length, last_write FROM cwstore.idle_graphs_v1({IDLE_SINCE})",
            (cut,),
        ).fetchall()
        assert {r[0] for r in listed} == idle_acme | idle_globex
        for g, tenant, length, last_write in listed:
            # Written at: the last write's last statement, after its start.
            expected = c.execute(
                "SELECT g.tenant, g.length, g.written_at,"
                " g.written_at >= coalesce(max(n.recorded_at), g.created_at)"
                " FROM cwstore.graphs g LEFT JOIN cwstore.nodes n USING (graph_id)"
                " WHERE g.name = %s GROUP BY g.graph_id",
                (g,),
            ).fetchone()
            assert (tenant, length, last_write, True) == expected, g
        only_globex = c.execute(
            f"SELECT graph FROM cwstore.idle_graphs_v1({IDLE_SINCE}, 'globex')", (cut,)
        ).fetchall()
        assert {r[0] for r in only_globex} == idle_globex
        assert totals() == before

    # An admin of acme, no tenant named: acme's idle graphs only, two per call, skipping
    # one a writer holds locked.
    with psycopg.connect(admin_a, autocommit=True) as a, psycopg.connect(own_db) as holder:
        seen = a.execute(
            f"SELECT graph FROM cwstore.idle_graphs_v1({IDLE_SINCE})", (cut,)
        ).fetchall()
        assert {r[0] for r in seen} == idle_acme
        locked = sorted(idle_acme)[0]
        holder.execute("SELECT 1 FROM cwstore.graphs WHERE name = %s FOR UPDATE", (locked,))
        a.execute("SET statement_timeout = '20s'")
        calls: list[list[str]] = []
        for _ in range(10):
            rows = a.execute(
                "SELECT graph, tenant, nodes FROM"
                f" cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention', 2)",
                (cut,),
            ).fetchall()
            assert all(r[1] == "acme" for r in rows), rows
            calls.append([str(r[0]) for r in rows])
            if not rows:
                break
        assert [len(x) for x in calls] == [2, 1, 0]
        assert {g for x in calls for g in x} == idle_acme - {locked}
        holder.rollback()
        again = a.execute(
            f"SELECT graph FROM cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention', 2)", (cut,)
        ).fetchall()
        assert [r[0] for r in again] == [locked]

    with psycopg.connect(own_db, autocommit=True) as c:
        # The owner, one tenant at a time, one graph per call.
        counts = []
        for _ in range(5):
            rows = c.execute(
                f"SELECT graph FROM cwstore.erase_idle_v1({IDLE_SINCE}, 'globex', 'retention', 1)",
                (cut,),
            ).fetchall()
            counts.append(len(rows))
            if not rows:
                break
        assert counts == [1, 1, 0]
        left = {str(r[0]) for r in c.execute("SELECT name FROM cwstore.graphs")}
        assert left == {touched, *fresh}
        for g in idle_acme | idle_globex:
            gid = int(one(c, "SELECT cwstore.graph_key(%s)", (g,)))
            assert leftovers(c, gid) == {}, g
            (record,) = audit_rows(c, gid)
            assert record["reason"] == "retention"
            assert record["erased_by"] == (
                setup.names["admin_a"] if g in idle_acme else one(c, "SELECT session_user")
            )
        assert mentions(c, sorted(idle_acme | idle_globex)) == []
        # Nothing is idle for longer than everything's age.
        assert c.execute("SELECT * FROM cwstore.idle_graphs_v1('1 day')").fetchall() == []


# --- 5. two names, one probe-0 key ---------------------------------------------------------


def _state(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    b = GraphBuilder()
    b.system(f"collision {text}")
    b.goal(text)
    b.resource("notes.md", {"content": text})
    b.semantic("memory", "who", text)
    return b.state(), b.nodes


def test_two_names_sharing_a_key_both_work(own_db: str) -> None:
    a, b = COLLIDING
    store = cwstore.connect_sync(own_db, min_size=1, max_size=2, migrate_schema=False)
    try:
        with psycopg.connect(own_db, autocommit=True) as c:
            key0 = int(one(c, "SELECT cwstore.graph_key(%s)", (a,)))
            assert key0 == int(one(c, "SELECT cwstore.graph_key(%s)", (b,))) == VECTOR["graph_key"]
            assert int(one(c, "SELECT cwstore.graph_key(%s, 0)", (a,))) == key0

            docs = {a: _state(f"life one of {a}"), b: _state(f"life one of {b}")}
            for name, (doc, _) in docs.items():
                assert store.import_state(name, doc) == len(doc["nodes"])
            id_a, id_b = graph_key(c, a), graph_key(c, b)
            assert id_a == key0
            assert one(c, "SELECT cwstore.graph_id_of(%s)", (a,)) == id_a
            assert one(c, "SELECT cwstore.graph_id_of(%s)", (b,)) == id_b
            assert id_b == int(one(c, "SELECT cwstore.graph_key(%s, 1)", (b,)))
            assert one(c, "SELECT key_probe FROM cwstore.graphs WHERE graph_id = %s", (id_b,)) == 1
            assert c.execute("SELECT slot, graph_id FROM cwstore.graph_key_detours").fetchall() == [
                (key0, id_b)
            ]
            exported = {}
            for name, (doc, _) in docs.items():
                exported[name] = store.export_json(name)
                assert json.loads(exported[name]) == doc
                _reads_are_its_own(c, name, docs[name][1])

            # Erase the one holding the key: the other works on, byte for byte.
            assert one(c, ERASE, (a, None)) == 4
            assert leftovers(c, id_a) == {}
            assert c.execute("SELECT slot, graph_id FROM cwstore.graph_key_detours").fetchall() == [
                (key0, id_b)
            ]
            assert store.export_json(b) == exported[b]
            _reads_are_its_own(c, b, docs[b][1])
            with pytest.raises(cwstore.UnknownGraphError):
                store.export_json(a)
            more = node("answer", f"still here {b}", [docs[b][1][-1]["id"]])
            assert [n.sequence for n in store.append(b, [more])] == [5]

            # The erased name comes back from sequence 1, and both work.
            again = node("goal", f"life two of {a}")
            assert [n.sequence for n in store.append(a, [again])] == [1]
            assert [n.id for n in store.replay(a).nodes] == [again["id"]]
            assert graph_key(c, a) != id_b
            assert [n.id for n in store.replay(b).nodes] == [n["id"] for n in docs[b][1]] + [
                more["id"]
            ]

            # Erase the one that took a detour: its detours go with it.
            id_a2 = graph_key(c, a)
            assert one(c, ERASE, (b, None)) == 5
            assert leftovers(c, id_b) == {}
            assert [
                r
                for r in c.execute("SELECT slot, graph_id FROM cwstore.graph_key_detours")
                if r[1] == id_b
            ] == []
            assert [n.id for n in store.replay(a).nodes] == [again["id"]]
            assert [n.sequence for n in store.append(b, [node("goal", f"life two of {b}")])] == [1]
            assert graph_key(c, a) == id_a2
            _reads_are_its_own(c, a, [again])
            for name in (a, b):
                one(c, ERASE, (name, None))
            assert c.execute("SELECT count(*) FROM cwstore.graph_key_detours").fetchone() == (0,)
            assert mentions(c, [a, b]) == []
    finally:
        store.close()


def _reads_are_its_own(c: psycopg.Connection[Any], name: str, nodes: list[dict[str, Any]]) -> None:
    """The read functions of graph ``name`` answer with its own nodes."""
    ids = [n["id"] for n in nodes]
    last = ids[-1]
    exported = json.loads(one(c, "SELECT nodes FROM cwstore.export_v1(%s)", (name,)))
    assert [n["id"] for n in exported] == ids
    assert one(c, "SELECT cwstore.projection_v1(%s) IS NOT NULL", (name,)) is True
    frontier = [r[0] for r in c.execute("SELECT id FROM cwstore.frontier_at(%s)", (name,))]
    assert frontier and set(frontier) <= set(ids)
    up = [r[0] for r in c.execute("SELECT id FROM cwstore.ancestors(%s, %s)", (name, last))]
    assert set(up) <= set(ids) - {last}
    heads = [r[0] for r in c.execute("SELECT id FROM cwstore.heads_at(%s)", (name,))]
    assert set(heads) <= set(ids)
    history = c.execute("SELECT * FROM cwstore.key_history(%s, 'notes.md')", (name,)).fetchall()
    assert len(history) == sum(1 for n in nodes if n.get("resourceKey") == "notes.md")


@OWN_DB_WITH_ROLES
def test_colliding_names_in_two_tenants(own_db: str, setup: Roles) -> None:
    """Each tenant writes one of the pair; neither blocks the other or sees it."""
    _members(own_db, setup.names)
    a, b = COLLIDING
    writer_a, writer_b = _as(own_db, setup.writer_a), _as(own_db, setup.writer_b)
    with (
        psycopg.connect(writer_a, autocommit=True) as wa,
        psycopg.connect(writer_b, autocommit=True) as wb,
    ):
        assert append_sql(wa, a, two_nodes(a)) == [1, 2]
        assert append_sql(wb, b, two_nodes(b)) == [1, 2]
        assert (
            json.loads(one(wa, "SELECT nodes FROM cwstore.export_v1(%s)", (a,)))[0]["id"]
            == two_nodes(a)[0]["id"]
        )
        assert (
            json.loads(one(wb, "SELECT nodes FROM cwstore.export_v1(%s)", (b,)))[0]["id"]
            == two_nodes(b)[0]["id"]
        )
    mine = refusal(writer_b, "SELECT cwstore.export_v1(%s)", (a,))
    assert mine.sqlstate == "CW404"
    with psycopg.connect(own_db, autocommit=True) as c:
        tenants: dict[str, str] = dict(
            c.execute("SELECT name, tenant FROM cwstore.graphs").fetchall()
        )
        assert tenants == {a: "acme", b: "globex"}
    with psycopg.connect(_as(own_db, setup.admin_b), autocommit=True) as ab:
        assert one(ab, ERASE, (b, "globex only")) == 2
    with psycopg.connect(writer_a, autocommit=True) as wa:
        assert append_sql(wa, a, [node("answer", "on", [two_nodes(a)[1]["id"]])]) == [3]


# --- 6. the all-graphs feed ------------------------------------------------------------------


TAIL_V2 = "SELECT xid, graph_id, seq, erased, name FROM cwstore.tail_all_v2(%s, %s, %s, 1000)"


def _follow(
    c: psycopg.Connection[Any], cursor: tuple[int, int, int]
) -> tuple[list[tuple[int, int, int, bool, Any]], tuple[int, int, int]]:
    """Everything tail_all_v2 has after ``cursor``, and the cursor after it."""
    out: list[tuple[int, int, int, bool, Any]] = []
    while True:
        rows = c.execute(TAIL_V2, cursor).fetchall()
        if not rows:
            return out, cursor
        out.extend((int(r[0]), int(r[1]), int(r[2]), bool(r[3]), r[4]) for r in rows)
        cursor = (int(rows[-1][0]), int(rows[-1][1]), int(rows[-1][2]))


@pytest.mark.skipif(ON_CITUS, reason="tail_all is refused on Citus (tests/citus/test_placement.py)")
def test_tail_all_v2_delivers_the_erasure_between_two_lives(db_dsn: str) -> None:
    g = new_graph("feed")
    with psycopg.connect(db_dsn, autocommit=True) as c:
        _, start = _follow(c, (0, 0, 0))
        old = two_nodes(g)
        append_sql(c, g, old)
        append_sql(c, g, [node("answer", "three", [old[1]["id"]])])
        gid = graph_key(c, g)
        first, after_old = _follow(c, start)
        assert [(s, e) for _, k, s, e, _ in first if k == gid] == [
            (1, False),
            (2, False),
            (3, False),
        ]

        one(c, ERASE, (g, "feed"))
        event, after_event = _follow(c, after_old)
        mine = [r for r in event if r[1] == gid]
        assert [(s, e) for _, _, s, e, _ in mine] == [(MAX_SEQ, True)]
        (xid, _, _, _, name) = mine[0]
        assert name is None  # the feed does not keep the name either
        assert (xid, gid, MAX_SEQ) > after_old
        (record,) = audit_rows(c, gid)
        assert record["xid"] == xid

        new = [node("goal", f"second life of {g}")]
        append_sql(c, g, new)
        later, _ = _follow(c, after_event)
        assert [(s, e) for _, k, s, e, _ in later if k == graph_key(c, g)] == [(1, False)]

        # From the start, after the fact: the event, then the new life; nothing of the old.
        whole, _ = _follow(c, (0, 0, 0))
        key_rows = [(s, e) for _, k, s, e, _ in whole if k == gid]
        new_key = graph_key(c, g)
        if new_key == gid:
            assert key_rows == [(MAX_SEQ, True), (1, False)]
        else:
            assert key_rows == [(MAX_SEQ, True)]
        # tail_all_v1 is unchanged: nodes only.
        v1 = c.execute("SELECT graph_id, seq FROM cwstore.tail_all_v1(0, 0, 0, 100000)").fetchall()
        assert [s for k, s in v1 if k == new_key] == [1]
        assert all(s != MAX_SEQ for _, s in v1)


def test_a_write_committed_after_the_cut_is_not_idle(own_db: str) -> None:
    # A transaction that started before the cut and wrote after it: its nodes'
    # recorded_at is the transaction's start, but the graph was written after the cut.
    g = new_graph("long-tx")
    with psycopg.connect(own_db, autocommit=True) as c, psycopg.connect(own_db) as w:
        w.execute("SELECT now()")
        cut = one(w, "SELECT clock_timestamp()")
        append_sql(w, g, two_nodes(g))
        w.commit()
        assert one(c, f"SELECT count(*) FROM cwstore.idle_graphs_v1({IDLE_SINCE})", (cut,)) == 0
        erased = c.execute(
            f"SELECT graph FROM cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention')", (cut,)
        ).fetchall()
        assert erased == []
        assert one(c, "SELECT length FROM cwstore.graphs WHERE name = %s", (g,)) == 2


def _grouped(c: psycopg.Connection[Any], group: str, prefix: str) -> str:
    g = new_graph(prefix)
    c.execute("SELECT set_config('cwstore.retention_group', %s, false)", (group,))
    append_sql(c, g, two_nodes(g))
    c.execute("RESET cwstore.retention_group")
    return g


def test_a_retention_group_is_idle_and_erased_as_one(own_db: str) -> None:
    group = f"thread-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(own_db, autocommit=True) as c, psycopg.connect(own_db) as holder:
        old = sorted([_grouped(c, group, "grp-old"), _grouped(c, group, "grp-old")])
        alone = new_graph("alone")
        append_sql(c, alone, two_nodes(alone))
        cut = one(c, "SELECT clock_timestamp()")
        fresh = _grouped(c, group, "grp-fresh")
        assert {
            r[0]: r[1]
            for r in c.execute(
                "SELECT name, retention_group FROM cwstore.graphs WHERE name = ANY (%s)",
                ([*old, fresh, alone],),
            )
        } == {old[0]: group, old[1]: group, fresh: group, alone: None}
        # One graph of the group written after the cut: none of it is idle.
        listed = c.execute(
            f"SELECT graph, retention_group FROM cwstore.idle_graphs_v1({IDLE_SINCE})", (cut,)
        ).fetchall()
        assert listed == [(alone, None)]
        erased = c.execute(
            f"SELECT graph FROM cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention', 1)", (cut,)
        ).fetchall()
        assert erased == [(alone,)]
        # Every graph idle, one held by a writer: nothing of the group goes.
        cut = one(c, "SELECT clock_timestamp()")
        holder.execute("SELECT 1 FROM cwstore.graphs WHERE name = %s FOR UPDATE", (old[1],))
        idle = (
            "SELECT graph, retention_group FROM"
            f" cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention', 1)"
        )
        assert c.execute(idle, (cut,)).fetchall() == []
        holder.rollback()
        # Free: the whole group in one call, past the batch of 1.
        erased = c.execute(idle, (cut,)).fetchall()
        assert sorted(erased) == sorted((g, group) for g in [*old, fresh])
        assert (
            one(c, "SELECT count(*) FROM cwstore.graphs WHERE retention_group = %s", (group,)) == 0
        )


def test_a_group_with_a_graph_being_created_is_not_erased(own_db: str) -> None:
    # A thread's new namespace is being written (its creation not yet committed) while
    # retention finds the rest of the thread idle: none of the thread goes, and the new
    # graph commits into a whole group.
    group = f"thread-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(own_db, autocommit=True) as c, psycopg.connect(own_db) as writer:
        old = sorted([_grouped(c, group, "grp-old"), _grouped(c, group, "grp-old")])
        cut = one(c, "SELECT clock_timestamp()")
        new = new_graph("grp-new")
        writer.execute("SELECT set_config('cwstore.retention_group', %s, true)", (group,))
        append_sql(writer, new, two_nodes(new))
        idle = (
            "SELECT graph, retention_group FROM"
            f" cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention')"
        )
        assert c.execute(idle, (cut,)).fetchall() == []
        assert one(c, "SELECT count(*) FROM cwstore.graphs WHERE name = ANY (%s)", (old,)) == 2
        writer.commit()
        assert (
            one(c, "SELECT count(*) FROM cwstore.graphs WHERE retention_group = %s", (group,)) == 3
        )
        # Once the creation is over, the group goes whole when all of it is idle.
        cut = one(c, "SELECT clock_timestamp()")
        erased = c.execute(idle, (cut,)).fetchall()
        assert sorted(erased) == sorted((g, group) for g in [*old, new])


def test_a_creation_in_a_group_waits_for_its_erasure(own_db: str) -> None:
    # Retention holds the group while it erases it: a graph created in the group
    # meanwhile waits, and lands after the erasure in a group of its own life.
    group = f"thread-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(own_db, autocommit=True) as c, psycopg.connect(own_db) as eraser:
        old = _grouped(c, group, "grp-old")
        cut = one(c, "SELECT clock_timestamp()")
        erased = eraser.execute(
            f"SELECT graph FROM cwstore.erase_idle_v1({IDLE_SINCE}, NULL, 'retention')", (cut,)
        ).fetchall()
        assert erased == [(old,)]
        new = new_graph("grp-new")
        created: list[BaseException | None] = []

        def create() -> None:
            try:
                with psycopg.connect(own_db, autocommit=True) as w:
                    w.execute("SELECT set_config('cwstore.retention_group', %s, false)", (group,))
                    append_sql(w, new, two_nodes(new))
                created.append(None)
            except BaseException as e:  # reported below
                created.append(e)

        t = threading.Thread(target=create)
        t.start()
        deadline = time.monotonic() + 10
        while not one(
            c,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND classid = 1668772455",
        ):
            assert time.monotonic() < deadline, "the creation did not wait for the group"
            assert t.is_alive(), created
            time.sleep(0.01)
        eraser.commit()
        t.join(10)
        assert created == [None]
        assert [
            r[0]
            for r in c.execute(
                "SELECT name FROM cwstore.graphs WHERE retention_group = %s", (group,)
            )
        ] == [new]


def test_a_retention_group_too_long_is_refused(db_dsn: str) -> None:
    g = new_graph("bad-group")
    with psycopg.connect(db_dsn, autocommit=True) as c:
        c.execute("SELECT set_config('cwstore.retention_group', %s, false)", ("x" * 2001,))
        with pytest.raises(psycopg.errors.CheckViolation) as e:
            append_sql(c, g, two_nodes(g))
        assert e.value.diag.constraint_name == "graphs_retention_group_check"
        assert one(c, "SELECT count(*) FROM cwstore.graphs WHERE name = %s", (g,)) == 0


def _stats_holding(c: psycopg.Connection[Any], secret: str) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1]))
        for r in c.execute(
            "SELECT tablename, attname FROM pg_stats WHERE schemaname = 'cwstore'"
            " AND concat_ws(' ', most_common_vals::text, histogram_bounds::text,"
            "               most_common_elems::text) LIKE '%%' || %s || '%%'",
            (secret,),
        )
    ]


def test_erased_content_stays_in_no_planner_statistics(own_db: str) -> None:
    secret = f"zq{uuid.uuid4().hex[:10]}"
    g = f"user:{secret}@example.org"
    with psycopg.connect(own_db, autocommit=True) as c:
        c.execute("SELECT set_config('cwstore.retention_group', %s, false)", (g,))
        for i in range(20):
            append_sql(
                c,
                f"{g}/{i}",
                [node("goal", {"secret": secret}, [], key=f"memory:{secret}")],
            )
        c.execute("ANALYZE")
        before = _stats_holding(c, secret)
        for i in range(20):
            c.execute(ERASE, (f"{g}/{i}", "forget me"))
        c.execute("ANALYZE")
        assert (before, _stats_holding(c, secret)) == ([], [])
