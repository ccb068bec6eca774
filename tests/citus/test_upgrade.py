"""A database already distributed on Citus upgrades with ``cwstore init``.

Citus passes the text of a query to its workers when the query changes a distributed
table, and refuses a text of several statements there; and a migration that redefines a
function drops the settings ``sql/citus.sql`` gave it. So the runner sends a
migration one statement at a time, and ``cwstore init`` re-applies ``citus.sql`` on a
distributed database. Here a cluster distributed at migration 0003 takes every later
migration and goes on appending, with the nodes it held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager as ContextManager

import psycopg
import pytest
from support.nodes import T0

import cwstore
from cwstore._sql import Migration, migrations

pytestmark = pytest.mark.skipif(
    not os.environ.get("CWSTORE_TEST_CITUS_DSN"),
    reason="CWSTORE_TEST_CITUS_DSN is not set: no Citus cluster for these tests",
)


@pytest.mark.parametrize("path", ["cwstore init", "connect(migrate_schema=True)"])
def test_a_distributed_database_takes_the_later_migrations(
    new_citus_database: Callable[[Sequence[Migration] | None], ContextManager[str]], path: str
) -> None:
    """Every way that migrates (both call cwstore.migrate.setup) re-applies citus.sql on a
    distributed database, so appends go on working after migrations that redefine the
    functions it sets up and add tables it distributes."""
    files = migrations()
    assert len(files) > 3
    graph = f"upgrade-{uuid.uuid4().hex[:8]}"
    with new_citus_database(files[:3]) as dsn:
        # Written as a client of that release did: the two arguments every append_v1 takes
        # (this release's client needs the later migrations first).
        one = {"kind": "goal", "parents": [], "payload": "one", "createdAt": T0}
        one["id"] = cwstore.compute_id("goal", [], "one", None)
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                (graph, json.dumps([one])),
            )
        before = [str(one["id"])]
        if path == "cwstore init":
            done = subprocess.run(
                [sys.executable, "-m", "cwstore", "init", "--dsn", dsn],
                capture_output=True,
                text=True,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert f"applied {len(files) - 3} migration" in done.stderr
            assert "re-applied" in done.stderr
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
        # Shards made before 0008 keep no statistics of content either (citus.sql).
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
