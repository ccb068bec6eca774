"""A database of an earlier release goes onto Citus, and a distributed one upgrades,
with ``cwstore init``.

Citus passes the text of a query to its workers when the query changes a distributed
table, and refuses a text of several statements there; and a migration that redefines a
function drops the settings ``sql/citus.sql`` gave it. So the runner sends a
migration one statement at a time, and ``cwstore init`` re-applies ``citus.sql`` on a
distributed database. A database at the baseline (0001) cannot be distributed (a unique
index on names, an identity key, policies with sub-selects): ``cwstore init --citus``
migrates it, then distributes it with its graphs. A cluster distributed at the newest
release takes every later migration and goes on appending, with the nodes it held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager

import psycopg
import pytest
from support.nodes import node

import cwstore
from cwstore._sql import migrations, released

pytestmark = pytest.mark.skipif(
    not os.environ.get("CWSTORE_TEST_CITUS_DSN"),
    reason="CWSTORE_TEST_CITUS_DSN is not set: no Citus cluster for these tests",
)


def _init(dsn: str, *flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cwstore", "init", "--dsn", dsn, *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_database_of_the_baseline_is_distributed_with_its_graphs(
    new_citus_database: Callable[..., ContextManager[str]],
) -> None:
    files = migrations()
    graph = f"baseline-{uuid.uuid4().hex[:8]}"
    one = node("goal", "one")
    with new_citus_database(files[:1], distribute=False) as dsn:
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (graph, json.dumps([one]))
            )
        said = _init(dsn, "--citus")
        assert f"applied {len(files) - 1} migration" in said
        assert "tables distributed by graph on Citus" in said
        with psycopg.connect(dsn) as conn:
            distributed = conn.execute(
                "SELECT count(*) FROM pg_dist_partition"
                " WHERE logicalrelid IN ('cwstore.nodes'::regclass, 'cwstore.graphs'::regclass)"
            ).fetchone()
        assert distributed == (2,)
        with cwstore.connect_sync(dsn, min_size=1, max_size=1) as store:
            after = store.append(
                graph, [{"kind": "answer", "parents": [one["id"]], "payload": "2"}]
            )
            assert [n.sequence for n in after] == [2]
            assert [n.id for n in store.replay(graph).nodes] == [one["id"], after[0].id]
            assert store.frontier(graph) == [after[0].id]
        with psycopg.connect(dsn) as conn:
            # The triggers were off while the rows were copied, and are on again on every
            # shard: the append derived its edge there.
            disabled = conn.execute(
                "SELECT DISTINCT result FROM run_command_on_shards('cwstore.nodes',"
                " $$SELECT count(*) FROM pg_trigger WHERE tgrelid = '%s'::regclass"
                " AND NOT tgisinternal AND tgenabled = 'D'$$)"
            ).fetchall()
            edges = conn.execute(
                "SELECT count(*) FROM cwstore.edges e JOIN cwstore.graphs g USING (graph_id)"
                " WHERE g.name = %s",
                (graph,),
            ).fetchone()
        assert disabled == [("0",)]
        assert edges == (1,)


@pytest.mark.parametrize("path", ["cwstore init", "connect(migrate_schema=True)"])
def test_a_distributed_database_takes_the_later_migrations(
    new_citus_database: Callable[..., ContextManager[str]], path: str
) -> None:
    """Every way that migrates (both call cwstore.migrate.setup) re-applies citus.sql on a
    distributed database, so appends go on working after migrations that redefine the
    functions it sets up and add tables it distributes (none after the newest release
    yet)."""
    files = migrations()
    at_release = [m for m in files if m.filename in released()]
    assert at_release == files[: len(at_release)] and len(at_release) > 1
    later = len(files) - len(at_release)
    graph = f"upgrade-{uuid.uuid4().hex[:8]}"
    with new_citus_database(at_release) as dsn:
        # Written as a client of that release did: the two arguments every append_v1 takes.
        one = node("goal", "one")
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                (graph, json.dumps([one])),
            )
        before = [str(one["id"])]
        if path == "cwstore init":
            said = _init(dsn)
            assert f"applied {later} migration" in said
            assert "re-applied" in said
        else:
            cwstore.connect_sync(dsn, min_size=1, max_size=1, migrate_schema=True).close()
        with psycopg.connect(dsn) as conn:
            spread = conn.execute(
                "SELECT count(*) FROM pg_dist_partition"
                " WHERE logicalrelid IN ('cwstore.erasures'::regclass,"
                " 'cwstore.graph_key_detours'::regclass)"
            ).fetchone()
            config = conn.execute(
                "SELECT proconfig FROM pg_proc"
                " WHERE oid = 'cwstore.append_v1(text, json, bigint, json, bigint)'::regprocedure"
            ).fetchone()
            shard_targets = conn.execute(
                "SELECT DISTINCT result FROM run_command_on_shards('cwstore.nodes',"
                " $$SELECT attstattarget FROM pg_attribute"
                " WHERE attrelid = '%s'::regclass AND attname = 'payload_text'$$)"
            ).fetchall()
        assert spread == (2,)
        # Shards keep no statistics of content either (citus.sql).
        assert shard_targets == [("0",)]
        assert config is not None and "plan_cache_mode=auto" in (config[0] or [])
        with psycopg.connect(dsn) as conn:
            versions = conn.execute("SELECT version FROM cwstore.schema_migrations").fetchall()
            assert sorted(v for (v,) in versions) == [m.version for m in files]
        with cwstore.connect_sync(dsn, min_size=1, max_size=1) as store:
            after = store.append(
                graph,
                [
                    {"kind": "inference", "parents": [before[0]], "payload": {"n": i}}
                    for i in range(1)
                ]
                + [{"kind": "answer", "parents": [], "payload": str(i)} for i in range(5)],
            )
            assert [n.sequence for n in after] == list(range(2, 8))
            state = store.replay(graph)
            assert [n.id for n in state.nodes] == before + [n.id for n in after]


def test_a_distributed_graph_reads_the_same_after_the_later_migrations(
    new_citus_database: Callable[..., ContextManager[str]],
) -> None:
    """A graph written at the newest release, on the cluster, reads the same at every
    sequence after the later migrations, which rewrite rows of its history on the
    workers (0003: a row of counts per kind per block, no stored span of one
    sequence)."""
    files = migrations()
    at_release = [m for m in files if m.filename in released()]
    graph = f"history-{uuid.uuid4().hex[:8]}"
    kinds = ["goal", "inference", "tool_call", "tool_result", "answer"]
    nodes: list[dict[str, object]] = []
    for i in range(70):
        parents = [str(nodes[-1]["id"])] if nodes else []
        nodes.append(node(kinds[i % len(kinds)], {"i": i}, parents))
    reads = (
        "SELECT s, cwstore.projection_v1(%(g)s, s),"
        " (SELECT array_agg(f.id ORDER BY f.position) FROM cwstore.frontier_at(%(g)s, s) f)"
        " FROM generate_series(0, 70) s ORDER BY s"
    )
    with new_citus_database(at_release) as dsn:
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                (graph, json.dumps(nodes, separators=(",", ":"))),
            )
            before = conn.execute(reads, {"g": graph}).fetchall()
        _init(dsn)
        with psycopg.connect(dsn) as conn:
            after = conn.execute(reads, {"g": graph}).fetchall()
            counts = conn.execute(
                "SELECT count(*) FROM cwstore.kind_counts k JOIN cwstore.graphs g USING (graph_id)"
                " WHERE g.name = %s",
                (graph,),
            ).fetchone()
            spans = conn.execute(
                "SELECT count(*) FROM cwstore.frontier_spans s JOIN cwstore.graphs g"
                " USING (graph_id) WHERE g.name = %s",
                (graph,),
            ).fetchone()
    assert after == before
    assert before[-1][2] == [nodes[-1]["id"]]
    assert counts == (2 * len(kinds),)  # two whole blocks of 32, a row per kind in each
    assert spans == (1,)  # the head's open span; a chain's others are not stored
