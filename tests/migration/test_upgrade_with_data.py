"""A database of the previous release, with graphs in it, takes the migrations after it.

Graphs are written at ``0001_baseline`` through that release's own SQL door
(``append_v1`` with four arguments, ``declare_frontier_v1``), their reads recorded at
every sequence, and the database is migrated. Every read must answer as before, and
the rows the migrations derive (graph keys, lives, the current frontier and its
watermark, edges, key versions and heads, kind counts) must be those a database made
from ``schema/`` holds for the same writes. Then both go on appending and still agree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support.documents import generate_session
from support.graph_keys import COLLIDING, graph_key
from support.nodes import node
from support.tenants import tenant_roles

import cwstore
from cwstore import _jsontext
from cwstore._sql import migrations
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

# graph name -> (document, nodes written before the migration), in the order the graphs
# are made: cut where the frontier holds two heads, and once after the last node; two
# names whose keys collide (the second takes a detour).
GRAPHS: dict[str, tuple[dict[str, Any], int]] = {
    "branching session": (generate_session(3, 6, keys=4, semantic_keys=3), 45),
    "odd payloads": (generate_session(11, 4, odd_payloads=True), 23),
    "written whole before": (generate_session(5, 3, branches=False), 10_000),
    COLLIDING[0]: (generate_session(13, 1), 5),
    COLLIDING[1]: (generate_session(17, 1), 5),
}
BATCH = 7
# The rows derived from nodes, compared whole between the two databases.
DERIVED = {
    "edges": "SELECT graph_id, child_seq, position, parent_seq FROM cwstore.edges ORDER BY 1, 2, 3",
    "key_versions": "SELECT graph_id, key, version, node_seq, to_seq FROM cwstore.key_versions"
    " ORDER BY 1, 2, 3",
    "key_heads": "SELECT * FROM cwstore.key_heads ORDER BY graph_id, key",
    "kind_counts": "SELECT * FROM cwstore.kind_counts ORDER BY 1, 2, 3",
    "frontier_spans": "SELECT graph_id, head_seq, from_seq, ord, to_seq FROM cwstore.frontier_spans"
    " ORDER BY 1, 3, 4",
    "graph_key_detours": "SELECT * FROM cwstore.graph_key_detours ORDER BY 1, 2",
    "graphs": "SELECT graph_id, name, tenant, vocabulary, length, key_probe, frontier_seqs"
    " FROM cwstore.graphs ORDER BY graph_id",
}


def _append(conn: psycopg.Connection[Any], graph: str, nodes: list[dict[str, Any]]) -> None:
    """``nodes`` appended BATCH at a time, each batch expecting the length before it."""
    (length,) = conn.execute(
        "SELECT length FROM cwstore.graphs WHERE name = %s", (graph,)
    ).fetchone() or (0,)
    for i in range(0, len(nodes), BATCH):
        batch = [{k: v for k, v in n.items() if k != "sequence"} for n in nodes[i : i + BATCH]]
        conn.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, %s)",
            (graph, _jsontext.dumps(batch), length + i),
        )


def _write(conn: psycopg.Connection[Any], *, baseline: bool) -> None:
    """Every graph of GRAPHS made, in order, and its nodes up to its cut appended. At the
    baseline, whose graph_id is an identity, the second graph is numbered with the key
    of the first, which the first takes in the migration: it has to wait."""
    for i, (graph, (doc, before)) in enumerate(GRAPHS.items()):
        if baseline and i == 1:
            conn.execute(
                sql.SQL("ALTER TABLE cwstore.graphs ALTER COLUMN graph_id RESTART WITH {}").format(
                    sql.Literal(graph_key(next(iter(GRAPHS))))
                )
            )
        conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (graph,))
        _append(conn, graph, doc["nodes"][:before])
    conn.execute("SELECT cwstore.ensure_graph_v1('never written')")


def _reads(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    """Every graph's export and projection as of each of its sequences."""
    out: dict[str, list[Any]] = {}
    for graph, length in conn.execute(
        "SELECT name, length FROM cwstore.graphs ORDER BY name"
    ).fetchall():
        out[graph] = [
            conn.execute(
                "SELECT (SELECT row(e.*)::text FROM cwstore.export_v1(%(g)s, %(s)s) e),"
                " cwstore.projection_v1(%(g)s, %(s)s)",
                {"g": graph, "s": s},
            ).fetchone()
            for s in range(length + 1)
        ]
    return out


def _derived(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    return {name: conn.execute(query).fetchall() for name, query in DERIVED.items()}


@pytest.fixture(scope="module")
def upgraded(new_database: Callable[[], str]) -> tuple[str, str, dict[str, list[Any]]]:
    """(migrated from 0001 with graphs in it, made from schema/ with the same writes,
    the reads recorded at 0001)."""
    files = migrations()
    old, new = new_database(), new_database()
    with psycopg.connect(old, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn), files[:1])
        _write(conn, baseline=True)
        assert conn.execute(
            "SELECT graph_id FROM cwstore.graphs WHERE name = %s", (list(GRAPHS)[1],)
        ).fetchone() == (graph_key(next(iter(GRAPHS))),)
        before = _reads(conn)
        apply_migrations_sync(PsycopgConnection(conn))
    with psycopg.connect(new, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn))
        _write(conn, baseline=False)
    return old, new, before


def test_the_previous_release_is_where_it_starts() -> None:
    assert migrations()[0].filename == "0001_baseline.sql"
    assert len(migrations()) > 1


