"""The SQL door: what a ``cwstore_writer`` role can do with raw SQL, and what it cannot.

The TypeScript runtime (through ``pg``) and psql write through the SQL functions
directly, with no Python in front of them, so the database itself must refuse what
``cwstore import`` refuses (SPEC sections 6 and 7), keep every graph's derived state
consistent, and show a role nothing of another tenant, not even a name.

Every call here is raw SQL sent by a real login role (``cwstore_writer``, tenant
``acme``), never through a cwstore client. The oracle is the pure validator
:func:`cwstore.validate`: a batch the door accepts must leave a graph that validates
and exports back unchanged; a batch it refuses must be one the validator refuses, with
one of the codes the validator reports, and must leave nothing behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from support.documents import GraphBuilder

import cwstore
from cwstore import _jsontext
from cwstore.document import validate
from cwstore.identity import compute_id


@dataclass
class Door:
    admin: str
    writer: str  # cwstore_writer, tenant acme
    other: str  # cwstore_writer, tenant globex
    reader: str  # cwstore_reader, tenant globex


@pytest.fixture(scope="module")
def door(db_dsn: str, login_role: Any) -> Door:
    return Door(
        db_dsn,
        login_role("cwstore_writer", "acme"),
        login_role("cwstore_writer", "globex"),
        login_role("cwstore_reader", "globex"),
    )


@pytest.fixture
def writer(door: Door) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(door.writer, autocommit=True) as conn:
        yield conn


def _one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    """The first column of the query's one row."""
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return row[0]


def graph_name() -> str:
    return f"door-{uuid.uuid4().hex}"


def append(
    conn: psycopg.Connection[Any],
    graph: str,
    nodes: str | list[Any],
    expected: int | None = None,
    frontier: list[str] | None = None,
) -> list[tuple[Any, ...]]:
    """append_v1 with the batch as JSON text exactly as given (a list is dumped)."""
    text = nodes if isinstance(nodes, str) else _jsontext.dumps(nodes)
    return conn.execute(
        "SELECT * FROM cwstore.append_v1(%s, %s::json, %s, %s::json)",
        (graph, text, expected, None if frontier is None else json.dumps(frontier)),
    ).fetchall()


def stored(admin: str, graph: str) -> tuple[int, int, str | None]:
    """(graphs.length, node rows, export text) of a graph, read by the superuser."""
    with psycopg.connect(admin, autocommit=True) as c:
        row = c.execute(
            "SELECT g.length, (SELECT count(*) FROM cwstore.nodes n WHERE n.graph_id = g.graph_id)"
            " FROM cwstore.graphs g WHERE g.name = %s",
            (graph,),
        ).fetchone()
        if row is None:
            return (0, 0, None)
        nodes = c.execute("SELECT nodes FROM cwstore.export_v1(%s)", (graph,)).fetchone()
    return (int(row[0]), int(row[1]), None if nodes is None else nodes[0])


def refusal(exc: psycopg.Error) -> dict[str, Any]:
    diag = exc.diag
    assert diag.sqlstate == "CW400", (diag.sqlstate, diag.message_primary)
    detail = json.loads(diag.message_detail or "{}")
    assert isinstance(detail, dict)
    return detail


def oracle_codes(prefix: list[dict[str, Any]], batch_text: str) -> set[str]:
    """The codes cwstore.validate reports for the graph the batch would leave."""
    batch = _jsontext.loads(batch_text)
    nodes = [*prefix]
    for i, node in enumerate(batch):
        if isinstance(node, dict):
            node["sequence"] = len(prefix) + i + 1  # in place: keeps DuplicateKeysDict
        nodes.append(node)
    return {v.code for v in validate({"version": 1, "nodes": nodes, "frontier": []})}


def node_text(node: dict[str, Any], **replace: str) -> str:
    """A node's JSON text with some members' text replaced verbatim."""
    parts = []
    for key in ("id", "kind", "parents", "payload", "createdAt", "resourceKey"):
        if key in replace:
            parts.append(f'"{key}":{replace[key]}')
        elif key in node:
            parts.append(f'"{key}":{_jsontext.dumps(node[key])}')
    return "{" + ",".join(parts) + "}"


