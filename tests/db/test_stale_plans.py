"""Plans made while the tables were small do not go on reading whole tables or graphs
(issue 35).

A connection keeps a plpgsql function's plans (and a prepared statement's generic plan)
for its life. With the tables analyzed while empty, such a plan finds a scan of the
table, or of any index that leads with graph_id, as cheap as the right index descent,
and an append's cost then grows with the table or the graph. Counted, not timed, with
autovacuum off on cwstore's tables so no later ANALYZE rescues the plans: sequential
scans through a plain connection (as psql or the TypeScript runtime call the SQL door)
and through the store, and the index entries an append reads early in a connection
and 120 appends later. Before the write doors planned without sequential scans, the
last read 945 entries for 10 appends early and 24,045 later (the lookups by id and seq
took nodes_created_at_idx, the index made last); 63 and 70 now.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

import cwstore

APPENDS = 120
INSERT_ONLY = ("nodes", "edges", "key_versions")
KEYS = ("channel:messages", "channel:tools", "checkpoint")
TABLES = ("graphs", "nodes", "edges", "key_versions", "key_heads", "kind_counts", "frontier_spans")


def _analyzed_while_empty(dsn: str) -> None:
    with cwstore.connect_sync(dsn, migrate_schema=True):
        pass
    with psycopg.connect(dsn, autocommit=True) as c:
        for table in TABLES:
            c.execute(f"ALTER TABLE cwstore.{table} SET (autovacuum_enabled = off)")
        c.execute("ANALYZE")


def _seq_scans(dsn: str) -> int:
    """The sequential scans of cwstore's graph tables so far, once they settle (a
    backend's counters reach the shared statistics when its transaction ends or it
    exits)."""
    found = -1
    with psycopg.connect(dsn, autocommit=True) as c:
        for _ in range(50):
            time.sleep(0.2)
            c.execute("SELECT pg_stat_clear_snapshot()")
            row = c.execute(
                "SELECT sum(seq_scan) FROM pg_stat_user_tables"
                " WHERE schemaname = 'cwstore' AND relname = ANY(%s)",
                (list(TABLES),),
            ).fetchone()
            assert row is not None
            if int(row[0]) == found:
                return found
            found = int(row[0])
    return found


def _node(i: int, parent: str | None, key: str = "k") -> dict[str, Any]:
    """A version of the resource ``key`` after ``parent`` (its head): the lookups of
    parents, key heads and key versions all run."""
    parents = [parent] if parent else []
    payload = {"step": i, "text": "x" * 200}
    return {
        "id": cwstore.compute_id("resource", parents, payload, key),
        "kind": "resource",
        "parents": parents,
        "payload": payload,
        "resourceKey": key,
        "createdAt": "2026-12-05T08:00:00.000Z",
    }


def test_the_sql_door_does_not_scan_nodes_with_statistics_of_empty_tables(
    empty_db_dsn: str,
) -> None:
    _analyzed_while_empty(empty_db_dsn)
    before = _seq_scans(empty_db_dsn)
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        heads: dict[str, str] = {}
        for i in range(APPENDS):
            batch = [_node(i, heads.get(key), key) for key in KEYS]
            c.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                ("g", json.dumps(batch, separators=(",", ":"))),
            )
            heads = {key: str(node["id"]) for key, node in zip(KEYS, batch, strict=True)}
    assert _seq_scans(empty_db_dsn) - before < APPENDS // 10


def test_the_store_does_not_scan_nodes_with_statistics_of_empty_tables(
    empty_db_dsn: str,
) -> None:
    _analyzed_while_empty(empty_db_dsn)
    before = _seq_scans(empty_db_dsn)
    with cwstore.connect_sync(empty_db_dsn, min_size=1, max_size=1) as store:
        parents: list[str] = []
        for i in range(APPENDS):
            (stored,) = store.append("g", [_node(i, parents[0] if parents else None)])
            parents = [stored.id]
            assert store.frontier("g") == parents
    assert _seq_scans(empty_db_dsn) - before < APPENDS // 10


def _append_window(
    c: psycopg.Connection[Any], first: int, heads: dict[str, str], declare: bool = False
) -> int:
    """Ten appends of :data:`KEYS`' next versions in one transaction; the index
    entries its scans of the insert-only tables read (this backend's own count, read
    before and after inside the transaction, so nothing is flushed between). The
    tables updated in place (graphs, frontier_spans, key_heads, kind_counts) leave dead
    index entries that autovacuum removes, and autovacuum is off here. With
    ``declare``, each append declares the frontier to be its last node alone, as a
    LangGraph put does (the frontier's history is then derived at every append)."""
    with c.transaction():
        before = _index_reads(c)
        for i in range(first, first + 10):
            batch = [_node(i, heads.get(key), key) for key in KEYS]
            frontier = json.dumps([batch[-1]["id"]]) if declare else None
            c.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, NULL, %s::json)",
                ("g", json.dumps(batch, separators=(",", ":")), frontier),
            )
            heads.update({key: str(node["id"]) for key, node in zip(KEYS, batch, strict=True)})
        return _index_reads(c) - before


def _index_reads(c: psycopg.Connection[Any]) -> int:
    row = c.execute(
        "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) FROM pg_index i"
        " WHERE i.indrelid = ANY(SELECT ('cwstore.' || quote_ident(t))::regclass"
        " FROM unnest(%s::text[]) t)",
        (list(INSERT_ONLY),),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_appends_index_reads_do_not_grow_with_the_graph(empty_db_dsn: str) -> None:
    _analyzed_while_empty(empty_db_dsn)
    heads: dict[str, str] = {}
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        early = _append_window(c, 0, heads)
        for start in range(10, APPENDS, 10):
            late = _append_window(c, start, heads)
    assert late <= early * 1.5


def test_appends_that_declare_a_frontier_read_no_more_as_the_graph_grows(
    empty_db_dsn: str,
) -> None:
    # Before the reads in key order, the run past the watermark and the current heads were read
    # through nodes_id_key, the graph's whole range each time: 536 index entries for 10
    # appends early, 9,729 for 10 appends 110 appends later; 160 and 170 now.
    _analyzed_while_empty(empty_db_dsn)
    heads: dict[str, str] = {}
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        early = _append_window(c, 0, heads, declare=True)
        for start in range(10, APPENDS, 10):
            late = _append_window(c, start, heads, declare=True)
    assert late <= early * 1.5
