"""The database holds the graph's invariants itself, whoever writes: raw SQL only.

No Python store here: every statement is what a psql user (or the TypeScript runtime
through ``pg``) could send. History is append-only (CW403), derived tables are written
by the nodes trigger only (CW403), and a raw INSERT into ``cwstore.nodes`` that breaks
an invariant is refused with a constraint or a CW SQLSTATE whose DETAIL is JSON. After
every refusal the test checks that nothing at all was written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from cwstore._rules import fold_frontier
from cwstore.document import sort_parents
from cwstore.identity import compute_id

T = "2026-12-02T14:38:31.376Z"
WRITABLE = {
    "graphs",
    "nodes",
    "frontier_declarations",
    "schema_migrations",
    "tenant_members",
    "listeners",
    "erasures",
}
"""The tables a client (or the owner, for tenant_members; listen_v1, for listeners; the
erasure functions, for erasures, whose row is an erasure) writes; every other cwstore
table is derived from nodes or graphs."""
INF = 9223372036854775807

Conn = psycopg.Connection[Any]


def node(
    kind: str,
    payload: Any,
    parents: list[str] = (),  # type: ignore[assignment]
    key: str | None = None,
    *,
    created_at: str = T,
) -> dict[str, Any]:
    """A well-formed runtime node (id computed, parents sorted), without a sequence."""
    ps = sort_parents(parents)
    return {
        "id": compute_id(kind, ps, payload, key),
        "kind": kind,
        "parents": ps,
        "payload": json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
        "created_at": created_at,
        "key": key,
    }


def new_graph(conn: Conn, vocabulary: list[str] | None = None) -> int:
    name = f"sql-{uuid.uuid4().hex}"
    row = conn.execute(
        "INSERT INTO cwstore.graphs (graph_id, name, vocabulary)"
        " VALUES (cwstore.graph_key(%s), %s, %s) RETURNING graph_id",
        (name, name, vocabulary),
    ).fetchone()
    assert row is not None
    return int(row[0])


def insert(conn: Conn, graph_id: int, first_seq: int, nodes: list[dict[str, Any]]) -> None:
    """One INSERT statement (one trigger run) of ``nodes`` numbered from ``first_seq``."""
    values = ", ".join(["(%s, %s, %s, %s, %s::text[], %s, %s, %s)"] * len(nodes))
    args: list[Any] = []
    for i, n in enumerate(nodes):
        args += [
            graph_id,
            n.get("seq", first_seq + i),
            n["id"],
            n["kind"],
            n["parents"],
            n["payload"],
            n["created_at"],
            n["key"],
        ]
    conn.execute(
        "INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,"
        f" created_at_text, resource_key) VALUES {values}",
        args,
    )


def tables(conn: Conn) -> list[str]:
    """Every table of the cwstore schema."""
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'cwstore' ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def counts(conn: Conn) -> dict[str, Any]:
    """Rows of every cwstore table, and every graph's length and vocabulary."""
    out: dict[str, Any] = {
        t: conn.execute(f"SELECT count(*) FROM cwstore.{t}").fetchone()[0]  # type: ignore[index]
        for t in tables(conn)
    }
    assert {"nodes", "edges", "frontier_spans", "key_heads"} <= set(out)
    out["graph_rows"] = conn.execute(
        "SELECT graph_id, name, length, vocabulary FROM cwstore.graphs ORDER BY graph_id"
    ).fetchall()
    out["open_spans"] = conn.execute(
        "SELECT graph_id, head_seq, from_seq, to_seq FROM cwstore.frontier_spans ORDER BY 1, 2, 3"
    ).fetchall()
    out["heads"] = conn.execute("SELECT * FROM cwstore.key_heads ORDER BY 1, 2").fetchall()
    return out


def refused(conn: Conn, statement: Callable[[], Any]) -> psycopg.Error:
    """Run ``statement``, which must fail and write nothing; return the error."""
    before = counts(conn)
    with pytest.raises(psycopg.Error) as info:
        statement()
    assert counts(conn) == before, "a refused statement wrote something"
    return info.value


def graph_name(conn: Conn, graph_id: int) -> str:
    row = conn.execute("SELECT name FROM cwstore.graphs WHERE graph_id = %s", (graph_id,))
    return str(row.fetchone()[0])  # type: ignore[index]