def resealed(node: dict[str, Any], payload: Any) -> dict[str, Any]:
    out = dict(node)
    out["payload"] = payload
    out["id"] = compute_id(out["kind"], out["parents"], payload, out.get("resourceKey"))
    return out


# -- import_rows_v1 ------------------------------------------------------------------


def import_rows(
    conn: psycopg.Connection[Any], gid: int, rows: list[tuple[int, str, str, str, str, str, Any]]
) -> Any:
    seqs, ids, kinds, parents, payloads, created, keys = (list(c) for c in zip(*rows, strict=True))
    return conn.execute(
        "SELECT cwstore.import_rows_v1(%s, %s, %s, %s, %s, %s, %s, %s)",
        (gid, seqs, ids, kinds, parents, payloads, created, keys),
    ).fetchone()


def test_import_rows_only_inside_an_import_of_an_empty_graph(door: Door, writer: Any) -> None:
    """Outside begin_import_v1, or into a graph that holds nodes, import_rows_v1 is
    refused: it would let a writer number nodes itself, past append_v1's rules."""
    g = graph_name()
    b = GraphBuilder()
    b.system("contract")
    b.goal("one")
    append(writer, g, b.nodes)
    gid = _one(writer, "SELECT cwstore.ensure_graph_v1(%s)", g)
    extra = GraphBuilder()
    extra.system("other")
    n = extra.nodes[0]
    row = (3, n["id"], n["kind"], "{}", _jsontext.dumps(n["payload"]), n["createdAt"], None)
    with pytest.raises(psycopg.Error) as exc:
        import_rows(writer, gid, [row])
    assert exc.value.diag.sqlstate == "CW412"
    # Not even in a transaction that began an import of another graph.
    g2 = graph_name()
    with writer.transaction():
        writer.execute("SELECT cwstore.begin_import_v1(%s)", (g2,))
        with pytest.raises(psycopg.Error) as exc, writer.transaction():
            import_rows(writer, gid, [row])
        assert exc.value.diag.sqlstate == "CW412"
    assert stored(door.admin, g)[:2] == (2, 2)


def test_import_rows_payloads_are_checked_as_json(door: Door, writer: Any) -> None:
    """A payload is JSON text, checked as such: text pasted into it cannot add a node
    to what export lists."""
    b = GraphBuilder()
    b.system("contract")
    b.goal("one")
    n0, n1 = b.nodes
    forged = _jsontext.dumps(n0["payload"]) + "},{" + node_text(n1)[1:-1] + ',"sequence":2'
    cases = {
        "pasted node": forged,
        "not JSON": "{oops",
        "two values": "1 2",
        "NaN": "NaN",
        "1e400": "1e400",
        "duplicate member": '{"a":1,"a":2}',
    }
    for name, payload in cases.items():
        g = graph_name()
        with pytest.raises(psycopg.Error) as exc, writer.transaction():
            gid = writer.execute("SELECT cwstore.begin_import_v1(%s)", (g,)).fetchone()[0]
            import_rows(
                writer, gid, [(1, n0["id"], "system", "{}", payload, n0["createdAt"], None)]
            )
        detail = refusal(exc.value)
        assert detail["code"] in ("shape", "unrepresentable"), name
        assert detail["path"].startswith("$.payload") or detail["path"].startswith("$[0].payload")
        length, rows, _ = stored(door.admin, g)
        assert (length, rows) == (0, 0), name


# -- append_v1 accepts what import accepts ---------------------------------------------


