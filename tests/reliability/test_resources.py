"""Big graphs are read in parts: no database value has to hold a whole graph.

A text value in PostgreSQL holds at most 1 GB, and export_v1 built the whole nodes
array as one: a graph over 1 GB (110 appends of 10 MB each, all accepted) could be
written but never exported or replayed. The clients now read ``export_parts_v1``:
the array in parts of about 64 MB, in one statement (one snapshot). Here the parts are
made small so that a few megabytes show the same thing; the >1 GB graph itself is
measured by hand (docs/reliability.md, "Limits and sizes").
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from support.documents import GraphBuilder

import cwstore


@pytest.mark.parametrize("client", ["async", "sync"])
async def test_export_comes_in_parts_and_joins_back_exactly(db_dsn: str, client: str) -> None:
    b = GraphBuilder()
    b.system("contract")
    for i in range(5):
        b.inference({"chunk": i, "text": "\u00e9\U0001f600" * 300_000})
    graph = f"parts-{uuid.uuid4().hex}"
    sync = cwstore.connect_sync(db_dsn, migrate_schema=False, max_size=1)
    try:
        sync.append(graph, b.nodes)
        with psycopg.connect(db_dsn, autocommit=True) as c:
            (whole,) = c.execute(
                "SELECT nodes FROM cwstore.export_v1(%s)", (graph,)
            ).fetchone() or (None,)
            rows = c.execute(
                "SELECT part, nodes, frontier FROM cwstore.export_parts_v1(%s, NULL, NULL, %s)",
                (graph, 1_500_000),
            ).fetchall()
            assert rows[0][0] == -1 and rows[0][1] is None and rows[0][2] == [b.nodes[-1]["id"]]
            assert len(rows) > 3, "the parts are not bounded"
            assert "[" + ",".join(r[1] for r in rows[1:]) + "]" == whole
            empty = c.execute(
                "SELECT part, nodes, frontier FROM cwstore.export_parts_v1(%s, 0)", (graph,)
            ).fetchall()
            assert empty == [(-1, None, [])]
        if client == "async":
            store = await cwstore.connect(db_dsn, migrate_schema=False, max_size=1)
            try:
                text = await store.export_json(graph)
                state = await store.replay(graph, 3)
                with pytest.raises(cwstore.InputError):
                    await store.export_json(graph, 99)
            finally:
                await store.close()
        else:
            text = sync.export_json(graph)
            state = sync.replay(graph, 3)
            with pytest.raises(cwstore.InputError):
                sync.export_json(graph, 99)
        assert (
            text
            == '{"version":1,"nodes":' + str(whole) + ',"frontier":["' + b.nodes[-1]["id"] + '"]}'
        )
        assert [n.id for n in state.nodes] == [n["id"] for n in b.nodes[:3]]
    finally:
        sync.close()