def detail(err: psycopg.Error) -> dict[str, Any]:
    text = err.diag.message_detail
    assert text is not None, f"{err.diag.sqlstate} without DETAIL"
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


@pytest.fixture
def chain(conn: Conn) -> tuple[int, list[dict[str, Any]]]:
    """A graph holding a system node, a goal and version 1 of resource ``src/a.ts``."""
    gid = new_graph(conn)
    system = node("system", "contract")
    goal = node("goal", "edit a file", [system["id"]])
    res = node("resource", {"path": "src/a.ts", "v": 1}, [goal["id"]], "src/a.ts")
    insert(conn, gid, 1, [system, goal, res])
    return gid, [system, goal, res]


# --- append-only history and derived tables ---------------------------------------------


@pytest.mark.parametrize(
    ("table", "operation", "sql"),
    [
        ("nodes", "UPDATE", "UPDATE cwstore.nodes SET kind = 'goal' WHERE graph_id = %(g)s"),
        ("nodes", "UPDATE", "UPDATE cwstore.nodes SET payload_text = '\"x\"' WHERE seq = 2"),
        ("nodes", "DELETE", "DELETE FROM cwstore.nodes WHERE graph_id = %(g)s AND seq = 3"),
        ("nodes", "DELETE", "DELETE FROM cwstore.nodes"),
        ("nodes", "TRUNCATE", "TRUNCATE cwstore.nodes"),
        ("edges", "UPDATE", "UPDATE cwstore.edges SET parent_seq = 1 WHERE graph_id = %(g)s"),
        ("edges", "DELETE", "DELETE FROM cwstore.edges WHERE graph_id = %(g)s"),
        ("edges", "TRUNCATE", "TRUNCATE cwstore.edges"),
        (
            "edges",
            "INSERT",
            "INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)"
            " VALUES (%(g)s, 3, 1, 1)",
        ),
        (
            "frontier_spans",
            "INSERT",
            "INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq)"
            " VALUES (%(g)s, 2, 3)",
        ),
        (
            "frontier_spans",
            "UPDATE",
            "UPDATE cwstore.frontier_spans SET to_seq = 3 WHERE graph_id = %(g)s",
        ),
        ("frontier_spans", "DELETE", "DELETE FROM cwstore.frontier_spans WHERE graph_id = %(g)s"),
        (
            "key_versions",
            "INSERT",
            "INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)"
            " VALUES (%(g)s, 'src/b.ts', 1, 2, 3)",
        ),
        (
            "key_heads",
            "INSERT",
            "INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)"
            " VALUES (%(g)s, 'src/b.ts', 2, 'cw_000000000000000000000000', 1, 2)",
        ),
        ("key_heads", "UPDATE", "UPDATE cwstore.key_heads SET version = 9 WHERE graph_id = %(g)s"),
        ("key_heads", "DELETE", "DELETE FROM cwstore.key_heads WHERE graph_id = %(g)s"),
    ],
    ids=lambda v: v.split()[0] if " " in str(v) else str(v),
)
def test_history_and_derived_tables_refuse_direct_writes(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]], table: str, operation: str, sql: str
) -> None:
    gid, _ = chain
    err = refused(conn, lambda: conn.execute(sql, {"g": gid}))
    assert err.diag.sqlstate == "CW403"
    assert detail(err) == {"table": table, "operation": operation}


def test_every_derived_table_refuses_every_direct_write(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]]
) -> None:
    """Whatever tables the migrations add: each one a client does not write is written
    by the nodes trigger only (the statement triggers fire even when no row matches)."""
    derived = [t for t in tables(conn) if t not in WRITABLE]
    assert {"edges", "frontier_spans", "key_versions", "key_heads"} <= set(derived)
    for table in derived:
        for operation, sql in (
            ("INSERT", f"INSERT INTO cwstore.{table} SELECT * FROM cwstore.{table} LIMIT 1"),
            ("UPDATE", f"UPDATE cwstore.{table} SET graph_id = graph_id"),
            ("DELETE", f"DELETE FROM cwstore.{table}"),
            ("TRUNCATE", f"TRUNCATE cwstore.{table}"),
        ):
            err = refused(conn, lambda: conn.execute(sql))  # noqa: B023 (called at once)
            assert err.diag.sqlstate == "CW403", (table, operation, err)
            assert detail(err) == {"table": table, "operation": operation}
    for table in ("nodes", "frontier_declarations", "erasures"):
        for operation, sql in (
            ("UPDATE", f"UPDATE cwstore.{table} SET graph_id = graph_id"),
            ("DELETE", f"DELETE FROM cwstore.{table}"),
            ("TRUNCATE", f"TRUNCATE cwstore.{table}"),
        ):
            err = refused(conn, lambda: conn.execute(sql))  # noqa: B023 (called at once)
            assert err.diag.sqlstate == "CW403", (table, operation, err)
            assert detail(err) == {"table": table, "operation": operation}