def _bad_batches() -> Iterator[tuple[str, list[dict[str, Any]], str]]:
    """(name, graph before, batch text) that cwstore import refuses."""
    b = GraphBuilder()
    b.system("contract")
    goal = b.goal("one")
    base = [b.nodes[0]]
    for stamp in (
        "2026-12-02T08:43:04.123+99:99",
        "2026-12-02T24:00:00Z",
        "2026-12-02T08:43:60Z",
        "2026-02-30T08:43:04Z",
        "2026-12-02T08:60:04Z",
        "2026-12-02T08:43:04+24:00",
    ):
        yield f"createdAt {stamp}", base, "[" + node_text(goal, createdAt=json.dumps(stamp)) + "]"
    yield "payload 1e400", base, "[" + node_text(goal, payload='{"n":1e400}') + "]"
    yield "payload -1e400", base, "[" + node_text(goal, payload="-1e400") + "]"
    yield "payload 2**53+1", base, "[" + node_text(goal, payload="9007199254740993") + "]"
    yield "payload NaN", base, "[" + node_text(goal, payload="NaN") + "]"
    dup = '{"text":"a","text":"b"}'
    yield "duplicate payload member", base, "[" + node_text(goal, payload=dup) + "]"
    nested_dup = '{"x":[{"k":1,"k":1}]}'
    yield "duplicate nested member", base, "[" + node_text(goal, payload=nested_dup) + "]"
    twice = node_text(goal)[:-1] + ',"kind":"goal"}'
    yield "duplicate node member", base, "[" + twice + "]"
    lone = '"\\ud800"'
    yield "lone surrogate", base, "[" + node_text(goal, payload=lone) + "]"
    hexes = "0123456789abcdef" * 2
    for bad_id in (
        "cw_" + hexes[:23] + "A",
        "cw_" + hexes[:23],
        "cw_" + hexes[:25],
        "cx_" + hexes[:24],
        "cw-" + hexes[:24],
        "cw_" + hexes[:23] + "g",
        "cw_" + hexes[:23] + "é",
        "ccw_" + hexes[:23],
    ):
        yield f"id {bad_id}", base, "[" + node_text(goal, id=json.dumps(bad_id)) + "]"
    sem = GraphBuilder()
    sem.system("contract")
    node = sem.semantic("memory", "ok-key", "x")
    for key in ("Upper", "has space", "x" * 121, ""):
        payload = {"type": "memory", "key": key, "content": "x"}
        bad = resealed({**node, "resourceKey": f"semantic:memory:{key}"}, payload)
        yield f"semantic key {key[:10]!r}", [sem.nodes[0]], _jsontext.dumps([bad])
    big = {"type": "memory", "key": "big", "content": "x" * 100_000}
    bad = resealed({**node, "resourceKey": "semantic:memory:big"}, big)
    yield "semantic content 100,002 chars", [sem.nodes[0]], _jsontext.dumps([bad])
    emoji = {"type": "memory", "key": "emoji", "content": "\U0001f600" * 50_000}
    bad = resealed({**node, "resourceKey": "semantic:memory:emoji"}, emoji)
    yield "semantic content of emoji (UTF-16)", [sem.nodes[0]], _jsontext.dumps([bad])


NOT_JSON = {"payload NaN"}


@pytest.mark.parametrize("name", [c[0] for c in _bad_batches()])
def test_append_refuses_what_import_refuses(door: Door, writer: Any, name: str) -> None:
    _, before, batch = next(c for c in _bad_batches() if c[0] == name)
    expected = oracle_codes(before, batch)
    assert expected, f"the oracle accepts {name}: the test is wrong"
    g = graph_name()
    append(writer, g, before)
    with pytest.raises(psycopg.Error) as exc:
        append(writer, g, batch)
    if name in NOT_JSON:
        # PostgreSQL refuses the batch as json input, before append_v1 runs.
        assert exc.value.diag.sqlstate == "22P02"
        assert stored(door.admin, g)[:2] == (len(before), len(before))
        return
    detail = refusal(exc.value)
    assert detail["code"] in expected, (name, detail, expected)
    length, rows, _ = stored(door.admin, g)
    assert (length, rows) == (len(before), len(before))


