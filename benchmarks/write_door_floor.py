"""One append's server CPU beside the floor that cwstore's tables set (issue 37).

Row 8 prices a single-node append at several times the one-statement baseline. This
measures how much of that the tables themselves ask for, and how much is the write
door around them, by building the append up from the baseline one piece at a time,
each a single statement on copies of cwstore's own tables:

1. **baseline**: row 8's counter row ``UPDATE`` feeding an ``INSERT`` into a bare table.
2. **node row**: the counter row, then the node into ``floor_nodes``, a copy of
   ``cwstore.nodes`` with its columns, defaults, generated column, constraints and
   indexes (``LIKE ... INCLUDING ALL``), no triggers.
3. **+ edge, frontier**: and its edge into a copy of ``cwstore.edges`` (the parent found
   by id, as the nodes trigger finds it) and the counter row's current frontier folded
   (the parent out, the node in).
4. **+ node checks**: and the node's payload and fields checked by
   ``cwstore._node_problem``, as every door checks them.
5. **+ batch checks**: instead of 4, the whole batch read and checked by
   ``cwstore._batch_fields`` (the JSON text of the batch, as ``append_v1`` takes it; it
   calls ``_node_problem``).
6. **append_v1**: the door as it is: the graph's tenant and life, the checks, the lock,
   the node, the nodes trigger (edges, frontier, length, the history's watermark), the
   returned rows.

Each row runs on a connection of its own, one call at a time, autocommit (a commit per
append), with generic plans (as the door's statements run); every node is the child of
the one before it, with row 8's payload. The measure is the backend's time on CPU
(``/proc/<pid>/schedstat``, so the server must run on this machine) per call, over
``--calls`` calls after a warm-up, in ``--rounds`` rounds that rotate the rows' order;
reported is each row's median and range over the rounds, and the ratio of medians to
the baseline. The scratch database is dropped at the end.

    python benchmarks/write_door_floor.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from _peers import BASE_ONE, BASE_SETUP, payload
from _results import RESULTS, command_line, run_header, versions, write_section
from run import with_database

import cwstore
from cwstore._jsontext import dumps

CREATED = "2026-01-01T00:00:00.000Z"

FLOOR_SETUP = """
CREATE TABLE floor_graphs (graph_id bigint PRIMARY KEY, length bigint NOT NULL,
                           written_at timestamptz, frontier_seqs bigint[] NOT NULL);
CREATE TABLE floor_nodes (LIKE cwstore.nodes INCLUDING ALL);
CREATE TABLE floor_edges (LIKE cwstore.edges INCLUDING ALL);
"""

NODE_ROW = """
WITH c AS (UPDATE floor_graphs SET length = length + 1, written_at = clock_timestamp()
            WHERE graph_id = $1 RETURNING length)
INSERT INTO floor_nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                         recorded_at, xid)
SELECT $1, c.length, $2, 'inference', $3::text[], $4, $5, now(),
       pg_current_xact_id()::text::bigint
  FROM c
"""

# {checks}: what the node's INSERT also reads (a CTE of checks) and requires of it.
WITH_EDGE = """
WITH {checks}
     c AS (UPDATE floor_graphs
              SET length = length + 1, written_at = clock_timestamp(),
                  frontier_seqs = array_append(
                    array_remove(frontier_seqs,
                                 (SELECT p.seq FROM floor_nodes p
                                   WHERE p.graph_id = $1 AND p.id = ($3::text[])[1])),
                    length + 1)
            WHERE graph_id = $1 RETURNING length),
     n AS (INSERT INTO floor_nodes (graph_id, seq, id, kind, parents, payload_text,
                                    created_at_text, recorded_at, xid)
           SELECT $1, c.length, $2, 'inference', $3::text[], $4, $5, now(),
                  pg_current_xact_id()::text::bigint
             FROM c {where}),
     e AS (INSERT INTO floor_edges (graph_id, child_seq, position, parent_seq)
           SELECT $1, c.length, u.o - 1, m.seq
             FROM c, unnest($3::text[]) WITH ORDINALITY AS u(pid, o)
             JOIN LATERAL (SELECT p.seq FROM floor_nodes p
                            WHERE p.graph_id = $1 AND p.id = u.pid LIMIT 1) m ON true)
