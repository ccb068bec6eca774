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
6. **+ edge, frontier by a statement trigger** and **by a row trigger**: row 2's
   statement into another copy of ``cwstore.nodes``, whose ``AFTER INSERT`` trigger
   (plpgsql, as cwstore's design keeps the current frontier: by triggers in the
   append's transaction) writes the edge and folds the frontier with row 3's
   statements. The statement trigger reads the new row from its transition table, as
   cwstore's nodes trigger does; the row trigger is given it. No checks: what the
   trigger itself costs, beside row 3.
7. **append_v1**: the door as it is: the graph's tenant and life, the checks, the lock,
   the node, the nodes trigger (edges, frontier, length, the history's watermark), the
   returned rows.
8. **one statement (prototype)**: a sketch of the next design, in a database of its own
   whose nodes, edges and graphs triggers are off: the graph's tenant and life
   (``_writer_life``) and the batch's checks (``_batch_fields``) as ``append_v1`` reads
   them, then one statement that locks and moves the graph's row (length, frontier,
   time), writes the node and its edge, and returns the rows. It handles only what this
   benchmark sends (one node without a resource key, no expected length, no declared
   frontier, no retry) and is no door: it prices the design, nothing more.

Each row runs on a connection of its own, one call at a time, autocommit (a commit per
append), with generic plans (as the door's statements run); every node is the child of
the one before it, with row 8's payload. The measure is the backend's time on CPU
(``/proc/<pid>/schedstat``, so the server must run on this machine) per call, over
``--calls`` calls after a warm-up, in ``--rounds`` rounds that rotate the rows' order;
reported is each row's median and range over the rounds, and the ratio of medians to
the baseline. The scratch databases are dropped at the end.

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
TARGET = 2.5
"""Issue 37: server CPU of a single-node append at most this many times the baseline's."""

FLOOR_SETUP = """
CREATE TABLE floor_graphs (graph_id bigint PRIMARY KEY, length bigint NOT NULL,
                           written_at timestamptz, frontier_seqs bigint[] NOT NULL);
CREATE TABLE floor_nodes (LIKE cwstore.nodes INCLUDING ALL);
CREATE TABLE floor_edges (LIKE cwstore.edges INCLUDING ALL);
"""

# Row 2's node row, into a copy of nodes whose trigger derives the edge and the frontier
# (floor_derive_statement for floor_snodes, floor_derive_row for floor_rnodes).
TRIGGER_SETUP = """
CREATE TABLE floor_snodes (LIKE cwstore.nodes INCLUDING ALL);
CREATE TABLE floor_sedges (LIKE cwstore.edges INCLUDING ALL);
CREATE TABLE floor_rnodes (LIKE cwstore.nodes INCLUDING ALL);
CREATE TABLE floor_redges (LIKE cwstore.edges INCLUDING ALL);
CREATE FUNCTION floor_derive_statement() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_gid bigint;
  v_seq bigint;
  v_parents text[];
BEGIN
  SELECT n.graph_id, n.seq, n.parents INTO v_gid, v_seq, v_parents FROM new_nodes n;
  INSERT INTO floor_sedges (graph_id, child_seq, position, parent_seq)
  SELECT v_gid, v_seq, u.o - 1, m.seq
    FROM unnest(v_parents) WITH ORDINALITY AS u(pid, o)
    JOIN LATERAL (SELECT p.seq FROM floor_snodes p
                   WHERE p.graph_id = v_gid AND p.id = u.pid LIMIT 1) m ON true;
  UPDATE floor_graphs
     SET frontier_seqs = array_append(
           array_remove(frontier_seqs, (SELECT p.seq FROM floor_snodes p
                                         WHERE p.graph_id = v_gid AND p.id = v_parents[1])),
           v_seq)
   WHERE graph_id = v_gid;
  RETURN NULL;
END $$;
CREATE TRIGGER floor_snodes_inserted AFTER INSERT ON floor_snodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION floor_derive_statement();
CREATE FUNCTION floor_derive_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO floor_redges (graph_id, child_seq, position, parent_seq)
  SELECT NEW.graph_id, NEW.seq, u.o - 1, m.seq
    FROM unnest(NEW.parents) WITH ORDINALITY AS u(pid, o)
    JOIN LATERAL (SELECT p.seq FROM floor_rnodes p
                   WHERE p.graph_id = NEW.graph_id AND p.id = u.pid LIMIT 1) m ON true;
  UPDATE floor_graphs
     SET frontier_seqs = array_append(
           array_remove(frontier_seqs, (SELECT p.seq FROM floor_rnodes p
                                         WHERE p.graph_id = NEW.graph_id
                                           AND p.id = NEW.parents[1])),
           NEW.seq)
   WHERE graph_id = NEW.graph_id;
  RETURN NULL;
END $$;
CREATE TRIGGER floor_rnodes_inserted AFTER INSERT ON floor_rnodes
  FOR EACH ROW EXECUTE FUNCTION floor_derive_row();
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
    checks="k AS (SELECT b.b_ids FROM cwstore._batch_fields($6::json, false) b),",
    where=", k WHERE k.b_ids IS NOT NULL",
)
STATEMENT_TRIGGER = NODE_ROW.replace("floor_nodes", "floor_snodes")
ROW_TRIGGER = NODE_ROW.replace("floor_nodes", "floor_rnodes")
APPEND = "SELECT seq FROM cwstore.append_v1($1, $2::json)"

PROTOTYPE_SETUP = """
ALTER TABLE cwstore.nodes DISABLE TRIGGER nodes_inserted;
ALTER TABLE cwstore.graphs DISABLE TRIGGER graphs_guard;
ALTER TABLE cwstore.edges DISABLE TRIGGER edges_derived;
CREATE FUNCTION one_statement_append(p_graph text, p_nodes json)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz,
               incarnation bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off AS $$
DECLARE
  v_life record;
  v_ids text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_kinds text[];
  v_par text[];
  v_now timestamptz := now();
BEGIN
  v_life := cwstore._writer_life(p_graph, true, NULL);
  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created
    FROM cwstore._batch_fields(p_nodes, false) f;
  v_par := ARRAY(SELECT json_array_elements_text(v_parents[1]::json));
  RETURN QUERY
  WITH p AS (SELECT u.o, m.seq FROM unnest(v_par) WITH ORDINALITY AS u(pid, o)
               LEFT JOIN LATERAL (SELECT m.seq FROM cwstore.nodes m
                                   WHERE m.graph_id = v_life.life_id AND m.id = u.pid
                                   LIMIT 1) m ON true),
       g AS (UPDATE cwstore.graphs g
                SET length = g.length + 1, written_at = clock_timestamp(),
                    frontier_seqs = cwstore._fold_frontier(g.frontier_seqs, ARRAY[g.length + 1],
                                                           (SELECT array_agg(p.seq) FROM p))
              WHERE g.graph_id = v_life.life_id AND g.incarnation = v_life.life_incarnation
             RETURNING g.length),
       n AS (INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                                        created_at_text, recorded_at, xid)
             SELECT v_life.life_id, g.length, v_ids[1], v_kinds[1], v_par, v_payloads[1],
                    v_created[1], v_now,
                    greatest(pg_current_xact_id()::text::bigint,
                             (SELECT l.xid FROM cwstore.nodes l
                               WHERE l.graph_id = v_life.life_id AND l.seq < g.length
                               ORDER BY l.seq DESC LIMIT 1))
               FROM g),
       e AS (INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
             SELECT v_life.life_id, g.length, p.o - 1, p.seq FROM g, p)
  SELECT g.length, v_ids[1], v_created[1], v_now, v_life.life_incarnation FROM g;
END $$;
"""
PROTOTYPE = "SELECT seq FROM one_statement_append($1, $2::json)"


@dataclass
class Row:
    """One way of appending, with its own chain of nodes."""

    name: str
    statement: str
    args: Callable[[Row, int], tuple[Any, ...]]
    key: Any
    database: str = "main"
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
        Row("+ edge, frontier by a statement trigger", STATEMENT_TRIGGER, _floor_args, 5),
        Row("+ edge, frontier by a row trigger", ROW_TRIGGER, _floor_args, 6),
        Row("append_v1", APPEND, _append_args, "floor"),
        Row("one statement (prototype)", PROTOTYPE, _append_args, "floor", "prototype"),
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


async def _setup(dsns: dict[str, str]) -> None:
    """The main database: cwstore's schema, the baseline's and the floor's tables; the
    prototype's: cwstore's schema, three of its triggers off, the prototype."""
    setup = {
        "main": BASE_SETUP
        + FLOOR_SETUP
        + TRIGGER_SETUP
        + "INSERT INTO counter VALUES ('floor', 0);"
        + "INSERT INTO floor_graphs SELECT g, 0, NULL, '{}' FROM generate_series(1, 6) g;",
        "prototype": PROTOTYPE_SETUP,
    }
    for name, dsn in dsns.items():
        store = await cwstore.connect(dsn, min_size=1, max_size=1, migrate_schema=True)
        await store.close()
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(setup[name])
        finally:
            await conn.close()


async def run(dsns: dict[str, str], rounds: int, calls: int, warmup: int) -> list[Row]:
    measured = rows()
    conns = [
        await asyncpg.connect(
            dsns[row.database], server_settings={"plan_cache_mode": "force_generic_plan"}
        )
        for row in measured
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


async def _fetch(dsn: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def _verify(dsns: dict[str, str], appended: int) -> None:
    """Every row appended every node it was given, each the child of the one before (a
    check that refused them all would cost less and measure nothing)."""
    main, prototype = dsns["main"], dsns["prototype"]
    found = [
        await _fetch(main, "SELECT count(*), max(seq) FROM items"),
        await _fetch(main, "SELECT graph_id, count(*), max(seq) FROM floor_nodes GROUP BY 1"),
        await _fetch(main, "SELECT graph_id, count(*) FROM floor_edges GROUP BY 1"),
        await _fetch(main, "SELECT length, frontier_seqs FROM floor_graphs WHERE graph_id > 1"),
        await _fetch(main, "SELECT graph_id, count(*), max(seq) FROM floor_snodes GROUP BY 1"),
        await _fetch(main, "SELECT graph_id, count(*) FROM floor_sedges GROUP BY 1"),
        await _fetch(main, "SELECT graph_id, count(*), max(seq) FROM floor_rnodes GROUP BY 1"),
        await _fetch(main, "SELECT graph_id, count(*) FROM floor_redges GROUP BY 1"),
        await _fetch(main, "SELECT count(*), max(seq) FROM cwstore.nodes"),
        await _fetch(main, "SELECT count(*) FROM cwstore.edges"),
        await _fetch(prototype, "SELECT count(*), max(seq) FROM cwstore.nodes"),
        await _fetch(prototype, "SELECT count(*) FROM cwstore.edges"),
        await _fetch(prototype, "SELECT length, frontier_seqs FROM cwstore.graphs"),
    ]
    n = appended
    expected: list[list[tuple[Any, ...]]] = [
        [(n, n)],
        [(g, n, n) for g in (1, 2, 3, 4)],
        [(g, n - 1) for g in (2, 3, 4)],
        [(n, [n])] * 5,
        [(5, n, n)],
        [(5, n - 1)],
        [(6, n, n)],
        [(6, n - 1)],
        [(n, n)],
        [(n - 1,)],
        [(n, n)],
        [(n - 1,)],
        [(n, [n])],
    ]
    if [sorted(f) for f in found] != [sorted(e) for e in expected]:
        raise SystemExit(f"the rows did not all append: {found} != {expected}")


def markdown(measured: list[Row], header: str) -> str:
    base = statistics.median(measured[0].samples)
    door = statistics.median(measured[-2].samples) / base
    lines = [
        header,
        "A single-node append built up from row 8's one-statement baseline, each row one",
        "statement on copies of cwstore's tables (node row; its edge and the frontier; the",
        "node's checks; or the batch's; or the edge and the frontier written by a trigger),",
        "then the door (`append_v1`) and a sketch of the",
        "next design (one statement after the checks, which handles only this benchmark's",
        "appends); what each row is, in the script's docstring. Server CPU of the backend",
        f"per call, {len(measured[0].samples)} rounds rotating the rows' order. Issue 37's",
        f"target for `append_v1`: at most {TARGET}x the baseline"
        f" ({'met' if door <= TARGET else 'not met'}: {door:.2f}x).",
        "",
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
    tag = uuid.uuid4().hex[:8]
    databases = {"main": f"floor_{tag}", "prototype": f"floor_{tag}_prototype"}
    admin = await asyncpg.connect(args.dsn)
    try:
        server = str(await admin.fetchval("SHOW server_version"))
        for database in databases.values():
            await admin.execute(f'CREATE DATABASE "{database}"')
        dsns = {k: with_database(args.dsn, v) for k, v in databases.items()}
        await _setup(dsns)
        measured = await run(dsns, args.rounds, args.calls, args.warmup)
        await _verify(dsns, args.warmup + args.rounds * args.calls)
    finally:
        for database in databases.values():
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