def test_append_accepts_what_the_runtime_writes(door: Door, writer: Any) -> None:
    """The limits are the runtime's, not tighter: offsets up to 23:59, 100,000
    characters of semantic content, numbers JavaScript writes, the six characters
    \\u0000 and U+0000 itself."""
    sem = GraphBuilder()
    sem.system("contract")
    node = sem.semantic("memory", "ok-key", "x")
    goal = sem.goal("g")
    ok = {"type": "memory", "key": "k.v/1:2_-", "content": "x" * 99_998}
    numbers = {"n": [1e21, 1e-7, 5e-324, 9007199254740991, -0.5, 1e20], "z": "\u0000 \\u0000"}
    good = [
        resealed({**node, "resourceKey": "semantic:memory:k.v/1:2_-"}, ok),
        resealed(goal, numbers),
    ]
    good[1]["createdAt"] = "2026-12-02T08:43:04.123456789-23:59"
    g = graph_name()
    append(writer, g, [sem.nodes[0]])
    append(writer, g, good)
    length, rows, text = stored(door.admin, g)
    assert (length, rows) == (3, 3)
    assert text is not None
    exported = _jsontext.loads(text)
    assert validate({"version": 1, "nodes": exported, "frontier": []}) == []
    assert [n["payload"] for n in exported[1:]] == [n["payload"] for n in good]


def test_a_batch_cannot_reuse_an_id_with_other_content(door: Door, writer: Any) -> None:
    """[A, B] where B carries A's id with other content is refused, and so is B alone
    once A is stored: the database never keeps A while telling the writer it kept B."""
    b = GraphBuilder()
    b.system("contract")
    a = b.goal("A")
    other = dict(a, payload="B")  # A's id, other content
    g = graph_name()
    append(writer, g, [b.nodes[0]])
    with pytest.raises(psycopg.Error) as exc:
        append(writer, g, [a, other])
    assert refusal(exc.value)["code"] in ("duplicate_id", "identity")
    assert stored(door.admin, g)[:2] == (1, 1)
    append(writer, g, [a])
    with pytest.raises(psycopg.Error) as exc:
        append(writer, g, [other])
    assert refusal(exc.value)["code"] in ("duplicate_id", "identity")
    # The same content again is a retry: accepted, nothing written.
    rows = append(writer, g, [a])
    assert [r[4] for r in rows] == [False]
    assert stored(door.admin, g)[:2] == (2, 2)