SELECT c.length FROM c
"""
EDGE = WITH_EDGE.format(checks="", where="")
NODE_CHECKS = WITH_EDGE.format(
    checks="k AS (SELECT cwstore._node_problem('inference', $4, $5, NULL) AS problem),",
    where=", k WHERE k.problem IS NULL",
)
BATCH_CHECKS = WITH_EDGE.format(
    checks="k AS (SELECT b.b_ids FROM cwstore._batch_fields($6::json) b),",
    where=", k WHERE k.b_ids IS NOT NULL",
)
APPEND = "SELECT seq FROM cwstore.append_v1($1, $2::json)"


@dataclass
class Row:
    """One way of appending, with its own chain of nodes."""

    name: str
    statement: str
    args: Callable[[Row, int], tuple[Any, ...]]
    key: Any
    ids: list[str] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)

    def node_id(self, n: int) -> str:
        while len(self.ids) <= n:
            digest = hashlib.sha256(f"{self.name}:{len(self.ids)}".encode()).hexdigest()
            self.ids.append("cw_" + digest[:24])
        return self.ids[n]


def _floor_args(row: Row, n: int) -> tuple[Any, ...]:
    parents = [row.node_id(n - 1)] if n else []
    return (row.key, row.node_id(n), parents, dumps(payload(1, n)), CREATED)


def _batch_args(row: Row, n: int) -> tuple[Any, ...]:
    return (*_floor_args(row, n), _batch(row, n))


def _batch(row: Row, n: int) -> str:
    node = {
        "id": row.node_id(n),
        "kind": "inference",
        "parents": [row.node_id(n - 1)] if n else [],
        "payload": payload(1, n),
        "createdAt": CREATED,
    }
    return dumps([node])


def _append_args(row: Row, n: int) -> tuple[Any, ...]:
    return (row.key, _batch(row, n))


def _baseline_args(row: Row, n: int) -> tuple[Any, ...]:
    return (row.key, f"ev{n}", dumps(payload(1, n)), None)


def rows() -> list[Row]:
    return [
        Row("baseline", BASE_ONE, _baseline_args, "floor"),
        Row("node row", NODE_ROW, _floor_args, 1),
        Row("+ edge, frontier", EDGE, _floor_args, 2),
        Row("+ node checks", NODE_CHECKS, _floor_args, 3),
        Row("+ batch checks", BATCH_CHECKS, _batch_args, 4),
        Row("append_v1", APPEND, _append_args, f"floor-{uuid.uuid4().hex[:8]}"),
    ]


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


async def _measure(conn: asyncpg.Connection, row: Row, start: int, calls: int) -> float:
    """Server CPU (µs) per call over ``calls`` calls from node ``start`` on."""
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    statement = await conn.prepare(row.statement)
    before = _cpu_ns(pid)
    for n in range(start, start + calls):
        await statement.fetch(*row.args(row, n))
    return (_cpu_ns(pid) - before) / calls / 1000


async def _setup(dsn: str) -> None:
    store = await cwstore.connect(dsn, min_size=1, max_size=1, migrate_schema=True)
    await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(BASE_SETUP + FLOOR_SETUP)
        await conn.execute("INSERT INTO counter VALUES ('floor', 0)")
        await conn.execute(
            "INSERT INTO floor_graphs SELECT g, 0, NULL, '{}' FROM generate_series(1, 4) g"
        )
    finally:
        await conn.close()


async def run(dsn: str, rounds: int, calls: int, warmup: int) -> list[Row]:
    measured = rows()
    conns = [
        await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_generic_plan"})
        for _ in measured
    ]
    try:
        for conn, row in zip(conns, measured, strict=True):
            await _measure(conn, row, 0, warmup)
        at = warmup
        for r in range(rounds):
            order = measured[r % len(measured) :] + measured[: r % len(measured)]
            for row in order:
                conn = conns[measured.index(row)]
                row.samples.append(await _measure(conn, row, at, calls))
            at += calls
    finally:
        for conn in conns:
            await conn.close()
    return measured


async def _verify(dsn: str, appended: int) -> None:
    """Every row appended every node it was given (a check that refused them all would
    cost less and measure nothing), each after the one before."""
    conn = await asyncpg.connect(dsn)
    try:
        counts = {
            "baseline": await conn.fetchval("SELECT count(*) FROM items"),
            "floor nodes": await conn.fetch(
                "SELECT graph_id, count(*) AS n, max(seq) AS last FROM floor_nodes GROUP BY 1"
            ),
            "floor edges": await conn.fetch(
                "SELECT graph_id, count(*) AS n FROM floor_edges GROUP BY 1 ORDER BY 1"
            ),
            "append_v1": await conn.fetchval("SELECT count(*) FROM cwstore.nodes"),
        }
    finally:
        await conn.close()
    nodes = {r["graph_id"]: (r["n"], r["last"]) for r in counts["floor nodes"]}
    edges = {r["graph_id"]: r["n"] for r in counts["floor edges"]}
    expected = {
        "baseline": appended,
        "floor nodes": {g: (appended, appended) for g in (1, 2, 3, 4)},
        "floor edges": {g: appended - 1 for g in (2, 3, 4)},
        "append_v1": appended,
    }
    found = {
        "baseline": counts["baseline"],
        "floor nodes": nodes,
        "floor edges": edges,
        "append_v1": counts["append_v1"],
    }
    if found != expected:
        raise SystemExit(f"the rows did not all append: {found} != {expected}")


def markdown(measured: list[Row], header: str) -> str:
    base = statistics.median(measured[0].samples)
    lines = [
        header,
        "| append of one node | server CPU per call, median (range) | ratio to baseline |",
        "| --- | ---: | ---: |",
    ]
    for row in measured:
        mid = statistics.median(row.samples)
        lines.append(
            f"| {row.name} | {mid:.0f} µs ({min(row.samples):.0f}-{max(row.samples):.0f})"
            f" | {mid / base:.2f}x |"
        )
    return "\n".join(lines) + "\n"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="an admin DSN of a server on this machine")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    database = f"floor_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.dsn)
    await admin.execute(f'CREATE DATABASE "{database}"')
    try:
        server = str(await admin.fetchval("SHOW server_version"))
        scratch = with_database(args.dsn, database)
        await _setup(scratch)
        measured = await run(scratch, args.rounds, args.calls, args.warmup)
        await _verify(scratch, args.warmup + args.rounds * args.calls)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()
    header = run_header(
        "One append's server CPU beside its tables' floor",
        command_line(sys.argv),
        {"PostgreSQL": server, "Packages": versions("asyncpg")},
    )
    text = markdown(measured, header)
    print(text)
    if args.write_results:
        write_section("write-door-floor", text, RESULTS)


if __name__ == "__main__":
    asyncio.run(main())
