"""As-of reads on either side of the frontier's watermark, at its worst lag.

A graph's frontier history (``frontier_spans``) trails its nodes by fewer than
``cwstore.derive_lag()`` of them: a read as of a node past the
watermark folds the nodes after it onto the spans at the watermark. This measures the
p50 of ``frontier_at``, ``export_v1``'s frontier and ``projection_v1`` as of three
points of one graph whose watermark trails by ``derive_lag() - 1`` nodes (the worst
case): the watermark itself (read from the spans alone), the node before the last
(``derive_lag() - 2`` nodes folded) and now (the graph's row). The graph: ``--nodes``
nodes of the benchmark workload imported, then appended one at a time until the lag is
the worst. The ratio "past / at the watermark" is the cost of the fold.

It creates a scratch database on the server of ``--dsn`` (the role needs CREATEDB) and
drops it at the end.

    python benchmarks/watermark_reads.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

try:
    import cwstore
except ImportError:  # run from a checkout without installing
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    import cwstore

from _workload import generate_nodes

READS = {
    "frontier_at": "SELECT count(*) FROM cwstore.frontier_at(%s, %s)",
    "export_v1 frontier": "SELECT frontier FROM cwstore.export_parts_v1(%s, %s) WHERE part = -1",
    "projection_v1": "SELECT length(cwstore.projection_v1(%s, %s))",
}


def _p50(conn: psycopg.Connection[Any], query: str, args: tuple[Any, ...], n: int) -> float:
    for _ in range(10):
        conn.execute(query, args).fetchall()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        conn.execute(query, args).fetchall()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _measure(dsn: str, nodes: int, reads: int) -> list[tuple[str, float, float, float]]:
    with cwstore.connect_sync(dsn, migrate_schema=True) as store:
        doc = generate_nodes(nodes + 200)["nodes"]
        head, rest = doc[:nodes], doc[nodes:]
        store.import_state(
            "g", {"version": 1, "nodes": head, "frontier": cwstore.fold_frontier(head)}
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            lag = int(conn.execute("SELECT cwstore.derive_lag()").fetchone()[0])  # type: ignore[index]
            conn.execute("SELECT cwstore.derive_v1('g')")
            for node in rest[: lag - 1]:
                store.append("g", [node])
            length, watermark = conn.execute(
                "SELECT length, derived_length FROM cwstore.graphs WHERE name = 'g'"
            ).fetchone()  # type: ignore[misc]
            assert length - watermark == lag - 1, (length, watermark)
            conn.execute("VACUUM ANALYZE")
            rows = []
            for name, query in READS.items():
                at = _p50(conn, query, ("g", watermark), reads)
                past = _p50(conn, query, ("g", length - 1), reads)
                now = _p50(conn, query, ("g", None), reads)
                rows.append((name, at, past, now))
            return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    name = f"cwbench_watermark_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(args.dsn, dbname=name)
    try:
        print("| nodes | read | at the watermark | 30 nodes past it | now | past / at |")
        print("| ---: | --- | ---: | ---: | ---: | ---: |")
        for n in args.nodes:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DROP SCHEMA IF EXISTS cwstore CASCADE")
            for read, at, past, now in _measure(dsn, n, args.reads):
                print(
                    f"| {n:,} | {read} | {at * 1e3:.3f} ms | {past * 1e3:.3f} ms"
                    f" | {now * 1e3:.3f} ms | {past / at:.2f}x |"
                )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    main()
