"""The causal walks (ancestors, descendants, path) of a stored session equal a
breadth-first search over its parent links, on every server the contract runs on (on
Citus a statement that walked and read nodes at once was refused on the worker)."""

from __future__ import annotations

import random
from typing import Any

import psycopg
from support.documents import generate_session
from support.walks import depths


async def test_walks_equal_a_breadth_first_search(store: Any, graph: str, db_dsn: str) -> None:
    doc = generate_session(7, 14, keys=4, semantic_keys=4)
    nodes = doc["nodes"]
    await store.import_state(graph, doc)
    parents = {n["id"]: n["parents"] for n in nodes}
    seq = {n["id"]: i for i, n in enumerate(nodes, start=1)}
    sample = [nodes[0], nodes[-1], *random.Random(5).sample(nodes, 10)]
    deepest = 0
    with psycopg.connect(db_dsn) as conn:
        for node in sample:
            for fn, up in (("ancestors", True), ("descendants", False)):
                want = depths(parents, node["id"], up)
                deepest = max(deepest, *want.values(), 0)
                got = conn.execute(
                    f"SELECT seq, id, depth FROM cwstore.{fn}(%s, %s)", (graph, node["id"])
                ).fetchall()
                assert got == sorted(
                    ((seq[i], i, d) for i, d in want.items()), key=lambda r: (r[2], r[0])
                ), (fn, node["id"])
                near = conn.execute(
                    f"SELECT id, depth FROM cwstore.{fn}(%s, %s, 1)", (graph, node["id"])
                ).fetchall()
                assert sorted(near) == sorted((i, d) for i, d in want.items() if d <= 1)
        first, last = nodes[0]["id"], nodes[-1]["id"]
        steps = conn.execute(
            "SELECT id FROM cwstore.path(%s, %s, %s)", (graph, first, last)
        ).fetchall()
        down = depths(parents, first, up=False)
        assert len(steps) == (down[last] + 1 if last in down else 0)
    assert deepest > 2  # the walks went past their first level