def test_every_read_answers_as_before(upgraded: tuple[str, str, dict[str, list[Any]]]) -> None:
    old, new, before = upgraded
    with psycopg.connect(old) as a, psycopg.connect(new) as b:
        after, fresh = _reads(a), _reads(b)
    assert sum(len(v) for v in before.values()) > 80
    assert after == before
    assert fresh == before


def test_the_derived_rows_are_those_of_a_new_database(
    upgraded: tuple[str, str, dict[str, list[Any]]],
) -> None:
    old, new, _ = upgraded
    with psycopg.connect(old) as a, psycopg.connect(new) as b:
        # The migration derived every graph's history to its length (below); the new
        # database's trails its appends: derived there too.
        b.execute("SELECT cwstore.derive_v1(name) FROM cwstore.graphs")
        migrated, fresh = _derived(a), _derived(b)
        lives = a.execute(
            "SELECT bool_and(graph_id = cwstore.graph_key(name, key_probe)"
            " AND incarnation = graph_id"
            " AND derived_length = length),"
            " bool_and(written_at = coalesce((SELECT n.recorded_at FROM cwstore.nodes n"
            "   WHERE n.graph_id = g.graph_id AND n.seq = g.length), g.created_at))"
            " FROM cwstore.graphs g"
        ).fetchone()
        probes = a.execute(
            "SELECT name, key_probe FROM cwstore.graphs WHERE key_probe > 0"
        ).fetchall()
    assert all(migrated[name] for name in DERIVED), "every kind of derived row is compared"
    assert migrated == fresh
    assert lives == (True, True)
    assert probes == [(COLLIDING[1], 1)]


def test_both_go_on_appending_and_agree(
    upgraded: tuple[str, str, dict[str, list[Any]]],
) -> None:
    old, new, _ = upgraded
    for dsn in (old, new):
        with psycopg.connect(dsn, autocommit=True) as conn:
            for graph, (doc, before) in GRAPHS.items():
                _append(conn, graph, doc["nodes"][before:])
    with psycopg.connect(old) as a, psycopg.connect(new) as b:
        assert _reads(a) == _reads(b)
        # The counts by kind are written per block the watermark passes, and the two
        # watermarks moved at different appends: compared with both at the length.
        for conn in (a, b):
            conn.execute("SELECT cwstore.derive_v1(name) FROM cwstore.graphs")
        assert _derived(a) == _derived(b)
        for graph, (doc, _) in GRAPHS.items():
            (text,) = a.execute("SELECT nodes FROM cwstore.export_v1(%s)", (graph,)).fetchone() or (
                None,
            )
            assert text is not None
            assert [n["id"] for n in json.loads(text)] == [n["id"] for n in doc["nodes"]]
            (frontier,) = a.execute(
                "SELECT frontier FROM cwstore.export_v1(%s)", (graph,)
            ).fetchone() or (None,)
            assert frontier == doc["frontier"]


def test_roles_keep_their_tenants(empty_db_dsn: str) -> None:
    """Roles set up at the baseline keep their grants and their tenants: after the
    migration a writer appends to its tenant's graph and is refused another's, a reader
    reads its tenant's rows only, and an admin erases (new since the baseline) its
    tenant's graphs only."""
    dsn = empty_db_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn), migrations()[:1])
    with tenant_roles(dsn) as made:
        first = {g: node("goal", g) for g in ("a-graph", "b-graph")}
        for who, graph in (("writer_a", "a-graph"), ("writer_b", "b-graph")):
            with psycopg.connect(getattr(made, who), autocommit=True) as conn:
                conn.execute(
                    "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                    (graph, _jsontext.dumps([first[graph]])),
                )
        with psycopg.connect(dsn, autocommit=True) as conn:
            apply_migrations_sync(PsycopgConnection(conn))
            # Functions are executable by PUBLIC unless revoked: every one the migration
            # made has its grants (cwstore.apply_grants), none is left to PUBLIC.
            to_public = conn.execute(
                "SELECT count(*) FROM pg_proc p"
                " WHERE p.pronamespace = 'cwstore'::regnamespace AND (p.proacl IS NULL"
                " OR aclcontains(p.proacl, makeaclitem(0, p.proowner, 'EXECUTE', false)))"
            ).fetchone()
            reader_may = conn.execute(
                "SELECT has_function_privilege(%s,"
                " 'cwstore.append_v1(text, json, bigint, json, bigint)', 'EXECUTE'),"
                " has_function_privilege(%s, 'cwstore.erase_graph_v1(text, text)', 'EXECUTE')",
                (made.names["reader_a"], made.names["admin_a"]),
            ).fetchone()
        assert to_public == (0,)
        assert reader_may == (False, True)
        with cwstore.connect_sync(made.writer_a, min_size=1, max_size=1) as store:
            two = node("answer", "two", [first["a-graph"]["id"]])
            assert [n.sequence for n in store.append("a-graph", [two])] == [2]
            with pytest.raises(cwstore.PermissionDeniedError):
                store.append("b-graph", [node("answer", "over it", [first["b-graph"]["id"]])])
        with psycopg.connect(made.reader_a) as conn:
            seen = conn.execute(
                "SELECT g.name, count(*) FROM cwstore.nodes n JOIN cwstore.graphs g"
                " USING (graph_id) GROUP BY g.name"
            ).fetchall()
        assert seen == [("a-graph", 2)]
        with psycopg.connect(made.admin_a, autocommit=True) as conn:
            with pytest.raises(psycopg.Error):
                conn.execute("SELECT cwstore.erase_graph_v1('b-graph', 'not mine')")
            erased = conn.execute("SELECT cwstore.erase_graph_v1('a-graph', 'test')").fetchone()
        assert erased == (2,)
