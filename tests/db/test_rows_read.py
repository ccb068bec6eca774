"""A call reads the node rows it needs, not the graph's: an append the rows its batch
names, a read as of s a node per head, key version or step it returns. Its cost must not
grow with the graph whatever plan PostgreSQL keeps for its statements: plpgsql keeps
them for the session, append_v1 plans them generically, and a plan made while the table
was small (a new database) is kept as the graph grows.

Counted, not timed: the rows of ``cwstore.nodes`` the call's transaction read
(``pg_stat_get_xact_tuples_returned`` and ``..._fetched``), in a database created and
migrated by the test (the tests' template's clones planned the index anyway), the
session's plans made on a short graph first. The plans these tests found read every
node of the graph: a hash join of the batch's ids in ``_refuse_changed``, a scan for the
ids in ``_refuse_stale`` (a stale expected length), and a hash join of the heads, steps
or versions with the graph's nodes in heads_at, semantic_at, projection_v1 and
descendants, and of every graph with the nodes of all in idle_graphs_v1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.documents import generate_session
from support.reliability import batch_of, chain, document

import cwstore
from cwstore._store_base import prepare_batch

LONG = 3000
FEW = 50
"""Node rows a call may read here: a handful of heads, versions or steps."""

_READ = (
    "SELECT pg_stat_get_xact_tuples_returned('cwstore.nodes'::regclass)"
    " + pg_stat_get_xact_tuples_fetched('cwstore.nodes'::regclass)"
)


@pytest.fixture
def new_db(empty_db_dsn: str) -> Iterator[str]:
    """A new database migrated here: tables never analyzed or vacuumed."""
    cwstore.connect_sync(empty_db_dsn, migrate_schema=True).close()
    yield empty_db_dsn


def _rows_read(conn: psycopg.Connection[Any], query: Any, args: Any) -> tuple[int, str | None]:
    """Rows of cwstore.nodes read by ``query``, in a transaction of its own, and the
    SQLSTATE it was refused with (``None``: it was not)."""
    refused = None
    with conn.transaction():
        before = conn.execute(_READ).fetchone()
        try:
            with conn.transaction():
                conn.execute(query, args).fetchall()
        except psycopg.Error as e:
            refused = e.sqlstate
        after = conn.execute(_READ).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0]), refused


def _append(
    conn: psycopg.Connection[Any],
    graph: str,
    nodes: list[dict[str, Any]],
    expected: int | None = None,
) -> tuple[int, str | None]:
    return _rows_read(
        conn,
        "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, %s)",
        (graph, prepare_batch(nodes).json, expected),
    )


@pytest.mark.parametrize("case", ["new node", "retry of held nodes", "stale expected length"])
def test_an_append_onto_a_long_graph_reads_a_few_node_rows(new_db: str, case: str) -> None:
    short, long_ = "reads-short", "reads-long"
    with psycopg.connect(new_db, autocommit=True) as conn:
        first = chain(2, tag=short)
        _append(conn, short, batch_of(first))
        _append(conn, short, batch_of(chain(1, tag=short + "2", parent=first[-1]["id"])))
        _append(conn, short, batch_of(chain(1, tag=short + "3", parent=first[-1]["id"])), 1)
        nodes = chain(LONG, tag=long_)
        with cwstore.connect_sync(new_db) as store:
            store.import_state(long_, document(nodes))
        held = batch_of(nodes[-2:])
        new = batch_of(chain(1, tag=long_ + "+", parent=nodes[-1]["id"]))
        if case == "new node":
            reads, refused = _append(conn, long_, held + new)
        elif case == "retry of held nodes":
            reads, refused = _append(conn, long_, held)
        else:
            reads, refused = _append(conn, long_, new, LONG - 1)
        length = conn.execute(
            "SELECT length FROM cwstore.graphs WHERE name = %s", (long_,)
        ).fetchone()
    assert refused == ("CW409" if case == "stale expected length" else None)
    assert length == (LONG + 1 if case == "new node" else LONG,)
    assert reads < FEW, f"an append onto a {LONG}-node graph read {reads} node rows"


def _reads(doc: dict[str, Any], graph: str) -> list[tuple[str, str, tuple[Any, ...]]]:
    """The read functions called on ``graph`` (holding ``doc``), as of its middle."""
    nodes = doc["nodes"]
    mid = len(nodes) // 2
    node = nodes[mid]["id"]
    key = next(n["resourceKey"] for n in reversed(nodes) if n.get("resourceKey"))
    return [
        ("frontier_at", "SELECT * FROM cwstore.frontier_at(%s, %s)", (graph, mid)),
        ("heads_at", "SELECT * FROM cwstore.heads_at(%s, %s)", (graph, mid)),
        ("heads_at now", "SELECT * FROM cwstore.heads_at(%s)", (graph,)),
        ("semantic_at", "SELECT * FROM cwstore.semantic_at(%s, %s)", (graph, mid)),
        ("projection_v1", "SELECT cwstore.projection_v1(%s, %s)", (graph, mid)),
        ("projection_v1 now", "SELECT cwstore.projection_v1(%s)", (graph,)),
        ("ancestors", "SELECT * FROM cwstore.ancestors(%s, %s, 1)", (graph, node)),
        ("descendants", "SELECT * FROM cwstore.descendants(%s, %s, 1)", (graph, node)),
        ("path", "SELECT * FROM cwstore.path(%s, %s, %s)", (graph, node, node)),
        ("key_history", "SELECT * FROM cwstore.key_history(%s, %s)", (graph, key)),
        ("export_parts_v1", "SELECT * FROM cwstore.export_parts_v1(%s, 3)", (graph,)),
        ("idle_graphs_v1", "SELECT * FROM cwstore.idle_graphs_v1('0 s')", ()),
    ]


def test_reads_of_a_long_graph_read_a_node_per_row_they_return(new_db: str) -> None:
    short, long_ = generate_session(1, 3), generate_session(2, 300)
    assert len(long_["nodes"]) > LONG
    with psycopg.connect(new_db, autocommit=True) as conn:
        with cwstore.connect_sync(new_db) as store:
            store.import_state("reads-short", short)
        for _, query, args in _reads(short, "reads-short"):
            assert _rows_read(conn, query, args)[1] is None
        with cwstore.connect_sync(new_db) as store:
            store.import_state("reads-long", long_)
        read = {
            name: _rows_read(conn, query, args) for name, query, args in _reads(long_, "reads-long")
        }
    assert {name: refused for name, (_, refused) in read.items() if refused} == {}
    many = {name: rows for name, (rows, _) in read.items() if rows >= FEW}
    assert many == {}, f"node rows read on a {len(long_['nodes'])}-node graph"


_SPANS_READ = (
    "SELECT pg_stat_get_xact_tuples_returned('cwstore.frontier_spans'::regclass)"
    " + pg_stat_get_xact_tuples_fetched('cwstore.frontier_spans'::regclass)"
)


def _two_chains(n: int, tag: str) -> dict[str, Any]:
    """Two chains of ``n`` nodes each, interleaved: every node is a head for two
    sequences, so each has a stored frontier span (a chain's last one sequence)."""
    a, b = chain(n, tag=f"{tag}-a", sequence=False), chain(n, tag=f"{tag}-b", sequence=False)
    nodes = [
        {**node, "sequence": seq}
        for seq, node in enumerate((x for pair in zip(a, b, strict=True) for x in pair), start=1)
    ]
    return {"version": 1, "nodes": nodes, "frontier": [a[-1]["id"], b[-1]["id"]]}


def test_erasing_a_graph_reads_its_own_frontier_spans(new_db: str) -> None:
    # The session's plans made on a near-empty table, then many graphs' spans.
    with psycopg.connect(new_db, autocommit=True) as conn:
        with cwstore.connect_sync(new_db) as store:
            store.import_state("spans-first", document(chain(2, tag="spans-first")))
            conn.execute("SELECT cwstore.erase_graph_v1('spans-first')")
            store.import_state("spans-long", _two_chains(LONG, "spans-long"))
            store.import_state("spans-victim", document(chain(3, tag="spans-victim")))
        conn.execute("SELECT cwstore.derive_v1('spans-victim')")  # its spans, to erase
        graph_id = conn.execute(
            "SELECT graph_id FROM cwstore.graphs WHERE name = 'spans-victim'"
        ).fetchone()
        total = conn.execute("SELECT count(*) FROM cwstore.frontier_spans").fetchone()
        with conn.transaction():
            before = conn.execute(_SPANS_READ).fetchone()
            conn.execute("SELECT cwstore.erase_graph_v1('spans-victim')")
            after = conn.execute(_SPANS_READ).fetchone()
        left = conn.execute(
            "SELECT count(*) FROM cwstore.frontier_spans WHERE graph_id = %s", graph_id
        ).fetchone()
    assert before is not None and after is not None and total is not None
    assert total[0] > LONG and left == (0,)
    reads = int(after[0]) - int(before[0])
    assert reads < FEW, f"erasing a 3-node graph read {reads} of {total[0]} span rows"
