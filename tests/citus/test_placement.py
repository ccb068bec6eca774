"""Where cwstore's rows live on a Citus cluster (``cwstore init --citus``).

Runs only with ``CWSTORE_TEST_CITUS_DSN`` (see tests/conftest.py): every cwstore table is
distributed by graph_id (co-located) or a reference table, one graph's rows all sit on
one worker, and an append runs as single-shard statements only, committed without
two-phase commit.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import psycopg
import pytest
from support import GRAPH_TABLES

from cwstore.identity import compute_id

pytestmark = pytest.mark.skipif(
    not os.environ.get("CWSTORE_TEST_CITUS_DSN"),
    reason="CWSTORE_TEST_CITUS_DSN is not set: no Citus cluster for these tests",
)

REFERENCE_TABLES = ["listeners", "schema_migrations", "tenant_members"]
KEYED_TABLES = {"erasures": "graph_id", "graph_key_detours": "slot"}
"""Distributed and co-located with the graph tables, but not part of a graph's history:
the audit record of erasures (by the erased graph's key) and the keys a name's chain
passed over (by that key)."""
COLLIDING = ("collide-1849903", "collide-2725982")
"""Two names whose first keys collide (tests/vectors/graph_key_collision.json)."""


def _chain(n: int, key: str | None = None) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        node: dict[str, Any] = {
            "kind": "goal" if i == 0 else "tool_result",
            "parents": [nodes[-1]["id"]] if nodes else [],
            "payload": {"i": i},
            "createdAt": "2025-01-01T00:00:00.000Z",
        }
        if key is not None and i > 0:
            node["resourceKey"] = key
        node["id"] = compute_id(
            node["kind"], node["parents"], node["payload"], node.get("resourceKey")
        )
        nodes.append(node)
    return nodes


def _append(conn: psycopg.Connection[Any], graph: str, nodes: list[dict[str, Any]]) -> None:
    conn.execute(
        "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
        (graph, json.dumps(nodes, separators=(",", ":"))),
    )


def test_every_cwstore_table_is_distributed_by_graph_or_a_reference_table(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c"
                " WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind IN ('r', 'p')"
            )
        }
        assert tables == set(GRAPH_TABLES) | set(KEYED_TABLES) | set(REFERENCE_TABLES)
        rows = {
            r[0]: (r[1], r[2], r[3])
            for r in conn.execute(
                "SELECT c.relname, p.partmethod, p.colocationid,"
                " column_to_column_name(p.logicalrelid, p.partkey)"
                " FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid"
                " WHERE c.relnamespace = 'cwstore'::regnamespace"
            )
        }
    assert set(rows) == tables
    colocation = {rows[t][1] for t in [*GRAPH_TABLES, *KEYED_TABLES]}
    assert len(colocation) == 1
    for t in GRAPH_TABLES:
        assert rows[t][0] == "h" and rows[t][2] == "graph_id", t
    for t, column in KEYED_TABLES.items():
        assert rows[t][0] == "h" and rows[t][2] == column, t
    for t in REFERENCE_TABLES:
        assert rows[t][0] == "n", t


def test_one_graphs_rows_all_sit_on_one_worker(db_dsn: str) -> None:
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # Three graph names for each worker, chosen by where the metadata puts their key
        # before anything is written (six random names all hash to one of two workers
        # once in 32 runs).
        predicted: dict[str, tuple[str, int]] = {}
        per_worker: dict[tuple[str, int], int] = {}
        while len(predicted) < 6:
            g = f"place-{uuid.uuid4().hex}"
            row = conn.execute(
                "SELECT s.nodename, s.nodeport FROM citus_shards s"
                " WHERE s.shardid = get_shard_id_for_distribution_column("
                "   'cwstore.graphs'::regclass, cwstore.graph_key(%s))",
                (g,),
            ).fetchone()
            assert row is not None
            home = (str(row[0]), int(row[1]))
            if per_worker.get(home, 0) < 3:
                per_worker[home] = per_worker.get(home, 0) + 1
                predicted[g] = home
        graphs = list(predicted)
        for g in graphs:
            _append(conn, g, _chain(5, key="doc"))
        workers = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0"
        ).fetchall()
        placed: dict[str, set[tuple[str, int]]] = {}
        for g in graphs:
            where = conn.execute(
                "SELECT DISTINCT s.nodename, s.nodeport"
                " FROM unnest(%s::text[]) t"
                " JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column("
                "   ('cwstore.' || t)::regclass, cwstore.graph_key(%s))",
                (GRAPH_TABLES, g),
            ).fetchall()
            assert len(where) == 1, (g, where)
            placed[g] = {(str(h), int(p)) for h, p in where}
            assert placed[g] == {predicted[g]}, (g, placed[g], predicted[g])
    assert len(workers) >= 2
    # The rows are where the metadata says: on the graph's worker, and nowhere else.
    params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(db_dsn)
    for host, port in workers:
        worker = psycopg.conninfo.make_conninfo(**{**params, "host": host, "port": port})
        with psycopg.connect(worker, autocommit=True) as w:
            w.execute("SET citus.override_table_visibility = off")
            shards = [
                r[0]
                for r in w.execute(
                    "SELECT c.relname FROM pg_class c"
                    " WHERE c.relnamespace = 'cwstore'::regnamespace"
                    "   AND c.relname ~ '^nodes_[0-9]+$'"
                )
            ]
            for g in graphs:
                n = sum(
                    w.execute(
                        psycopg.sql.SQL(
                            "SELECT count(*) FROM cwstore.{} WHERE graph_id = cwstore.graph_key(%s)"
                        ).format(psycopg.sql.Identifier(shard)),
                        (g,),
                    ).fetchone()[0]  # type: ignore[index]
                    for shard in shards
                )
                assert n == (5 if (host, port) in placed[g] else 0), (g, host, port)
    # Both workers hold some of the six graphs (chosen so above).
    assert len({w for p in placed.values() for w in p}) == 2


def test_an_append_is_single_shard_statements_without_two_phase_commit(db_dsn: str) -> None:
    graph = f"one-{uuid.uuid4().hex}"
    nodes = _chain(4, key="doc")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, graph, nodes[:1])
        conn.execute("SET citus.enable_stat_counters = on")
        conn.execute(
            "SELECT citus_stat_counters_reset(oid) FROM pg_database"
            " WHERE datname = current_database()"
        )
        before = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        _append(conn, graph, nodes[1:])
        _append(conn, graph, nodes[1:])  # an idempotent retry: same routing
        row = conn.execute(
            "SELECT query_execution_single_shard, query_execution_multi_shard"
            " FROM pg_database d, citus_stat_counters(d.oid) c"
            " WHERE d.datname = current_database()"
        ).fetchone()
        after = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        length = conn.execute(
            "SELECT length FROM cwstore.graphs WHERE graph_id = cwstore.graph_key(%s)", (graph,)
        ).fetchone()
    assert row is not None and row[0] > 0 and row[1] == 0, row
    assert before == after
    assert length == (4,)


def _counters(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        "SELECT query_execution_single_shard, query_execution_multi_shard"
        " FROM pg_database d, citus_stat_counters(d.oid) c"
        " WHERE d.datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _reset_counters(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET citus.enable_stat_counters = on")
    conn.execute(
        "SELECT citus_stat_counters_reset(oid) FROM pg_database WHERE datname = current_database()"
    )


def test_an_erasure_is_single_shard_statements_without_two_phase_commit(db_dsn: str) -> None:
    """One graph's erasure runs on its one worker: its audit record is co-located with
    it, every statement names its key, and it commits in one phase."""
    graph = f"erase-{uuid.uuid4().hex}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, graph, _chain(4, key="doc"))
        gid = conn.execute("SELECT cwstore.graph_id_of(%s)", (graph,)).fetchone()
        _reset_counters(conn)
        before = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        erased = conn.execute("SELECT cwstore.erase_graph_v1(%s, 'test')", (graph,)).fetchone()
        single, multi = _counters(conn)
        after = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
        left = {
            t: conn.execute(
                psycopg.sql.SQL("SELECT count(*) FROM cwstore.{} WHERE graph_id = %s").format(
                    psycopg.sql.Identifier(t)
                ),
                gid,
            ).fetchone()
            for t in GRAPH_TABLES
        }
        record = conn.execute(
            "SELECT nodes, reason FROM cwstore.erasures WHERE graph_id = %s", gid
        ).fetchall()
    assert erased == (4,)
    assert single > 0 and multi == 0, (single, multi)
    assert before == after
    assert left == {t: (0,) for t in GRAPH_TABLES}
    assert record == [(4, "test")]


def test_names_whose_keys_collide_both_live_on_the_cluster(db_dsn: str) -> None:
    """The second name takes the next key of its chain, on that key's worker; erasing the
    first leaves the second found through its detour, and the first's name comes back."""
    first, second = COLLIDING
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, first, _chain(2))
        _append(conn, second, _chain(3))
        keys = conn.execute(
            "SELECT name, key_probe, graph_id = cwstore.graph_key(name, key_probe), length"
            " FROM cwstore.graphs WHERE name = ANY(%s) ORDER BY name",
            (list(COLLIDING),),
        ).fetchall()
        conn.execute("SELECT cwstore.erase_graph_v1(%s)", (first,))
        still = conn.execute("SELECT count(*) FROM cwstore.frontier_at(%s)", (second,)).fetchone()
        _append(conn, first, _chain(1))
        again = conn.execute(
            "SELECT key_probe, length FROM cwstore.graphs WHERE name = %s", (first,)
        ).fetchone()
        conn.execute("SELECT cwstore.erase_graph_v1(%s)", (second,))
        detours = conn.execute("SELECT count(*) FROM cwstore.graph_key_detours").fetchone()
        conn.execute("SELECT cwstore.erase_graph_v1(%s)", (first,))
    assert keys == [(first, 0, True, 2), (second, 1, True, 3)]
    assert still == (1,)
    assert again == (0, 1)
    assert detours == (0,)