def test_a_graph_id_is_the_key_of_its_name(conn: Conn) -> None:
    """graph_id is cwstore.graph_key(name), checked: a row with another id is refused,
    so one name has one row (graphs_pkey) wherever the table lives."""
    name = f"key-{uuid.uuid4().hex}"
    gid = conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (name,)).fetchone()
    assert gid is not None
    key = conn.execute("SELECT cwstore.graph_key(%s)", (name,)).fetchone()
    assert key is not None and gid[0] == key[0] and 0 <= key[0] < 2**48
    assert conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (name,)).fetchone() == gid
    with pytest.raises(psycopg.errors.CheckViolation) as err:
        conn.execute(
            "INSERT INTO cwstore.graphs (graph_id, name) VALUES (%s, %s)", (key[0] + 1, name)
        )
    assert err.value.diag.constraint_name == "graphs_key_check"
    with pytest.raises(psycopg.errors.UniqueViolation) as dup:
        conn.execute(
            "INSERT INTO cwstore.graphs (graph_id, name) VALUES (cwstore.graph_key(%s), %s)",
            (name, name),
        )
    assert dup.value.diag.constraint_name == "graphs_pkey"


@pytest.mark.parametrize(
    ("column", "value", "check"),
    [
        ("vocabulary", [], "graphs_vocabulary_check"),
        ("vocabulary", [f"t{i}" for i in range(33)], "graphs_vocabulary_check"),
        ("vocabulary", ["memory", None], "graphs_vocabulary_check"),
        ("retention_group", "", "graphs_retention_group_check"),
        ("retention_group", "é" * 1001, "graphs_retention_group_check"),
    ],
)
def test_a_graph_row_holds_a_vocabulary_and_a_retention_group_of_their_forms(
    conn: Conn, column: str, value: Any, check: str
) -> None:
    """A vocabulary is NULL or 1 to 32 names, none NULL; a retention group NULL or 1 to
    2000 bytes: refused as their check constraints (23514, that name) in a new row and
    in an UPDATE that sets them, and the forms at the limits are taken."""
    name = f"settings-{uuid.uuid4().hex}"
    err = refused(
        conn,
        lambda: conn.execute(
            f"INSERT INTO cwstore.graphs (graph_id, name, {column}) "
            "VALUES (cwstore.graph_key(%s), %s, %s)",
            (name, name, value),
        ),
    )
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", check)
    assert err.diag.table_name == "graphs" and err.diag.schema_name == "cwstore"
    gid = new_graph(conn)
    err = refused(
        conn,
        lambda: conn.execute(
            f"UPDATE cwstore.graphs SET {column} = %s WHERE graph_id = %s", (value, gid)
        ),
    )
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", check)
    widest = [f"t{i}" for i in range(32)] if column == "vocabulary" else "é" * 1000
    conn.execute(f"UPDATE cwstore.graphs SET {column} = %s WHERE graph_id = %s", (widest, gid))
    got = conn.execute(f"SELECT {column} FROM cwstore.graphs WHERE graph_id = %s", (gid,))
    assert got.fetchone() == (widest,)


def test_a_graph_row_keeps_its_identity_inside_a_trigger(
    conn: Conn, chain: tuple[int, Any]
) -> None:
    """A statement at trigger depth 1 (as the nodes trigger's are) may move a graph's
    length, never its id, name, life or, once it holds nodes, its vocabulary: the guard
    on those columns refuses them at any depth (CW403)."""
    gid, _ = chain
    conn.execute("CREATE TEMP TABLE poke (sql text)")
    conn.execute(
        "CREATE FUNCTION pg_temp.poke() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN EXECUTE NEW.sql; RETURN NULL; END $$"
    )
    conn.execute(
        "CREATE TRIGGER poke AFTER INSERT ON poke FOR EACH ROW EXECUTE FUNCTION pg_temp.poke()"
    )
    for setting in (
        "name = name || '-renamed'",
        "incarnation = incarnation + 1",
        "graph_id = graph_id + 1",
        "vocabulary = '{memory}'",
    ):
        sql = f"UPDATE cwstore.graphs SET {setting} WHERE graph_id = {gid}"
        err = refused(
            conn,
            lambda: conn.execute("INSERT INTO poke VALUES (%s)", (sql,)),  # noqa: B023
        )
        assert err.diag.sqlstate == "CW403", (setting, err)
        assert (detail(err)["table"], detail(err)["operation"]) == ("graphs", "UPDATE")


