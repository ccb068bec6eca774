"""The nodes trigger's two ways of deriving write the same rows.

``cwstore._nodes_inserted`` derives a statement's new nodes one by one when there are
at most 3 of them, and with set-based statements over the whole batch when there are
more (sql/schema/40_derive.sql). The same session is written five ways — one
import, and appends of 1, 3, 5 and 40 nodes — and every derived table (edges, frontier
spans, key versions and heads, counts by kind) must hold the same rows for each, graph
id aside; so must the graph's current frontier, before and after its frontier history
is brought to its length (``cwstore.derive_v1``: the appends of one node leave it
trailing, those of 40 write it as they go).
"""

from __future__ import annotations

from typing import Any

import psycopg
from support.documents import generate_session

DERIVED = {
    "edges": "child_seq, position, parent_seq",
    "frontier_spans": "head_seq, from_seq, ord, to_seq",
    "key_versions": "key, version, node_seq, to_seq",
    "key_heads": "key, head_seq, head_id, version, first_seq",
    "kind_counts": "kind, seq, n",
}


def _derived(dsn: str, graph: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        gid = conn.execute("SELECT cwstore.graph_key(%s)", (graph,)).fetchone()
        assert gid is not None
        frontier = "SELECT frontier_seqs, length FROM cwstore.graphs WHERE graph_id = %s"
        before = conn.execute(frontier, gid).fetchall()
        conn.execute("SELECT cwstore.derive_v1(%s)", (graph,))
        watermark = "SELECT derived_length FROM cwstore.graphs WHERE graph_id = %s"
        return {
            "frontier before derive": before,
            "frontier after derive": conn.execute(frontier, gid).fetchall(),
            "watermark": conn.execute(watermark, gid).fetchall(),
            **{
                table: conn.execute(
                    f"SELECT {cols} FROM cwstore.{table} WHERE graph_id = %s ORDER BY {cols}",
                    gid,
                ).fetchall()
                for table, cols in DERIVED.items()
            },
        }


async def test_node_by_node_and_set_based_derive_the_same_rows(
    store: Any, graph: str, db_dsn: str
) -> None:
    doc = generate_session(7, 14, keys=4, semantic_keys=4)
    nodes = doc["nodes"]
    assert len(nodes) > 2 * 40  # several batches of each size, and an import over 3
    imported = f"{graph}-import"
    await store.import_state(imported, doc)
    graphs = []
    for size in (1, 3, 5, 40):
        name = f"{graph}-{size}"
        for i in range(0, len(nodes), size):
            await store.append(name, nodes[i : i + size])
        graphs.append(name)

    expected = _derived(db_dsn, imported)
    assert all(expected.values()), expected  # the session exercises every table
    # Spans of more than one sequence (branches, semantic nodes, system notes): a
    # chain's own spans of one sequence are not stored.
    assert len(nodes) // 8 < len(expected["frontier_spans"]) < len(nodes) // 2
    for name in graphs:
        assert _derived(db_dsn, name) == expected, name