def test_as_of_reads_go_to_the_graphs_one_shard(db_dsn: str) -> None:
    graph = f"asof-{uuid.uuid4().hex}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, graph, _chain(4, key="doc"))
        conn.execute("SET citus.enable_stat_counters = on")
        conn.execute(
            "SELECT citus_stat_counters_reset(oid) FROM pg_database"
            " WHERE datname = current_database()"
        )
        frontier = conn.execute(
            "SELECT position, seq FROM cwstore._frontier_at(cwstore.graph_key(%s), 2)", (graph,)
        ).fetchall()
        heads = conn.execute(
            "SELECT key, version, seq FROM cwstore._heads_at(cwstore.graph_key(%s), 3, false)",
            (graph,),
        ).fetchall()
        row = conn.execute(
            "SELECT query_execution_single_shard, query_execution_multi_shard"
            " FROM pg_database d, citus_stat_counters(d.oid) c"
            " WHERE d.datname = current_database()"
        ).fetchone()
    assert frontier == [(0, 2)]
    assert heads == [("doc", 2, 3)]
    assert row is not None and row[0] > 0 and row[1] == 0, row


def test_the_all_graphs_feed_is_refused_on_citus(db_dsn: str) -> None:
    """tail_all's xid cursor is per node on a cluster: refused, saying why, not served
    with nodes skipped or repeated."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, f"feed-{uuid.uuid4().hex}", _chain(2))
        with pytest.raises(psycopg.errors.FeatureNotSupported) as err:
            conn.execute("SELECT * FROM cwstore.tail_all_v1(0, 0, 0, 10)")
    assert "not available on Citus" in str(err.value)
    assert "tail" in (err.value.diag.message_hint or "")


@pytest.mark.parametrize(
    "stmt",
    [
        "UPDATE cwstore.nodes SET kind = 'goal'",
        "DELETE FROM cwstore.edges",
        "TRUNCATE cwstore.nodes",
        "INSERT INTO cwstore.kind_counts VALUES (cwstore.graph_key('x'), 'goal', 5, 1)",
    ],
)
def test_history_stays_append_only_on_the_shards(db_dsn: str, stmt: str) -> None:
    """The guard triggers fire on the workers' shards: direct writes are refused (CW403),
    even by the owner, and nothing changes."""
    graph = f"ao-{uuid.uuid4().hex}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        _append(conn, graph, _chain(3))
        with pytest.raises(psycopg.Error) as err:
            conn.execute(stmt)
        assert err.value.sqlstate == "CW403"
        n = conn.execute(
            "SELECT count(*) FROM cwstore.nodes WHERE graph_id = cwstore.graph_key(%s)"
            " AND kind = 'goal'",
            (graph,),
        ).fetchone()
    assert n == (1,)