def test_graph_length_cannot_be_updated(conn: Conn, chain: tuple[int, Any]) -> None:
    gid, _ = chain
    for sql in (
        "UPDATE cwstore.graphs SET length = length + 1 WHERE graph_id = %s",
        "UPDATE cwstore.graphs SET length = 0 WHERE graph_id = %s",
        "UPDATE cwstore.graphs SET name = name || '-renamed' WHERE graph_id = %s",
        "UPDATE cwstore.graphs SET vocabulary = '{memory}' WHERE graph_id = %s",
    ):
        err = refused(conn, lambda: conn.execute(sql, (gid,)))  # noqa: B023 (called at once)
        assert err.diag.sqlstate == "CW403"
        d = detail(err)
        assert (d["table"], d["operation"]) == ("graphs", "UPDATE")


def test_a_graph_with_history_cannot_be_deleted(conn: Conn, chain: tuple[int, Any]) -> None:
    gid, _ = chain
    name = graph_name(conn, gid)
    err = refused(
        conn, lambda: conn.execute("DELETE FROM cwstore.graphs WHERE graph_id = %s", (gid,))
    )
    assert err.diag.sqlstate == "CW403"
    assert detail(err) == {"table": "graphs", "operation": "DELETE", "graph": name}
    err = refused(conn, lambda: conn.execute("TRUNCATE cwstore.graphs CASCADE"))
    assert err.diag.sqlstate == "CW403"


# --- raw INSERTs into nodes that break an invariant ---------------------------------------


def _violation(err: psycopg.Error, code: str) -> dict[str, Any]:
    assert err.diag.sqlstate == "CW400", (err.diag.sqlstate, err.diag.message_primary)
    d = detail(err)
    assert d["code"] == code, d
    return d


def test_sequence_gap(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    n = node("answer", "done", [nodes[2]["id"]])
    err = refused(conn, lambda: insert(conn, gid, 5, [n]))  # length is 3: 4 is next
    d = _violation(err, "sequence")
    assert (d["graph_id"], d["seq"], d["path"]) == (gid, 5, "$.sequence")


def test_sequence_gap_inside_one_statement(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]]
) -> None:
    gid, nodes = chain
    a = node("answer", "one", [nodes[2]["id"]])
    b = node("answer", "two", [nodes[2]["id"]]) | {"seq": 6}
    err = refused(conn, lambda: insert(conn, gid, 4, [a, b]))
    assert _violation(err, "sequence")["graph_id"] == gid