@pytest.mark.parametrize(
    ("size", "first", "again"), [(2, 0, 1), (3, 0, 1), (3, 0, 2), (3, 1, 2), (4, 1, 3)]
)
def test_a_batch_of_few_nodes_is_searched_for_a_repeated_id(
    door: Door, writer: Any, size: int, first: int, again: int
) -> None:
    """In a batch of two, three or four nodes, whichever two carry one id, with other
    content the later one is refused (duplicate_id, its path) and nothing is written;
    with the same content the node is written once."""
    b = GraphBuilder()
    system = b.system("contract")
    batch = [b.goal(f"task {i}", parents=[system["id"]]) for i in range(size)]

    def given(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [*batch[:again], node, *batch[again + 1 :]]

    g = graph_name()
    append(writer, g, [system])
    with pytest.raises(psycopg.Error) as exc:
        append(writer, g, given(dict(batch[first], payload="other")))
    detail = refusal(exc.value)
    assert (detail["code"], detail["path"]) == ("duplicate_id", f"$[{again}].id")
    assert stored(door.admin, g)[:2] == (1, 1)
    rows = append(writer, g, given(batch[first]))
    assert [r[1] for r in rows] == [n["id"] for n in given(batch[first])]
    assert stored(door.admin, g)[:2] == (size, size)


def test_a_retry_that_writes_nothing_keeps_the_newer_frontier(door: Door, writer: Any) -> None:
    b = GraphBuilder()
    b.system("contract")
    a = b.goal("A")
    g = graph_name()
    append(writer, g, [b.nodes[0], a], frontier=[a["id"]])
    c = b.inference("C", parents=[a["id"]])
    append(writer, g, [c], frontier=[c["id"]])
    rows = append(writer, g, [b.nodes[0], a], frontier=[a["id"]])  # the first call, again
    assert [r[4] for r in rows] == [False, False]
    with psycopg.connect(door.admin, autocommit=True) as c_:
        row = c_.execute("SELECT frontier FROM cwstore.export_v1(%s)", (g,)).fetchone()
    assert row is not None
    (frontier,) = row
    assert frontier == [c["id"]]


@pytest.mark.parametrize(
    ("frontier", "code"),
    [
        ('{"head":"x"}', "shape"),
        ('"cw_000000000000000000000001"', "shape"),
        ("[1]", "shape"),
        ('["ID", null]', "shape"),
        ('["ID", ["ID"]]', "shape"),
        ('["\\ud800"]', "unrepresentable"),
    ],
)
def test_a_declared_frontier_that_is_not_a_list_of_ids_is_refused(
    door: Door, writer: Any, frontier: str, code: str
) -> None:
    """append_v1's frontier must be a JSON array of strings (CW400 at $.frontier, the
    batch not written); an empty array and ids with escapes are taken as given."""
    b = GraphBuilder()
    system = b.system("contract")
    g = graph_name()
    with pytest.raises(psycopg.Error) as exc:
        writer.execute(
            "SELECT * FROM cwstore.append_v1(%s, %s::json, NULL, %s::json)",
            (g, _jsontext.dumps([system]), frontier.replace("ID", system["id"])),
        )
    detail = refusal(exc.value)
    assert (detail["code"], detail["path"]) == (code, "$.frontier")
    assert stored(door.admin, g)[:2] == (0, 0)
    escaped = json.dumps([system["id"]]).replace("cw_", "\\u0063w_")
    rows = writer.execute(
        "SELECT * FROM cwstore.append_v1(%s, %s::json, NULL, %s::json)",
        (g, _jsontext.dumps([system]), escaped),
    ).fetchall()
    assert [r[1] for r in rows] == [system["id"]]
    with psycopg.connect(door.admin, autocommit=True) as c:
        row = c.execute("SELECT frontier FROM cwstore.export_v1(%s)", (g,)).fetchone()
    assert row is not None and row[0] == [system["id"]]


def test_declare_frontier_waits_for_the_graph_lock(door: Door, writer: Any) -> None:
    """declare_frontier_v1 takes the graph's lock: racing an uncommitted append, it
    waits, then declares at the new length; the stored frontier is the declared one.

    The wait is seen in pg_blocking_pids on one server; on Citus it happens between
    worker backends, and is seen in citus_lock_waits by the sessions' global pids."""
    b = GraphBuilder()
    b.system("contract")
    a = b.goal("A")
    g = graph_name()
    append(writer, g, [b.nodes[0], a])
    gid = _one(writer, "SELECT cwstore.ensure_graph_v1(%s)", g)
    citus = bool(_one(writer, "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"))
    c = b.inference("C", parents=[a["id"]])
    errors: list[BaseException] = []
    waiter: list[int] = []
    with psycopg.connect(door.writer) as t1:
        append(t1, g, [c])  # uncommitted: holds the graph row
        pid = t1.info.backend_pid
        blocker = _one(t1, "SELECT citus_backend_gpid()") if citus else pid

        def declare() -> None:
            try:
                with psycopg.connect(door.writer, autocommit=True) as t2:
                    t2.execute(
                        "SELECT set_config('application_name', %s, false)", (f"declare-{pid}",)
                    )
                    if citus:
                        waiter.append(_one(t2, "SELECT citus_backend_gpid()"))
                    t2.execute("SELECT cwstore.declare_frontier_v1(%s, %s)", (gid, [a["id"]]))
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=declare)
        th.start()
        with psycopg.connect(door.admin, autocommit=True) as adm:
            deadline = time.monotonic() + 10
            waiting = False
            while time.monotonic() < deadline and th.is_alive() and not waiting:
                if citus:
                    waiting = bool(waiter) and bool(
                        _one(
                            adm,
                            "SELECT count(*) FROM citus_lock_waits"
                            " WHERE waiting_gpid = %s AND blocking_gpid = %s",
                            waiter[0],
                            blocker,
                        )
                    )
                else:
                    waiting = bool(
                        _one(
                            adm,
                            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                            " AND %s = ANY (pg_blocking_pids(pid))",
                            f"declare-{pid}",
                            pid,
                        )
                    )
                time.sleep(0.02)
        t1.commit()
        th.join(10)
    assert not errors, errors
    assert waiting, "declare_frontier_v1 did not wait for the uncommitted append"
    with psycopg.connect(door.admin, autocommit=True) as adm:
        row = adm.execute("SELECT length, frontier FROM cwstore.export_v1(%s)", (g,)).fetchone()
        assert row == (3, [a["id"]])
        decl = adm.execute(
            "SELECT seq FROM cwstore.frontier_declarations WHERE graph_id = %s", (gid,)
        ).fetchall()
        assert decl == [(3,)]


