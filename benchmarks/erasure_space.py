"""What erasing frees: table, TOAST and index sizes of every cwstore table, before and
after erasing half the graphs, after VACUUM, and (with --vacuum-full) after VACUUM FULL.

It creates a scratch database (``--database``, default ``erasure_space``) on the server
of ``--dsn``, migrates it, imports ``--graphs`` graphs of ``--nodes`` nodes each
(benchmarks/_workload.py's sessions, a different seed per graph), and drops the database
at the end (unless ``--keep``). Autovacuum is switched off on the cwstore tables of the
scratch database, so each stage measures what that stage did, not what a worker did
meanwhile. Erasure goes through ``cwstore.erase_graph_v1``, one transaction per graph,
every other graph.

    python benchmarks/erasure_space.py --dsn postgresql://postgres@127.0.0.1:5432/postgres \\
        --graphs 200 --nodes 2000 --vacuum-full
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

try:
    import cwstore
except ImportError:  # run from a checkout without installing
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    import cwstore

from _results import RESULTS, command_line, run_header, write_section
from _workload import generate_nodes

from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

SIZES = """
SELECT c.relname,
       pg_relation_size(c.oid),
       coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       pg_indexes_size(c.oid),
       pg_total_relation_size(c.oid)
  FROM pg_class c
 WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind IN ('r', 'p')
 ORDER BY pg_total_relation_size(c.oid) DESC, c.relname
"""
"""Per table: heap (main fork), TOAST (its table and index), indexes, total."""


@dataclass(frozen=True)
class Size:
    heap: int
    toast: int
    indexes: int
    total: int


def measure(conn: psycopg.Connection[Any]) -> dict[str, Size]:
    conn.execute("CHECKPOINT")
    return {str(r[0]): Size(*(int(x) for x in r[1:])) for r in conn.execute(SIZES).fetchall()}


def mb(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def report(stages: list[tuple[str, dict[str, Size]]]) -> str:
    """A Markdown table: one row per table, one column group per stage."""
    tables = list(stages[0][1])
    head = ["table"]
    for name, _ in stages:
        head.append(f"{name}: total (heap / toast / idx)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [*tables, "ALL"]
    for t in rows:
        cells = [t if t != "ALL" else "**all cwstore tables**"]
        for _, sizes in stages:
            if t == "ALL":
                s = Size(
                    *(sum(getattr(x, f) for x in sizes.values()) for f in Size.__annotations__)
                )
            else:
                s = sizes.get(t, Size(0, 0, 0, 0))
            cells.append(f"{mb(s.total)} ({mb(s.heap)} / {mb(s.toast)} / {mb(s.indexes)})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def dsn_for(dsn: str, database: str) -> str:
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params["dbname"] = database
    return make_conninfo("", **params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("CWSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="a superuser DSN of the server (env CWSTORE_DSN)",
    )
    parser.add_argument("--database", default="erasure_space", help="scratch database name")
    parser.add_argument("--graphs", type=int, default=200, help="graphs to fill (N)")
    parser.add_argument("--nodes", type=int, default=2000, help="nodes per graph (M)")
    parser.add_argument("--vacuum-full", action="store_true", help="also VACUUM FULL")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--write-results", action="store_true", help="write its section of benchmarks/RESULTS.md"
    )
    args = parser.parse_args(argv)
    if args.graphs < 2 or args.nodes < 1:
        parser.error("--graphs >= 2 and --nodes >= 1")

    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(args.database))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(args.database)))
    dsn = dsn_for(args.dsn, args.database)
    try:
        run(dsn, args)
    finally:
        if not args.keep:
            with psycopg.connect(args.dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(args.database)
                    )
                )
    return 0


def run(dsn: str, args: argparse.Namespace) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn))
        for (t,) in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c"
            " WHERE c.relnamespace = 'cwstore'::regnamespace AND c.relkind = 'r'"
            "   AND c.relpersistence = 'p'"
        ).fetchall():
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(sql.SQL(t))
            )
    names = [f"space-{i:05d}" for i in range(args.graphs)]
    started = time.perf_counter()
    store = cwstore.connect_sync(dsn, min_size=1, max_size=2, migrate_schema=False)
    try:
        for i, name in enumerate(names):
            store.import_state(name, generate_nodes(args.nodes, seed=i))
            if (i + 1) % 25 == 0:
                print(f"  imported {i + 1}/{len(names)} graphs", file=sys.stderr)
    finally:
        store.close()
    filled = time.perf_counter() - started
    print(f"filled {args.graphs} graphs x {args.nodes} nodes in {filled:.1f} s", file=sys.stderr)
    timings = [f"filled {args.graphs} graphs x {args.nodes} nodes in {filled:.1f} s"]

    stages: list[tuple[str, dict[str, Size]]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # a settled start: hint bits set, visibility map
        stages.append(("filled", measure(conn)))
        started = time.perf_counter()
        erased = 0
        for name in names[::2]:
            erased += int(
                conn.execute("SELECT cwstore.erase_graph_v1(%s, 'space')", (name,)).fetchone()[0]
            )  # type: ignore[index]
        took = time.perf_counter() - started
        timings.append(
            f"erased {len(names[::2])} graphs ({erased} nodes) in {took:.1f} s"
            f" ({took / len(names[::2]) * 1000:.0f} ms per graph)"
        )
        print(timings[-1], file=sys.stderr)
        stages.append(("erased half", measure(conn)))
        started = time.perf_counter()
        conn.execute("VACUUM")
        timings.append(f"VACUUM in {time.perf_counter() - started:.1f} s")
        print(timings[-1], file=sys.stderr)
        stages.append(("VACUUM", measure(conn)))
        free = _free_space(conn)
        if args.vacuum_full:
            started = time.perf_counter()
            conn.execute("VACUUM FULL")
            timings.append(f"VACUUM FULL in {time.perf_counter() - started:.1f} s")
            print(timings[-1], file=sys.stderr)
            stages.append(("VACUUM FULL", measure(conn)))
        server = conn.execute("SHOW server_version").fetchone()
    out = [
        "Sizes in MiB.",
        "",
        report(stages),
        "",
        f"Free space held for reuse after VACUUM (pg_freespacemap): {free}.",
        "",
        "; ".join(timings) + ".",
    ]
    print(f"PostgreSQL {server[0] if server else '?'}")
    print("\n".join(out))
    if args.write_results:
        facts = {"PostgreSQL": str(server[0]) if server else "?", "cwstore": cwstore.__version__}
        header = run_header("Erasure space", command_line(sys.argv), facts)
        write_section("erasure-space", header + "\n" + "\n".join(out) + "\n")
        print(f"wrote section 'erasure-space' of {RESULTS}")


def _free_space(conn: psycopg.Connection[Any]) -> str:
    """Free space recorded for reuse in the heap and TOAST of cwstore.nodes, if
    pg_freespacemap is available (else the number is left out)."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_freespacemap")
        row = conn.execute(
            "SELECT (SELECT sum(avail) FROM pg_freespace('cwstore.nodes'::regclass)),"
            " (SELECT sum(avail) FROM pg_freespace(reltoastrelid::regclass))"
            " FROM pg_class WHERE oid = 'cwstore.nodes'::regclass"
        ).fetchone()
    except psycopg.Error as exc:
        return f"not measured ({exc.sqlstate})"
    heap, toast = (int(x or 0) for x in (row or (0, 0)))
    return f"cwstore.nodes heap {mb(heap)} MiB, its TOAST {mb(toast)} MiB"


if __name__ == "__main__":
    raise SystemExit(main())
