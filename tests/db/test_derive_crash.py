"""A backend killed while an append writes the frontier's history loses nothing and
leaves nothing half-built.

The append that takes a graph ``cwstore.derive_lag()`` nodes past its watermark writes
the spans of those nodes in its own transaction. Here that append is held at its first
write of ``frontier_spans`` (another session holds the table's lock) and its backend is
terminated: the graph is as it was before the append (its length, frontier, watermark,
no span of it), every read answers as before, and the next append writes the node and
the history both.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from support.documents import GraphBuilder

import cwstore

APPEND = "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)"


def _state(conn: psycopg.Connection[Any], graph: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT g.length, g.derived_length, g.frontier_seqs,"
        "       (SELECT count(*) FROM cwstore.frontier_spans s WHERE s.graph_id = g.graph_id)"
        "  FROM cwstore.graphs g WHERE g.name = %s",
        (graph,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _frontiers(conn: psycopg.Connection[Any], graph: str, length: int) -> list[list[str]]:
    return [
        [
            r[0]
            for r in conn.execute(
                "SELECT id FROM cwstore.frontier_at(%s, %s) ORDER BY position", (graph, s)
            )
        ]
        for s in range(length + 1)
    ]


def test_an_append_killed_in_its_derive_leaves_the_graph_as_it_was(db_dsn: str) -> None:
    graph = "killed-in-derive"
    b = GraphBuilder()
    b.goal("start")
    for i in range(80):
        if i % 3 == 2:
            b.append("inference", f"aside {i}", advance=False)
        else:
            b.inference(f"step {i}")
    nodes = b.nodes
    with psycopg.connect(db_dsn, autocommit=True) as admin:
        lag = int(admin.execute("SELECT cwstore.derive_lag()").fetchone()[0])  # type: ignore[index]
        for node in nodes[: lag - 1]:
            admin.execute(APPEND, (graph, cwstore._jsontext.dumps([node])))
        before = _state(admin, graph)
        assert before[:2] == (lag - 1, 0) and before[3] == 0
        reads_before = _frontiers(admin, graph, lag - 1)
        assert reads_before == [cwstore.fold_frontier(nodes[:s]) for s in range(lag)]

        with psycopg.connect(db_dsn) as locker, psycopg.connect(db_dsn, autocommit=True) as w:
            locker.execute("LOCK TABLE cwstore.frontier_spans IN EXCLUSIVE MODE")
            pid = w.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            failed: list[BaseException] = []

            def append() -> None:
                try:
                    w.execute(APPEND, (graph, cwstore._jsontext.dumps([nodes[lag - 1]])))
                except BaseException as e:
                    failed.append(e)

            writer = threading.Thread(target=append)
            writer.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                waiting = admin.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError("the append never waited on frontier_spans")
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            writer.join(30)
            assert failed and isinstance(failed[0], psycopg.OperationalError), failed
            locker.rollback()

        assert _state(admin, graph) == before
        assert _frontiers(admin, graph, lag - 1) == reads_before

        admin.execute(APPEND, (graph, cwstore._jsontext.dumps([nodes[lag - 1]])))
        length, watermark, _, spans = _state(admin, graph)
        assert (length, watermark) == (lag, lag) and spans > 0
        assert _frontiers(admin, graph, lag) == [
            cwstore.fold_frontier(nodes[:s]) for s in range(lag + 1)
        ]
