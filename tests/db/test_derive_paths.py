"""The nodes trigger's two ways of deriving write the same rows.

``cwstore._nodes_inserted`` derives a statement's new nodes one by one when there are
at most 3 of them, and with set-based statements over the whole batch when there are
more (cwstore/sql/schema/40_derive.sql). The same session is written five ways — one
import, and appends of 1, 3, 5 and 40 nodes — and every derived table (edges, frontier
spans, key versions and heads, counts by kind) must hold the same rows for each, graph
id aside.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.documents import generate_session

import cwstore

DERIVED = {
    "edges": "child_seq, position, parent_seq",
    "frontier_spans": "head_seq, from_seq, ord, to_seq",
    "key_versions": "key, version, node_seq, to_seq",
    "key_heads": "key, head_seq, head_id, version, first_seq",
    "kind_counts": "kind, seq, n",
}


@pytest.fixture(scope="module")
def store(db_dsn: str) -> Iterator[cwstore.Store]:
    s = cwstore.connect_sync(db_dsn, min_size=1, max_size=2, migrate_schema=False)
    try:
        yield s
    finally:
        s.close()


def _derived(dsn: str, graph: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        gid = conn.execute("SELECT cwstore.graph_key(%s)", (graph,)).fetchone()
        assert gid is not None
        return {
            table: conn.execute(
                f"SELECT {cols} FROM cwstore.{table} WHERE graph_id = %s ORDER BY {cols}",
                gid,
            ).fetchall()
            for table, cols in DERIVED.items()
        }


def test_node_by_node_and_set_based_derive_the_same_rows(store: cwstore.Store, db_dsn: str) -> None:
    doc = generate_session(7, 14, keys=4, semantic_keys=4)
    nodes = doc["nodes"]
    assert len(nodes) > 2 * 40  # several batches of each size, and an import over 8
    tag = uuid.uuid4().hex[:8]
    imported = f"paths-import-{tag}"
    store.import_state(imported, doc)
    graphs = [imported]
    for size in (1, 3, 5, 40):
        graph = f"paths-{size}-{tag}"
        for i in range(0, len(nodes), size):
            store.append(graph, nodes[i : i + size])
        graphs.append(graph)

    expected = _derived(db_dsn, imported)
    assert all(expected.values()), expected  # the session exercises every table
    assert len(expected["frontier_spans"]) > len(nodes) // 2
    for graph in graphs[1:]:
        assert _derived(db_dsn, graph) == expected, graph