def test_a_resource_key_has_a_documented_length_limit(door: Door, writer: Any) -> None:
    limit = cwstore.document.RESOURCE_KEY_MAX_BYTES
    b = GraphBuilder()
    b.system("contract")
    ok = b.resource("src/" + "a" * (limit - 4), {"v": 1})
    g = graph_name()
    append(writer, g, b.nodes)
    assert stored(door.admin, g)[:2] == (2, 2)
    b2 = GraphBuilder()
    b2.system("contract")
    key = "src/" + "é" * 1500  # 3,004 bytes of UTF-8: a plausible path
    too_long = b2.resource(key, {"v": 1})
    assert ok["resourceKey"] != too_long["resourceKey"]
    assert {v.code for v in validate(b2.state())} == {"shape"}
    g2 = graph_name()
    with pytest.raises(psycopg.Error) as exc:
        append(writer, g2, b2.nodes)
    detail = refusal(exc.value)
    assert (detail["code"], detail["path"]) == ("shape", "$[1].resourceKey")
    assert str(limit) in (exc.value.diag.message_primary or "")


# -- tenants: nothing of another tenant, not even a name ----------------------------------


def _error(dsn: str, stmt: str, *args: Any) -> tuple[str | None, ...]:
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as exc:
        conn.execute(stmt, args)
    d = exc.value.diag
    return (d.sqlstate, d.message_primary, d.message_detail, d.message_hint, d.context)


def test_another_tenants_graph_reads_exactly_as_unknown(door: Door, writer: Any) -> None:
    g = graph_name()
    b = GraphBuilder()
    b.system("contract secret")
    append(writer, g, b.nodes)
    gid = _one(writer, "SELECT cwstore.ensure_graph_v1(%s)", g)
    with psycopg.connect(door.admin, autocommit=True) as adm:
        missing = _one(adm, "SELECT max(graph_id) + 1000 FROM cwstore.graphs")
    by_id = [
        "SELECT cwstore.declare_frontier_v1(%s, '{}')",
        "SELECT cwstore.import_rows_v1(%s, '{1}', '{cw_000000000000000000000000}', '{goal}',"
        " '{\"{}\"}', '{\"1\"}', '{2026-01-01T00:00:00Z}', '{NULL}')",
    ]
    for stmt in by_id:
        theirs = _error(door.other, stmt, gid)
        nobody = _error(door.other, stmt, missing)
        assert theirs == tuple(x.replace(str(missing), str(gid)) if x else x for x in nobody), stmt
        assert not any(g in (x or "") for x in theirs), stmt
    missing_name = graph_name()
    for stmt in (
        "SELECT cwstore.projection_v2(%s)",
        "SELECT * FROM cwstore.export_v1(%s)",
        "SELECT * FROM cwstore.frontier_at(%s, 1)",
    ):
        theirs = _error(door.reader, stmt, g)
        nobody = _error(door.reader, stmt, missing_name)
        assert theirs == tuple(x.replace(missing_name, g) if x else x for x in nobody), stmt