def test_sequence_must_start_at_one(conn: Conn) -> None:
    gid = new_graph(conn)
    err = refused(conn, lambda: insert(conn, gid, 2, [node("system", "contract")]))
    d = _violation(err, "sequence")
    assert (d["graph_id"], d["seq"]) == (gid, 2)
    err = refused(conn, lambda: insert(conn, gid, 0, [node("system", "contract")]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", "nodes_seq_check")


def test_sequence_already_taken(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    err = refused(conn, lambda: insert(conn, gid, 3, [node("answer", "x", [nodes[1]["id"]])]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23505", "nodes_pkey")


def test_duplicate_id(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    err = refused(conn, lambda: insert(conn, gid, 4, [nodes[1]]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23505", "nodes_id_key")


def test_missing_parent(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    ghost = "cw_" + "0" * 24
    n = node("answer", "done", [nodes[1]["id"], ghost])
    assert n["parents"].index(ghost) == 0
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    d = _violation(err, "missing_parent")
    assert (d["node_id"], d["seq"], d["index"], d["path"]) == (n["id"], 4, 3, "$.parents[0]")


def test_missing_only_parent(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, _ = chain
    n = node("answer", "done", ["cw_" + "0" * 24])
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    d = _violation(err, "missing_parent")
    assert (d["node_id"], d["seq"], d["path"]) == (n["id"], 4, "$.parents[0]")


def test_parent_later_in_sequence(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    later = node("tool_call", {"name": "read_file"}, [nodes[1]["id"]])
    early = node("inference", "thinks", [later["id"]])  # seq 4, its parent comes at seq 5
    err = refused(conn, lambda: insert(conn, gid, 4, [early, later]))
    d = _violation(err, "parent_order")
    assert (d["node_id"], d["seq"], d["path"]) == (early["id"], 4, "$.parents[0]")


def test_parents_not_sorted(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    n = node("answer", "done", [nodes[0]["id"], nodes[1]["id"]])
    n["parents"] = n["parents"][::-1]
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    d = _violation(err, "parent_order")
    assert (d["node_id"], d["path"]) == (n["id"], "$.parents[1]")


def test_parent_repeated(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    n = node("answer", "done", [nodes[1]["id"]])
    n["parents"] = [nodes[1]["id"], nodes[1]["id"]]
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    d = _violation(err, "parent_order")
    assert (d["node_id"], d["path"]) == (n["id"], "$.parents[1]")


def test_self_parent(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, _ = chain
    n = node("answer", "done")
    n["parents"] = [n["id"]]
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    d = _violation(err, "parent_order")
    assert (d["node_id"], d["seq"]) == (n["id"], 4)


def test_bad_kind(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    n = node("thought", "hmm", [nodes[1]["id"]])
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", "nodes_kind_check")


@pytest.mark.parametrize(
    "bad_id",
    [
        "cw_" + "A" * 24,
        "cw_" + "a" * 23,
        "cw_" + "a" * 25,
        "xx_" + "a" * 24,
        "cw_" + "g" * 24,
        "",
        "cw_" + "a" * 24 + "\n",
    ],
)
def test_id_form(conn: Conn, chain: tuple[int, list[dict[str, Any]]], bad_id: str) -> None:
    gid, nodes = chain
    n = node("answer", "done", [nodes[1]["id"]]) | {"id": bad_id}
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", "nodes_id_check")


@pytest.mark.parametrize(
    "created_at",
    ["2026-12-02T14:38:31.383", "2026-12-02 14:38:31.383Z", "2026-12-02", "yesterday"],
)
def test_created_at_needs_a_zone(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]], created_at: str
) -> None:
    gid, nodes = chain
    n = node("answer", "done", [nodes[1]["id"]], created_at=created_at)
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    # Each of these parses as a timestamptz (in the session's zone): only the check
    # constraint stands between them and a createdAt that depends on the TimeZone setting.
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", "nodes_created_at_check")


def test_resource_key_not_empty(conn: Conn, chain: tuple[int, list[dict[str, Any]]]) -> None:
    gid, nodes = chain
    n = node("resource", "v1", [nodes[1]["id"]]) | {"key": ""}
    err = refused(conn, lambda: insert(conn, gid, 4, [n]))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", "nodes_resource_key_check")


ROW_RULES: dict[str, dict[str, Any]] = {
    "nodes_seq_check": {"seq": 0},
    "nodes_id_check": {"id": "cw_" + "G" * 24},
    "nodes_kind_check": {"kind": "thought"},
    "nodes_created_at_check": {"created_at": "2026-12-02 14:38:31Z"},
    "nodes_resource_key_check": {"key": ""},
}
"""Each rule of a node row, and a change to a well-formed node that breaks it."""


@pytest.mark.parametrize("rows", [2, 5], ids=["few rows", "many rows"])
@pytest.mark.parametrize("rule", sorted(ROW_RULES))
def test_a_row_rule_refuses_a_statement_of_several_rows(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]], rule: str, rows: int
) -> None:
    """The rules hold for every row of a statement, not only its first (the nodes
    trigger checks them, as the table's CHECK constraints once did), and the refusal
    names the row that broke one: here the last."""
    gid, nodes = chain
    batch = [node("answer", f"a{i}", [nodes[2]["id"]]) for i in range(rows)]
    batch[-1] = batch[-1] | ROW_RULES[rule]
    err = refused(conn, lambda: insert(conn, gid, 4, batch))
    assert (err.diag.sqlstate, err.diag.constraint_name) == ("23514", rule)
    assert (err.diag.schema_name, err.diag.table_name) == ("cwstore", "nodes")
    seq = 0 if rule == "nodes_seq_check" else 3 + rows
    assert f"sequence {seq} of graph id {gid}" in (err.diag.message_detail or "")


def test_the_first_row_that_breaks_a_rule_is_named(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]]
) -> None:
    gid, nodes = chain
    batch = [node("answer", f"a{i}", [nodes[2]["id"]]) for i in range(4)]
    batch[1] = batch[1] | ROW_RULES["nodes_kind_check"]
    batch[2] = batch[2] | ROW_RULES["nodes_id_check"]
    err = refused(conn, lambda: insert(conn, gid, 4, batch))
    assert err.diag.constraint_name == "nodes_kind_check"
    assert f"sequence 5 of graph id {gid}" in (err.diag.message_detail or "")


def test_resource_version_must_link_to_the_head(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]]
) -> None:
    gid, nodes = chain
    v2 = node("resource", {"path": "src/a.ts", "v": 2}, [nodes[1]["id"]], "src/a.ts")
    err = refused(conn, lambda: insert(conn, gid, 4, [v2]))
    assert err.diag.sqlstate == "CW410"
    d = detail(err)
    assert d == {
        "graph": graph_name(conn, gid),
        "key": "src/a.ts",
        "node_id": v2["id"],
        "seq": 4,
        "linked_head": None,
        "current_head": nodes[2]["id"],
    }


def test_semantic_resource_key_must_match(conn: Conn, chain: tuple[int, Any]) -> None:
    gid, nodes = chain
    payload = {"type": "memory", "key": "config.port", "content": "8080"}
    for key in ("semantic:memory:other", "semantic:preference:config.port", None):
        n = node("semantic", payload, [nodes[1]["id"]], key)
        err = refused(conn, lambda: insert(conn, gid, 4, [n]))  # noqa: B023 (called at once)
        d = _violation(err, "semantic_payload")
        assert (d["node_id"], d["seq"], d["path"]) == (n["id"], 4, "$.payload")


def test_semantic_type_outside_a_fixed_vocabulary(conn: Conn) -> None:
    gid = new_graph(conn, ["memory", "preference"])
    system = node("system", "contract")
    insert(conn, gid, 1, [system])
    payload = {"type": "decision", "key": "db", "content": "PostgreSQL"}
    n = node("semantic", payload, [system["id"]], "semantic:decision:db")
    err = refused(conn, lambda: insert(conn, gid, 2, [n]))
    d = _violation(err, "semantic_type")
    assert (d["node_id"], d["seq"], d["path"]) == (n["id"], 2, "$.payload.type")
    # the same node is fine in a graph whose vocabulary has the type, or is dynamic
    for vocab in (["decision"], None):
        other = new_graph(conn, vocab)
        insert(conn, other, 1, [system, n])


@pytest.mark.parametrize("kind", ["goal", "system", "semantic", "inference"])
@pytest.mark.parametrize("parentless", [True, False])
def test_a_node_appended_alone_folds_as_the_rules_say(
    conn: Conn, chain: tuple[int, list[dict[str, Any]]], kind: str, parentless: bool
) -> None:
    """One node in a statement of its own (the trigger's single-node path) joins the
    frontier, replaces its parents or leaves the frontier alone as fold_frontier does,
    a parentless node of every kind included."""
    gid, nodes = chain
    parents = [] if parentless else [nodes[1]["id"]]
    if kind == "semantic":
        n = node(kind, {"type": "fact", "key": "k", "content": "c"}, parents, "semantic:fact:k")
    else:
        n = node(kind, "alone", parents)
    insert(conn, gid, 4, [n])
    seqs = {x["id"]: i + 1 for i, x in enumerate([*nodes, n])}
    got = conn.execute("SELECT frontier_seqs FROM cwstore.graphs WHERE graph_id = %s", (gid,))
    row = got.fetchone()
    assert row is not None
    assert sorted(row[0]) == sorted(seqs[h] for h in fold_frontier([*nodes, n]))


def test_a_declared_frontier_lists_each_head_once(conn: Conn, chain: tuple[int, Any]) -> None:
    """A declaration naming a head twice is refused (frontier_reference), with one head
    given twice or among others; distinct heads are taken, in their order."""
    gid, nodes = chain
    goal, res = nodes[1]["id"], nodes[2]["id"]
    declare = "INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads) VALUES (%s, 3, %s)"
    for heads in ([res, res], [res, goal, res]):
        err = refused(conn, lambda: conn.execute(declare, (gid, heads)))  # noqa: B023
        assert _violation(err, "frontier_reference")["path"] == "$.frontier", heads
    conn.execute(declare, (gid, [res, goal]))
    got = conn.execute("SELECT frontier_seqs FROM cwstore.graphs WHERE graph_id = %s", (gid,))
    assert got.fetchone() == ([3, 2],)


def test_unknown_graph(conn: Conn) -> None:
    missing = conn.execute("SELECT coalesce(max(graph_id), 0) + 1000 FROM cwstore.graphs")
    gid = int(missing.fetchone()[0])  # type: ignore[index]
    err = refused(conn, lambda: insert(conn, gid, 1, [node("system", "contract")]))
    assert err.diag.sqlstate == "CW404"
    assert detail(err) == {"graph_id": gid}


# --- a valid raw INSERT ------------------------------------------------------------------


def test_valid_raw_inserts_maintain_the_derived_tables(conn: Conn) -> None:
    gid = new_graph(conn)
    system = node("system", "contract")
    goal = node("goal", "write src/a.ts", [system["id"]])
    insert(conn, gid, 1, [system, goal])
    v1 = node("resource", {"path": "src/a.ts", "v": 1}, [goal["id"]], "src/a.ts")
    v2 = node("resource", {"path": "src/a.ts", "v": 2}, [goal["id"], v1["id"]], "src/a.ts")
    insert(conn, gid, 3, [v1])
    insert(conn, gid, 4, [v2])

    def rows(sql: str) -> list[tuple[Any, ...]]:
        return conn.execute(sql, (gid,)).fetchall()

    assert rows("SELECT length FROM cwstore.graphs WHERE graph_id = %s") == [(4,)]
    assert conn.execute(
        "SELECT seq, id, cwstore.payload_jsonb(payload_text), created_at = %s::timestamptz"
        " FROM cwstore.nodes"
        " WHERE graph_id = %s ORDER BY seq",
        (T, gid),
    ).fetchall() == [
        (1, system["id"], "contract", True),
        (2, goal["id"], "write src/a.ts", True),
        (3, v1["id"], {"path": "src/a.ts", "v": 1}, True),
        (4, v2["id"], {"path": "src/a.ts", "v": 2}, True),
    ]
    parents = sorted([(goal["id"], 2), (v1["id"], 3)])
    assert rows(
        "SELECT child_seq, position, parent_seq FROM cwstore.edges"
        " WHERE graph_id = %s ORDER BY 1, 2"
    ) == [(2, 0, 1), (3, 0, 2)] + [(4, i, s) for i, (_, s) in enumerate(parents)]
    # SPEC 4's fold: the parentless system node never joins; each node replaces its
    # parents. The current frontier at once; its history once asked for (it trails the
    # graph by fewer than cwstore.derive_lag() nodes).
    assert rows("SELECT frontier_seqs FROM cwstore.graphs WHERE graph_id = %s") == [([4],)]
    assert rows("SELECT count(*) FROM cwstore.frontier_spans WHERE graph_id = %s") == [(0,)]
    conn.execute("SELECT cwstore.derive_v1(name) FROM cwstore.graphs WHERE graph_id = %s", (gid,))
    assert rows(
        "SELECT head_seq, from_seq, to_seq FROM cwstore.frontier_spans"
        " WHERE graph_id = %s ORDER BY 1, 2"
    ) == [(4, 4, INF)]  # a chain's spans of one sequence, (2, 2, 3) and (3, 3, 4), unstored
    assert [
        rows(f"SELECT seq FROM cwstore._frontier_at(%s, {s}) ORDER BY position") for s in range(5)
    ] == [[], [], [(2,)], [(3,)], [(4,)]]
    assert rows(
        "SELECT key, version, node_seq, to_seq FROM cwstore.key_versions"
        " WHERE graph_id = %s ORDER BY version"
    ) == [("src/a.ts", 1, 3, 4)]  # closed versions only: the head is key_heads'
    assert rows(
        "SELECT key, head_seq, head_id, version, first_seq FROM cwstore.key_heads"
        " WHERE graph_id = %s"
    ) == [("src/a.ts", 4, v2["id"], 2, 3)]
