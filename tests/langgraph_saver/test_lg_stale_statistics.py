"""A put must not grow with the thread when the tables were analyzed while empty (issue
35): no sequential scan of ``nodes`` once the thread is long, whatever the statistics.

Counted, not timed: ``pg_stat_user_tables.seq_scan`` of ``cwstore.nodes`` over a
thread's puts (each with its pending writes and a read), in a database analyzed while
empty, with autovacuum off on cwstore's tables (so no later ANALYZE rescues the plans):
fewer than one scan per 10 puts (the first few, while the tables are tiny, may scan).

On main before the fix about 15 scans per put: generic plans made at a connection's
first calls, while the tables were small, and kept for its life (``append_v1`` runs
with ``force_generic_plan``, the saver's reads are prepared statements). The store's
connections now plan with ``enable_seqscan`` off (``cwstore.drivers._protocol``).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from support.langgraph import put_messages, thread_config

import cwstore
from cwstore.langgraph import CwstoreSaver

PUTS = 150
TABLES = ("nodes", "edges", "key_versions", "key_heads", "kind_counts", "frontier_spans")


def _seq_scans(c: psycopg.Connection[Any]) -> int:
    """The sequential scans of ``nodes`` so far, once the store's connections have
    closed (a backend's counters reach the shared statistics when it exits)."""
    found = -1
    for _ in range(50):
        time.sleep(0.2)
        row = c.execute(
            "SELECT seq_scan FROM pg_stat_user_tables WHERE schemaname = 'cwstore' "
            "AND relname = 'nodes'"
        ).fetchone()
        assert row is not None
        if int(row[0]) == found:
            return found
        found = int(row[0])
    return found


def test_puts_do_not_scan_nodes_with_statistics_of_empty_tables(empty_db_dsn: str) -> None:
    with cwstore.connect_sync(empty_db_dsn, migrate_schema=True):
        pass
    with psycopg.connect(empty_db_dsn, autocommit=True) as c:
        for table in TABLES:
            c.execute(f"ALTER TABLE cwstore.{table} SET (autovacuum_enabled = off)")
        c.execute("ANALYZE")
        before = _seq_scans(c)
        with cwstore.connect_sync(empty_db_dsn) as store:
            saver = CwstoreSaver(store)
            config = thread_config("long")
            messages: list[BaseMessage] = []
            for i in range(PUTS):
                messages = [*messages, HumanMessage(content=f"m{i}", id=f"m{i}")]
                config = put_messages(saver, config, messages, i + 1)
                writes = [("messages", [AIMessage(content="w", id=f"w{i}")])]
                saver.put_writes(config, writes, "t")
                assert saver.get_tuple(config) is not None
        assert _seq_scans(c) - before < PUTS // 10