def test_a_wrong_hash_id_is_stored_and_a_reader_finds_it(door: Door, writer: Any) -> None:
    """What the database does not check: that an id is the hash of its content (SPEC
    section 2's ICU key order and number forms cost 250 us a node in SQL and cannot
    recurse past ~1,500 levels; docs/reliability.md). A writer can store such a node in
    its own tenant's graphs; export then fails the runtime's and cwstore's identity
    check, and ``cwstore export | cwstore validate -`` names the node."""

    b = GraphBuilder()
    b.system("contract")
    goal = b.goal("honest")
    lie = dict(goal, payload="tampered")  # the id of "honest", the content "tampered"
    g = graph_name()
    append(writer, g, [b.nodes[0], lie])
    _, _, nodes = stored(door.admin, g)
    assert nodes is not None
    run = subprocess.run(
        [sys.executable, "-m", "cwstore", "export", "--dsn", door.admin, "--graph", g],
        capture_output=True,
        check=True,
    )
    check = subprocess.run(
        [sys.executable, "-m", "cwstore", "validate", "-"],
        input=run.stdout,
        capture_output=True,
        check=False,
    )
    assert check.returncode == 1
    err = check.stderr.decode()
    assert f"identity\tnode=1\tid={goal['id']}" in err, err


def test_import_rows_accepts_what_the_runtime_writes(door: Door, writer: Any) -> None:
    """A slice mixing U+0000, the six characters \\u0000, escaped backslashes and quotes
    imports through import_rows_v1 and exports byte for byte."""
    b = GraphBuilder()
    b.system("contract")
    b.goal({"nul": "a\u0000b"})
    b.inference({"text": 'back\\slash \\u0000 "quoted"'})
    b.inference(["\\", "\u0000", 1e-7, 1e21])
    g = graph_name()
    with writer.transaction():
        gid = writer.execute("SELECT cwstore.begin_import_v1(%s)", (g,)).fetchone()[0]
        rows = [
            (
                n["sequence"],
                n["id"],
                n["kind"],
                "{" + ",".join(n["parents"]) + "}",
                _jsontext.dumps(n["payload"]),
                n["createdAt"],
                n.get("resourceKey"),
            )
            for n in b.nodes
        ]
        assert import_rows(writer, gid, rows) == (len(rows),)
    length, count, text = stored(door.admin, g)
    assert (length, count) == (4, 4)
    assert text == _jsontext.dumps(b.nodes)


def test_a_stale_append_is_refused_before_its_batch_is_read(door: Door, writer: Any) -> None:
    """A stale expected_length is a conflict (CW409) found by a lookup, before the batch
    is validated or written: even a batch its checks would refuse, and a graph that does
    not exist yet is not created. A retry of nodes the graph holds is still no conflict."""
    b = GraphBuilder()
    b.system("contract")
    a = b.goal("A")
    g = graph_name()
    append(writer, g, [b.nodes[0], a])
    bad = {**b.inference("C", parents=[a["id"]]), "kind": "nonsense"}
    with pytest.raises(psycopg.Error) as stale:
        writer.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, 1)",
            (g, _jsontext.dumps([bad])),
        )
    assert stale.value.sqlstate == "CW409"
    fresh = graph_name()
    with pytest.raises(psycopg.Error) as missing:
        writer.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, 3)",
            (fresh, _jsontext.dumps([b.nodes[0]])),
        )
    assert missing.value.sqlstate == "CW409"
    assert _one(writer, "SELECT count(*) FROM cwstore.graphs WHERE name = %s", fresh) == 0
    rows = writer.execute(
        "SELECT seq, written FROM cwstore.append_v1(%s, %s::json, 0)",
        (g, _jsontext.dumps([b.nodes[0], a])),
    ).fetchall()
    assert rows == [(1, False), (2, False)]
