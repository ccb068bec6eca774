"""cwstore benchmarks: one command, one table of ratios measured side by side in one run.

    python benchmarks/run.py [--quick] [--dsn DSN] [--citus-dsn DSN] [--write-results]

Without ``--dsn`` an embedded PostgreSQL 18 (``cwstore.server``) is started in a
temporary home with the server's default durability settings (fsync on) and removed at
the end. With ``--dsn`` (a URL, e.g. ``postgresql://postgres@127.0.0.1:5432/test``) the
run creates two scratch databases on that server and drops them at the end; the role
needs CREATEDB. See benchmarks/README.md for what each row measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

try:
    import cwstore
except ImportError:  # a checkout that is not installed: use it in place
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    import cwstore

import _peers
import asyncpg
from _langgraph_peer import IMPORT_ERROR as LANGGRAPH_MISSING
from _results import RESULTS, write_section
from _workload import agent_steps, generate_nodes
from rich.console import Console
from rich.table import Table

from cwstore import AgentState, CausalNode, compute_id, fold_frontier
from cwstore._jsontext import dumps
from cwstore._store_base import COPY_COLUMNS
from cwstore.document import nodes_from_objs

HERE = Path(__file__).resolve().parent
NOT_INSTALLED = "not installed (pip install -e '.[bench]')"


# --- sizes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    import_nodes: int
    projection: tuple[int, ...]
    append_seconds: float  # per system and configuration, split over two rounds
    warmup_seconds: float
    agent_steps: int
    samples: int  # as-of points per projection size, reads per agent session
    peer_seconds: float = 2.0  # row 8: per system, workload and round
    peer_rounds: int = 2
    peer_cost_calls: int = 100  # row 8: calls per block when pricing a refused append


FULL = Sizes(100_000, (1_000, 100_000, 1_000_000), 10.0, 1.0, 1_000, 9)
QUICK = Sizes(20_000, (1_000, 10_000, 100_000), 3.0, 0.3, 200, 7, 1.0, 2, 50)


# --- the table ---------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    cwstore: str
    baseline: str
    ratio: str = "—"
    target: str = "—"
    ok: bool | None = None

    @property
    def verdict(self) -> str:
        return "—" if self.ok is None else ("PASS" if self.ok else "FAIL")


def rate(n: float, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s" if seconds > 0 else "∞"


def ms(seconds: float) -> str:
    v = seconds * 1000
    return f"{v:.2f} ms" if v < 10 else f"{v:.1f} ms" if v < 100 else f"{v:,.0f} ms"


def size_text(n: int) -> str:
    return (
        f"{n // 1_000_000}M"
        if n >= 1_000_000 and n % 1_000_000 == 0
        else (f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n))
    )


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.0f} kB"


def speedup(slow: float, fast: float) -> str:
    r = slow / fast
    return f"{r:.2f}x" if r < 10 else f"{r:,.0f}x"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


def spread(rng: random.Random, n: int, k: int) -> list[int]:
    """``k`` random points in 1..n, one in each of ``k`` equal slices: random, yet the
    median stays near n/2 whatever the draw (costs that grow with s stay comparable)."""
    return [rng.randint(i * n // k + 1, (i + 1) * n // k) for i in range(k)]


def at_least(name: str, cw: str, base: str, ratio: float, target: float) -> Row:
    return Row(name, cw, base, f"{ratio:.2f}x", f"≥ {target:.2f}x", ratio >= target)


def error_rows(title: str, exc: BaseException) -> list[Row]:
    traceback.print_exception(exc, file=sys.stderr)
    text = f"error: {type(exc).__name__}: {exc}"
    return [Row(title, text[:120], "—", ok=False)]


# --- the server and scratch databases ------------------------------------------------------


def with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit("--dsn must be a URL: postgresql://user@host:port/database")
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, ""))


@contextlib.contextmanager
def embedded_server() -> Iterator[str]:
    """A throwaway embedded server with PostgreSQL's default durability settings."""
    from cwstore.server import temporary_server

    # settings={} applies nothing: fsync, synchronous_commit and full_page_writes stay on.
    with temporary_server(settings={}) as dsn:
        yield dsn


async def create_database(admin: str, name: str) -> str:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(admin, name)


async def drop_database(admin: str, name: str) -> None:
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def git_commit() -> str:
    """`` (git <commit>[, modified])`` for a checkout, else nothing."""
    root = HERE.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "cwstore", "sql"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" (git {head}{', modified' if dirty else ''})"


async def machine_facts(dsn: str, server: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval("SHOW server_version")
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "shared_buffers", "max_connections")
        }
    finally:
        await conn.close()
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    load = os.getloadavg()

    def version_of(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "CPU": f"{os.cpu_count()} cores ({cpu})",
        "Memory": f"{memory / 2**30:.1f} GiB",
        "Load average at start": " / ".join(f"{x:.2f}" for x in load) + " (1 / 5 / 15 min)",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": sys.version.split()[0],
        "PostgreSQL": f"{version} ({server})",
        "Server settings": ", ".join(f"{k}={v}" for k, v in settings.items()),
        "cwstore": f"{cwstore.__version__}{git_commit()}",
        "asyncpg": version_of("asyncpg"),
        "langgraph-checkpoint-postgres": version_of("langgraph-checkpoint-postgres"),
    }


# --- row 1: import -------------------------------------------------------------------------


def prefix(doc: dict[str, Any], n: int) -> dict[str, Any]:
    nodes = doc["nodes"][:n]
    return {"version": 1, "nodes": nodes, "frontier": fold_frontier(nodes)}


def as_model(doc: dict[str, Any]) -> AgentState:
    """An unvalidated model, for setting up graphs that are not themselves measured."""
    return AgentState.model_construct(
        version=1,
        nodes=nodes_from_objs(doc["nodes"]),
        frontier=tuple(doc["frontier"]),
    )


def copy_records(doc: dict[str, Any], graph_id: int) -> list[tuple[Any, ...]]:
    return [
        (
            graph_id,
            n["sequence"],
            n["id"],
            n["kind"],
            n["parents"],
            dumps(n["payload"]),
            n["createdAt"],
            n.get("resourceKey"),
        )
        for n in doc["nodes"]
    ]


async def bench_import(dsn: str, store: cwstore.AsyncStore, doc: dict[str, Any]) -> list[Row]:
    n = len(doc["nodes"])
    start = time.perf_counter()
    problems = cwstore.validate(doc)
    validation = time.perf_counter() - start
    if problems:
        raise RuntimeError(f"the generated session is invalid: {problems[:3]}")

    start = time.perf_counter()
    await store.import_state("import", doc)
    cw_seconds = time.perf_counter() - start

    records = copy_records(doc, 1)
    conn = await asyncpg.connect(dsn)
    best = math.inf
    indexed = math.inf
    try:
        # The storage limit: the same rows into a table like cwstore.nodes (its generated
        # columns, defaults, constraints and indexes) without its triggers, so nothing
        # derived is checked or written. Best of two.
        for i in range(2):
            table = f"copy_indexed_{i}"
            await conn.execute(
                f"CREATE TABLE {table} (LIKE cwstore.nodes INCLUDING ALL EXCLUDING COMMENTS)"
            )
            start = time.perf_counter()
            await conn.copy_records_to_table(table, records=records, columns=COPY_COLUMNS)
            indexed = min(indexed, time.perf_counter() - start)
            await conn.execute(f"DROP TABLE {table}")
        for i in range(3):  # best of three: the baseline gets every benefit of the doubt
            table = f"copy_baseline_{i}"
            await conn.execute(
                f"CREATE UNLOGGED TABLE {table} (graph_id bigint, seq bigint, id text, "
                "kind text, parents text[], payload_text text, created_at_text text, "
                "resource_key text)"
            )
            start = time.perf_counter()
            await conn.copy_records_to_table(table, records=records)
            best = min(best, time.perf_counter() - start)
            await conn.execute(f"DROP TABLE {table}")
    finally:
        await conn.close()
    return [
        at_least(
            f"1 Import {size_text(n)} nodes",
            f"{rate(n, cw_seconds)} ({cw_seconds:.1f} s; validation {validation:.1f} s)",
            f"{rate(n, best)} (COPY, unlogged)",
            best / cw_seconds,
            0.50,
        ),
        Row(
            f"1 Import {size_text(n)}: COPY into the node table's indexes, no triggers",
            f"{rate(n, indexed)} ({indexed:.1f} s)",
            f"{rate(n, best)} (COPY, unlogged)",
            f"{best / indexed:.2f}x",
        ),
    ]


# --- row 2: appends --------------------------------------------------------------------------

FILLER = "Reading the module to find where the handler parses its configuration. " * 3
BASE_SQL = (
    "WITH c AS (UPDATE bench_counter SET length = length + 1 WHERE graph_id = $1 "
    "RETURNING length) INSERT INTO bench_items SELECT $1, length, $2, $3 FROM c"
)
PLAIN_SQL = "INSERT INTO bench_plain (graph_id, seq, id, payload) VALUES ($1, $2, $3, $4)"

Op = Callable[[], Awaitable[int]]


@dataclass
class Run:
    nodes: int
    seconds: float
    latencies: list[float]

    def __add__(self, other: Run) -> Run:
        return Run(
            self.nodes + other.nodes,
            self.seconds + other.seconds,
            self.latencies + other.latencies,
        )

    @property
    def rate(self) -> float:
        return self.nodes / self.seconds

    def text(self, unit: str = "nodes") -> str:
        return f"{self.rate:,.0f} {unit}/s, p99 {ms(pct(self.latencies, 0.99))}"


async def drive(ops: list[Op], seconds: float, warmup: float) -> Run:
    """Run every op in its own task in a loop: ``warmup`` unrecorded, then ``seconds``."""
    latencies: list[float] = []
    count = 0

    async def loop(op: Op, until: float, record: bool) -> None:
        nonlocal count
        while time.perf_counter() < until:
            t = time.perf_counter()
            n = await op()
            if record:
                latencies.append(time.perf_counter() - t)
                count += n

    until = time.perf_counter() + warmup
    await asyncio.gather(*(loop(op, until, False) for op in ops))
    start = time.perf_counter()
    await asyncio.gather(*(loop(op, start + seconds, True) for op in ops))
    return Run(count, time.perf_counter() - start, latencies)


def cw_writer(store: cwstore.AsyncStore, graph: str, writer: int, batch: int) -> Op:
    """Appends ``batch`` nodes per call, each the child of this writer's previous node."""
    prev: list[str] = []
    counter = 0

    async def op() -> int:
        nonlocal prev, counter
        nodes: list[dict[str, Any]] = []
        parents = prev
        for _ in range(batch):
            counter += 1
            payload = {"writer": writer, "n": counter, "text": FILLER}
            node: dict[str, Any] = {"kind": "inference", "parents": parents, "payload": payload}
            if batch > 1:  # later nodes of the batch name earlier ones: ids are needed here
                node["id"] = compute_id("inference", parents, payload)
                parents = [node["id"]]
            nodes.append(node)
        stored = await store.append(graph, nodes)
        prev = [stored[-1].id]
        return len(stored)

    return op


def base_writer(pool: asyncpg.Pool, graph_id: int, writer: int, plain: bool) -> Op:
    seq = 0

    async def op() -> int:
        nonlocal seq
        seq += 1
        payload = dumps({"writer": writer, "n": seq, "text": FILLER})
        node_id = f"cw_{writer:04x}{seq:020x}"
        async with pool.acquire() as conn:
            if plain:
                await conn.execute(PLAIN_SQL, graph_id, seq, node_id, payload)
            else:
                await conn.execute(BASE_SQL, graph_id, node_id, payload)
        return 1

    return op


async def bench_appends(dsn: str, store: cwstore.AsyncStore, sizes: Sizes) -> list[Row]:
    pool = await asyncpg.create_pool(dsn, min_size=16, max_size=16)
    rows: list[Row] = []
    next_id = 0
    try:
        async with pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE bench_counter (graph_id bigint PRIMARY KEY, length bigint NOT NULL);"
                "CREATE TABLE bench_items (graph_id bigint, seq bigint, id text, payload text, "
                "PRIMARY KEY (graph_id, seq));"
                "CREATE TABLE bench_plain (graph_id bigint, seq bigint, id text, payload text, "
                "PRIMARY KEY (graph_id, seq));"
            )

        async def base_graphs(count: int) -> list[int]:
            nonlocal next_id
            ids = list(range(next_id + 1, next_id + count + 1))
            next_id += count
            async with pool.acquire() as conn:
                await conn.executemany(
                    "INSERT INTO bench_counter VALUES ($1, 0)", [(i,) for i in ids]
                )
            return ids

        half = sizes.append_seconds / 2

        async def compare(label: str, writers: int, separate: bool) -> tuple[Run, Run]:
            cw = base = Run(0, 0.0, [])
            for rnd in range(2):  # A B A B: drift in machine load hits both alike
                if separate:
                    ops = [cw_writer(store, f"{label}-r{rnd}-w{w}", w, 1) for w in range(writers)]
                else:
                    ops = [cw_writer(store, f"{label}-r{rnd}", w, 1) for w in range(writers)]
                cw = cw + await drive(ops, half, sizes.warmup_seconds)
                ids = await base_graphs(writers if separate else 1)
                bops = [
                    base_writer(pool, ids[w] if separate else ids[0], w, separate)
                    for w in range(writers)
                ]
                base = base + await drive(bops, half, sizes.warmup_seconds)
            return cw, base

        for writers in (1, 4, 16):
            cw, base = await compare(f"one-{writers}", writers, False)
            rows.append(
                at_least(
                    f"2 Append, 1 graph, {writers} writer{'s' if writers > 1 else ''}",
                    cw.text(),
                    base.text("rows"),
                    cw.rate / base.rate,
                    0.90,
                )
            )
            if writers == 16:
                p99 = pct(cw.latencies, 0.99)
                rows.append(
                    Row(
                        "2 Append p99 latency, 16 writers",
                        ms(p99),
                        f"{ms(pct(base.latencies, 0.99))}",
                        "—",
                        "≤ 30 ms",
                        p99 <= 0.030,
                    )
                )
        batch = await drive(
            [cw_writer(store, "batch10", 0, 10)], sizes.append_seconds, sizes.warmup_seconds
        )
        rows.append(
            Row(
                "2 Append batches of 10, 1 writer",
                batch.text(),
                "—",
                "—",
                "≥ 5,000 nodes/s",
                batch.rate >= 5000,
            )
        )
        for writers in (4, 16):
            cw, base = await compare(f"sep-{writers}", writers, True)
            rows.append(
                at_least(
                    f"2 Append, separate graphs, {writers} writers",
                    cw.text(),
                    base.text("rows") + " (plain INSERT)",
                    cw.rate / base.rate,
                    0.70,
                )
            )
    finally:
        await pool.close()
    return rows


# --- row 3: projection ------------------------------------------------------------------------

FOLD_SQL = (
    "SELECT seq, id, kind, parents, payload_text, resource_key FROM cwstore.nodes "
    "WHERE graph_id = $1 AND seq <= $2 ORDER BY seq"
)


async def bench_citus(
    single: cwstore.AsyncStore, citus_dsn: str, sizes: Sizes, log: Callable[[str], None]
) -> list[Row]:
    """Appends on separate graphs (one writer each) through the coordinator of a Citus
    cluster, beside the same load on the single server, in alternating rounds. On one
    machine the cluster's nodes share its cores: this shows the cost of routing through
    the coordinator, not the speed-up of more machines."""
    import psycopg

    from cwstore.drivers.psycopg import PsycopgConnection
    from cwstore.migrate import apply_migrations_sync, distribute_sync

    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        apply_migrations_sync(PsycopgConnection(conn))
        distribute_sync(PsycopgConnection(conn))
        workers = conn.execute("SELECT count(*) FROM pg_dist_node WHERE groupid <> 0").fetchone()
    cluster = await cwstore.connect(citus_dsn, min_size=2, max_size=16, migrate_schema=False)
    rows: list[Row] = []
    tag = uuid.uuid4().hex[:8]
    try:
        for writers in (4, 16):
            single_run, citus_run = Run(0, 0.0, []), Run(0, 0.0, [])
            half = sizes.append_seconds / 2
            for rnd in range(2):
                log(f"7 Citus: {writers} writers, round {rnd + 1}")
                names = [f"citus-{tag}-{writers}-r{rnd}-w{w}" for w in range(writers)]
                single_run = single_run + await drive(
                    [cw_writer(single, n, w, 1) for w, n in enumerate(names)],
                    half,
                    sizes.warmup_seconds,
                )
                citus_run = citus_run + await drive(
                    [cw_writer(cluster, n, w, 1) for w, n in enumerate(names)],
                    half,
                    sizes.warmup_seconds,
                )
            rows.append(
                Row(
                    f"7 Append on Citus (1+{workers[0] if workers else '?'}, one machine),"
                    f" separate graphs, {writers} writers",
                    citus_run.text(),
                    "one server: " + single_run.text(),
                    f"{citus_run.rate / single_run.rate:.2f} of one server",
                )
            )
    finally:
        await cluster.close()
    return rows


async def python_fold(conn: asyncpg.Connection, graph_id: int, seq: int) -> dict[str, Any]:
    """The projection the straightforward way: read the prefix, fold it in Python.

    Frontier by SPEC section 4's fold, the newest version of every key (semantic keys
    as memory), the latest goal and answer, counts by kind. Payloads are parsed only
    for the nodes the answer shows, with the standard library's C parser.
    """
    rows = await conn.fetch(FOLD_SQL, graph_id, seq)
    frontier: dict[str, Any] = {}
    heads: dict[str, Any] = {}
    versions: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    latest: dict[str, Any] = {}
    for row in rows:
        kind, parents, key = row[2], row[3], row[5]
        counts[kind] += 1
        if key is not None:
            versions[key] += 1
            heads[key] = row
        if kind in ("goal", "answer"):
            latest[kind] = row
        if kind == "semantic" or (kind == "system" and not parents):
            continue
        for p in parents:
            frontier.pop(p, None)
        frontier[row[1]] = row
    semantic: dict[str, dict[str, Any]] = {}
    resources: dict[str, tuple[str, int, Any]] = {}
    for key, row in heads.items():
        payload = json.loads(row[4])
        if row[2] == "semantic":
            semantic.setdefault(payload["type"], {})[payload["key"]] = payload["content"]
        else:
            resources[key] = (row[1], versions[key], payload)
    return {
        "frontier": [(i, json.loads(r[4])) for i, r in frontier.items()],
        "resources": resources,
        "semantic": semantic,
        "latest": {k: (r[1], json.loads(r[4])) for k, r in latest.items()},
        "counts": dict(counts),
    }


def same_projection(p: Any, fold: dict[str, Any]) -> bool:
    return (
        [f.id for f in p.frontier] == [i for i, _ in fold["frontier"]]
        and p.counts == fold["counts"]
        and {k: (r.id, r.version) for k, r in p.resources.items()}
        == {k: (i, v) for k, (i, v, _) in fold["resources"].items()}
        and p.semantic == fold["semantic"]
        and (p.latest_goal.id if p.latest_goal else None) == fold["latest"].get("goal", (None,))[0]
    )


async def bench_projection(
    dsn: str, store: cwstore.AsyncStore, doc: dict[str, Any], imported: int, sizes: Sizes
) -> list[Row]:
    rng = random.Random(3)
    conn = await asyncpg.connect(dsn)
    rows: list[Row] = []
    medians: dict[int, tuple[float, float]] = {}
    mismatch: list[int] = []
    try:
        graphs: dict[int, tuple[str, int]] = {}
        for n in sizes.projection:
            graph = "import" if n == imported else f"projection-{size_text(n)}"
            if n != imported:
                await store.import_state(graph, as_model(prefix(doc, n)))
            graph_id = await conn.fetchval(
                "SELECT graph_id FROM cwstore.graphs WHERE name = $1", graph
            )
            graphs[n] = (graph, graph_id)
        # Right after a bulk import the planner's statistics are stale until autovacuum
        # analyzes the tables (within a minute or so): shown for information, then
        # brought up to date so the rows below measure the steady state.
        largest = max(graphs)
        fresh = []
        for s in [rng.randint(1, largest) for _ in range(3)]:
            start = time.perf_counter()
            await store.project(graphs[largest][0], as_of=s)
            fresh.append(time.perf_counter() - start)
        await conn.execute("ANALYZE")
        points = {n: spread(rng, n, sizes.samples) for n in graphs}
        for n, (graph, _) in graphs.items():
            await store.project(graph, as_of=points[n][0])  # warm up
        project_t: dict[int, list[float]] = {n: [] for n in graphs}
        fold_t: dict[int, list[float]] = {n: [] for n in graphs}
        # The sizes take turns, point by point, so the machine's changes of speed fall
        # on all of them alike (the growth row is a ratio between sizes).
        for i in range(sizes.samples):
            for n, (graph, graph_id) in graphs.items():
                s = points[n][i]
                calls = []
                for _ in range(3):  # cheap and noisy: the median of three calls
                    start = time.perf_counter()
                    p = await store.project(graph, as_of=s)
                    calls.append(time.perf_counter() - start)
                project_t[n].append(statistics.median(calls))
                start = time.perf_counter()
                fold = await python_fold(conn, graph_id, s)
                fold_t[n].append(time.perf_counter() - start)
                if not same_projection(p, fold):
                    mismatch.append(s)
        for n in graphs:
            medians[n] = (statistics.median(project_t[n]), statistics.median(fold_t[n]))
            pm, fm = medians[n]
            rows.append(
                Row(
                    f"3 Projection as of s, {size_text(n)} nodes",
                    ms(pm),
                    f"{ms(fm)} (Python fold)",
                    f"{speedup(fm, pm)} faster",
                )
            )
        rows.append(
            Row(
                f"3 Projection, {size_text(largest)}, just after import (before ANALYZE)",
                ms(statistics.median(fresh)),
                "—",
            )
        )
    finally:
        await conn.close()
    smallest, largest = min(medians), max(medians)
    growth = medians[largest][0] / medians[smallest][0]
    rows.append(
        Row(
            f"3 Projection growth, {size_text(largest)} / {size_text(smallest)}",
            f"{growth:.2f}x",
            "—",
            f"{growth:.2f}x",
            "≤ 1.50x",
            growth <= 1.5,
        )
    )
    at = 100_000 if 100_000 in medians else largest
    pm, fm = medians[at]
    rows.append(
        Row(
            f"3 Projection speedup over fold at {size_text(at)}",
            ms(pm),
            ms(fm),
            speedup(fm, pm),
            "≥ 100x",
            fm / pm >= 100,
        )
    )
    if mismatch:
        rows.append(
            Row("3 Projection equals the fold", f"MISMATCH at s={mismatch[:5]}", "—", ok=False)
        )
    else:
        rows.append(Row("3 Projection equals the fold", "same at every s", "—", ok=True))
    return rows


# --- row 4: replay --------------------------------------------------------------------------


async def best_of(times: int, call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """The fastest of ``times`` calls (the machine's noise only ever adds time)."""
    best, result = math.inf, None
    for _ in range(times):
        start = time.perf_counter()
        result = await call()
        best = min(best, time.perf_counter() - start)
    return best, result


async def bench_replay(dsn: str, store: cwstore.AsyncStore, n: int) -> list[Row]:
    await store.replay("import", as_of=1)  # warm up
    replay_t, state = await best_of(3, lambda: store.replay("import"))
    export_t, text = await best_of(3, lambda: store.export_json("import"))
    if len(state.nodes) != n or not text.startswith('{"version":1'):
        raise RuntimeError("replay returned the wrong document")
    conn = await asyncpg.connect(dsn)
    try:
        select_t, got = await best_of(
            3,
            lambda: conn.fetch(
                "SELECT seq, id, kind, parents, payload_text, created_at_text, resource_key "
                "FROM cwstore.nodes WHERE graph_id = (SELECT graph_id FROM cwstore.graphs "
                "WHERE name = 'import') ORDER BY seq"
            ),
        )
    finally:
        await conn.close()
    select = f"{rate(len(got), select_t)} (SELECT rows)"
    return [
        Row(
            f"4 Replay {size_text(n)} nodes (AgentState)",
            rate(n, replay_t),
            select,
            f"{select_t / replay_t:.2f}x",
        ),
        Row(
            f"4 Export JSON {size_text(n)} nodes",
            f"{rate(n, export_t)} ({mb(len(text))})",
            select,
            f"{select_t / export_t:.2f}x",
        ),
    ]


# --- row 5: versus LangGraph ------------------------------------------------------------------


def bench_savers(admin: str, sizes: Sizes) -> list[Row]:
    """Issue 25's rows: the checkpointers side by side, cwstore.langgraph's beside
    LangGraph's PostgreSQL saver, on langgraph_saver.py's session (one round, each saver
    in an interpreter of its own)."""
    steps = sizes.agent_steps
    title = f"5 Savers, {steps}-step thread"
    if LANGGRAPH_MISSING is not None:
        return [Row(title, NOT_INSTALLED, NOT_INSTALLED)]
    import langgraph_saver

    args = argparse.Namespace(dsn=admin, reads=200, seed=25)
    cw, lg = (
        langgraph_saver.run_apart(name, "chat", steps, args)
        for name in ("cwstore", "langgraph_postgres")
    )

    def row(what: str, key: str, target: float, text: Callable[[float], str]) -> Row:
        r = cw[key] / lg[key]
        return Row(
            f"{title}: {what}",
            text(cw[key]),
            text(lg[key]),
            f"{r:.3f}x",
            f"≤ {target:.2f}x",
            r <= target,
        )

    return [
        row("bytes", "bytes", 0.10, lambda v: mb(int(v))),
        row("put p50", "put_p50_ms", 0.50, lambda v: f"{v:.2f} ms"),
        row("past checkpoint read p50", "read_p50_ms", 0.50, lambda v: f"{v:.2f} ms"),
        row("same, each by a new saver, p50", "first_read_p50_ms", 1.00, lambda v: f"{v:.2f} ms"),
    ]


async def bench_langgraph(dsn: str, sizes: Sizes) -> list[Row]:
    steps = sizes.agent_steps
    title = f"5 vs LangGraph, {steps}-step agent session"
    if LANGGRAPH_MISSING is not None:
        return [Row(title, NOT_INSTALLED, NOT_INSTALLED)]
    from _langgraph_peer import LangGraphSession, to_langchain
    from _workload import SYSTEM_PROMPT as SYSTEM
    from _workload import Doc

    session = agent_steps(steps)
    # The same content twice: LangChain messages for LangGraph, nodes for cwstore.
    doc = Doc()
    system = doc.add("system", SYSTEM, [])
    batches: list[tuple[list[dict[str, Any]], list[str], int]] = []
    lc_steps: list[list[Any]] = []
    for i, msgs in enumerate(session):
        start = len(doc.nodes)
        lc = [to_langchain(SYSTEM, None)] if i == 0 else []
        goal = None
        for m in msgs:
            lc.append(to_langchain(SYSTEM, m))
            if m.role == "user":
                goal = doc.add("goal", m.text, [system, *doc.frontier])
            elif m.role == "assistant" and m.tool is not None:
                raw = m.text + "\nTOOL_CALL " + dumps({"name": m.tool, "args": m.args})
                doc.add(
                    "tool_call",
                    {"name": m.tool, "args": m.args, "raw": raw},
                    [*([goal] if goal else []), *doc.frontier],
                )
            elif m.role == "tool":
                doc.add("tool_result", {"tool": m.tool, "result": m.text}, [doc.nodes[-1]["id"]])
            else:
                doc.add("answer", m.text, list(doc.frontier))
        first = 0 if i == 0 else start
        nodes = [{k: v for k, v in n.items() if k != "sequence"} for n in doc.nodes[first:]]
        batches.append((nodes, list(doc.frontier), first))
        lc_steps.append(lc)
    if cwstore.validate({"version": 1, "nodes": doc.nodes, "frontier": list(doc.frontier)}):
        raise RuntimeError("the agent session is not a valid AgentState")
    gc.collect()
    gc.freeze()

    store = await cwstore.connect(dsn, min_size=1, max_size=2, migrate_schema=True)
    lg = await LangGraphSession.open(dsn)
    graph = "agent-session"
    cw_write: list[float] = []
    lg_write: list[float] = []
    lengths: list[int] = []
    configs: list[dict[str, Any]] = []
    try:
        for (nodes, frontier, before), lc in zip(batches, lc_steps, strict=True):
            t0 = time.perf_counter()
            await store.append(graph, nodes, expected_length=before, frontier=frontier)
            cw_write.append(time.perf_counter() - t0)
            lengths.append(before + len(nodes))
            seconds, config = await lg.put_step(lc)
            lg_write.append(seconds)
            configs.append(config)
        rng = random.Random(5)
        points = [i - 1 for i in spread(rng, steps, min(steps, sizes.samples * 3))]
        cw_read: list[float] = []
        lg_read: list[float] = []
        for i in points:
            t0 = time.perf_counter()
            state = await store.replay(graph, as_of=lengths[i])
            cw_read.append(time.perf_counter() - t0)
            seconds, messages = await lg.read(configs[i])
            lg_read.append(seconds)
            if len(state.nodes) != messages:  # the system message is node 1 too
                raise RuntimeError(
                    f"step {i}: cwstore {len(state.nodes)} nodes, LangGraph {messages} messages"
                )
        cw_bytes = await store_bytes(dsn)
        lg_bytes = await lg.stored_bytes()
    finally:
        await lg.close()
        await store.close()

    def at_most(name: str, cw: float, base: float, text: Callable[[float], str]) -> Row:
        r = cw / base
        return Row(
            name, text(cw), text(base), f"{r:.3f}x (1/{base / cw:,.0f})", "≤ 0.10x", r <= 0.10
        )

    nodes_n = len(doc.nodes)
    return [
        at_most(
            f"5 Bytes stored, {steps} steps ({nodes_n} nodes)",
            cw_bytes,
            lg_bytes,
            lambda v: mb(int(v)),
        ),
        at_most(
            "5 Write per step, p50", statistics.median(cw_write), statistics.median(lg_write), ms
        ),
        at_most(
            "5 Read state as of a past step, p50",
            statistics.median(cw_read),
            statistics.median(lg_read),
            ms,
        ),
    ]


async def store_bytes(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
                "JOIN pg_namespace s ON s.oid = c.relnamespace "
                "WHERE s.nspname = 'cwstore' AND c.relkind IN ('r', 'p', 'm')"
            )
        )
    finally:
        await conn.close()


# --- the run ----------------------------------------------------------------------------


async def store_sections(
    dsn: str,
    store: cwstore.AsyncStore,
    doc: dict[str, Any],
    sizes: Sizes,
    log: Callable[[str], None],
    only: str | None = None,
) -> list[Row]:
    """Rows 1 to 4 and 6, in the order that lets each reuse the graphs of the one before."""
    rows: list[Row] = []
    if only == "save":
        log("6 save")
        return await bench_save(store, doc, sizes, log)
    if only == "import":
        log("1 import")
        return await bench_import(dsn, store, prefix(doc, sizes.import_nodes))
    if only == "appends":
        log("2 appends")
        return await bench_appends(dsn, store, sizes)
    imported = 0
    log("1 import")
    try:
        rows += await bench_import(dsn, store, prefix(doc, sizes.import_nodes))
        imported = sizes.import_nodes
    except Exception as exc:
        rows += error_rows("1 Import", exc)
    log("3 projection")
    try:
        rows += await bench_projection(dsn, store, doc, imported, sizes)
    except Exception as exc:
        rows += error_rows("3 Projection", exc)
    log("4 replay")
    try:
        if not imported:
            raise RuntimeError("nothing imported (row 1 failed)")
        rows += await bench_replay(dsn, store, imported)
    except Exception as exc:
        rows += error_rows("4 Replay", exc)
    log("6 save")
    try:
        rows += await bench_save(store, doc, sizes, log)
    except Exception as exc:
        rows += error_rows("6 Save", exc)
    log("2 appends")
    try:
        rows += await bench_appends(dsn, store, sizes)
    except Exception as exc:
        rows += error_rows("2 Appends", exc)
    return rows


# --- row 6: save, one new node onto a long state ----------------------------------------

SAVE_SIZES = (1_000, 10_000, 100_000)
SAVE_FORMS = ("AgentState", "dict")


def save_turn(state: Any, turn: int) -> Any:
    """``state`` one node longer (an inference under the last node), in the same form:
    a new :class:`AgentState` sharing the old one's node objects, or the same dict
    with the node appended to its list, as an app holding its state would do."""
    last = state.nodes[-1].to_obj() if isinstance(state, AgentState) else state["nodes"][-1]
    payload = {"text": f"turn {turn} of the save benchmark", "length": len(last["id"])}
    new = {
        "id": compute_id("inference", [last["id"]], payload, None),
        "kind": "inference",
        "parents": [last["id"]],
        "payload": payload,
        "createdAt": "2026-12-03T12:00:00.000Z",
        "sequence": last["sequence"] + 1,
    }
    if isinstance(state, AgentState):
        return AgentState.model_construct(
            version=1, nodes=(*state.nodes, CausalNode.from_obj(new)), frontier=(new["id"],)
        )
    state["nodes"].append(new)
    state["frontier"] = [new["id"]]
    return state


async def bench_save(
    store: cwstore.AsyncStore, doc: dict[str, Any], sizes: Sizes, log: Callable[[str], None]
) -> list[Row]:
    """``store.save`` of a state one node longer than the stored graph, per state size
    and form (an :class:`AgentState`, or a parsed JSON document as a dict).

    Each graph is imported, then saved once as a whole (the first save of a graph by
    this store, shown as "first save"), then one node per turn is added to the state
    (outside the timing) and the state saved. Sizes and forms take turns, so machine
    load falls on all of them alike.
    """
    keys = [(form, n) for form in SAVE_FORMS for n in SAVE_SIZES]
    states: dict[tuple[str, int], Any] = {}
    first: dict[tuple[str, int], float] = {}
    for form, n in keys:
        part = prefix(doc, n)
        graph = f"save-{form}-{n}"
        await store.import_state(graph, as_model(part))
        state: Any = as_model(part) if form == "AgentState" else {**part, "nodes": part["nodes"]}
        start = time.perf_counter()
        await store.save(graph, state)
        first[form, n] = time.perf_counter() - start
        states[form, n] = state
    times: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
    budget = time.perf_counter() + 3 * sizes.append_seconds
    turn = 0
    while turn < 5 + sizes.samples * 20 and (turn < 8 or time.perf_counter() < budget):
        for form, n in keys:
            state = states[form, n] = save_turn(states[form, n], turn)
            start = time.perf_counter()
            written = await store.save(f"save-{form}-{n}", state)
            if turn >= 3:  # the first turns warm the connections
                times[form, n].append(time.perf_counter() - start)
            if len(written) != 1:
                raise RuntimeError(f"save wrote {len(written)} nodes, expected 1")
        turn += 1
    log(f"  {turn} turns per size and form")
    p50 = {k: statistics.median(t) for k, t in times.items()}
    rows: list[Row] = []
    small, large = SAVE_SIZES[0], SAVE_SIZES[-1]
    for form in SAVE_FORMS:
        rows += [
            Row(
                f"6 Save ({form}), 1 new node onto {size_text(n)} nodes",
                f"p50 {ms(p50[form, n])}, p99 {ms(pct(times[form, n], 0.99))} "
                f"(first save {ms(first[form, n])})",
                "—",
            )
            for n in SAVE_SIZES
        ]
        growth = p50[form, large] / p50[form, small]
        rows.append(
            Row(
                f"6 Save ({form}) growth, {size_text(large)} / {size_text(small)}",
                f"{growth:.2f}x",
                "—",
                f"{growth:.2f}x",
                "≤ 2.00x",
                growth <= 2.0,
            )
        )
        rows.append(
            Row(
                f"6 Save ({form}) p50 at {size_text(large)}",
                ms(p50[form, large]),
                "—",
                "—",
                "< 10 ms",
                p50[form, large] < 0.010,
            )
        )
    return rows


async def run(
    admin: str,
    server: str,
    sizes: Sizes,
    log: Callable[[str], None],
    only: str | None = None,
    citus_dsn: str | None = None,
) -> tuple[list[Row], dict[str, str]]:
    if only == "peers":
        return await peers_section(admin, server, sizes, log)
    tag = f"cwbench_{os.getpid()}"
    main_dsn = await create_database(admin, tag)
    agent_dsn = await create_database(admin, tag + "_agent")
    rows: list[Row] = []
    try:
        facts = await machine_facts(main_dsn, server)
        largest = {"appends": 1, "import": sizes.import_nodes, "save": max(SAVE_SIZES)}.get(
            only or "", max(sizes.import_nodes, *sizes.projection)
        )
        log(f"generating a {largest:,}-node session")
        start = time.perf_counter()
        doc = generate_nodes(largest)
        log(f"  {time.perf_counter() - start:.1f} s")
        # Millions of long-lived workload objects would make every full collection of
        # Python's garbage collector slow down whichever side happens to trigger it.
        gc.collect()
        gc.freeze()
        try:
            store = await cwstore.connect(main_dsn, min_size=2, max_size=16, migrate_schema=True)
        except Exception as exc:
            rows += error_rows("1-4 cwstore.connect", exc)
        else:
            try:
                rows += await store_sections(main_dsn, store, doc, sizes, log, only)
                if citus_dsn and only is None:
                    try:
                        rows += await bench_citus(store, citus_dsn, sizes, log)
                    except Exception as exc:
                        rows += error_rows("7 Citus", exc)
            finally:
                await store.close()
        del doc
        if only is not None:
            return rows, facts
        log("5 versus LangGraph")
        try:
            rows += await bench_langgraph(agent_dsn, sizes)
        except Exception as exc:
            rows += error_rows("5 vs LangGraph", exc)
        log("5 LangGraph savers")
        try:
            rows += await asyncio.to_thread(bench_savers, admin, sizes)
        except Exception as exc:
            rows += error_rows("5 Savers", exc)
        peer_rows, _ = await peers_section(admin, server, sizes, log, facts)
        rows += peer_rows
    finally:
        for name in (tag, tag + "_agent"):
            with contextlib.suppress(Exception):
                await drop_database(admin, name)
    rows.sort(key=lambda r: r.name[:1])  # table order 1..5, each section's rows in order
    return rows, facts


async def peers_section(
    admin: str,
    server: str,
    sizes: Sizes,
    log: Callable[[str], None],
    facts: dict[str, str] | None = None,
) -> tuple[list[Row], dict[str, str]]:
    """Row 8: cwstore, eventsourcing, message-db and the baseline, each in a scratch
    database of its own; the side-by-side table goes into ``facts["Peers"]``."""
    if facts is None:
        facts = await machine_facts(admin, server)
    facts["eventsourcing"] = version_of("eventsourcing")
    facts["message-db"] = (HERE / "message_db" / "VERSION.txt").read_text().strip() + " (vendored)"
    try:
        found = await _peers.measure(
            admin,
            with_database,
            create_database,
            drop_database,
            sizes.peer_seconds,
            sizes.warmup_seconds,
            sizes.peer_rounds,
            sizes.peer_cost_calls,
            log,
        )
    except Exception as exc:
        return error_rows("8 Peers", exc), facts
    facts["Peers"] = "\n" + _peers.markdown(found)
    return _peers.rows(found, Row), facts


def version_of(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def render(rows: list[Row], facts: dict[str, str], title: str, console: Console) -> None:
    table = Table(title=title, title_justify="left")
    for col in ("benchmark", "cwstore", "baseline", "ratio", "target", "pass?"):
        table.add_column(col, overflow="fold")
    for r in rows:
        verdict = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]"}.get(r.verdict, r.verdict)
        table.add_row(r.name, r.cwstore, r.baseline, r.ratio, r.target, verdict)
    console.print(table)
    for k, v in facts.items():
        if k != "Peers":
            console.print(f"[dim]{k}:[/] {v}")
    if "Peers" in facts:
        console.print("\nRow 8, every system side by side:", facts["Peers"], markup=False)


def markdown(rows: list[Row], facts: dict[str, str], suffix: str, command: str) -> str:
    """The run's section of RESULTS.md: its heading, the table, the machine facts."""

    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = [
        f"## Benchmark table{suffix}",
        "",
        f"Written by `{command}`; see README.md for what each row measures.",
        "",
        "| benchmark | cwstore | baseline | ratio | target | pass? |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            "| "
            + " | ".join(
                cell(x) for x in (r.name, r.cwstore, r.baseline, r.ratio, r.target, r.verdict)
            )
            + " |"
        )
    lines += ["", "### Machine", ""]
    lines += [f"- {k}: {v}" for k, v in facts.items() if k != "Peers"]
    if "Peers" in facts:
        lines += ["", "### Row 8, every system side by side", facts["Peers"]]
    return "\n".join(lines) + "\n"


def section_of(quick: bool, only: str | None) -> tuple[str, str]:
    """The RESULTS.md section a run writes, and its heading's suffix: a quick or partial
    run has a section of its own, so it never replaces the full run's table."""
    name = "run" + ("-quick" if quick else "") + (f"-{only}" if only else "")
    suffix = (", quick" if quick else "") + (f", {only} only" if only else "")
    return name, suffix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (under 3 minutes)")
    parser.add_argument(
        "--dsn",
        help="a PostgreSQL URL to benchmark on (scratch databases "
        "are created and dropped); default: embedded server",
    )
    parser.add_argument(
        "--only",
        choices=["import", "appends", "save", "peers"],
        help="run only this section (row 1: import, row 2: appends, row 6: save, "
        "row 8: appends beside eventsourcing, message-db and the baseline)",
    )
    parser.add_argument(
        "--citus-dsn",
        help="also: appends through this Citus coordinator (a database with citus on "
        "every node, e.g. from ci/citus/cluster.sh createdb) beside the same load on "
        "the single server",
    )
    parser.add_argument(
        "--write-results",
        action="store_true",
        help="write this run's section of benchmarks/RESULTS.md",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    console = Console(width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True)
    began = time.perf_counter()

    def log(msg: str) -> None:
        err.print(f"[dim]{time.perf_counter() - began:6.1f}s[/] {msg}")

    if args.dsn:
        rows, facts = asyncio.run(run(args.dsn, "--dsn", sizes, log, args.only, args.citus_dsn))
    else:
        log("starting an embedded PostgreSQL (default durability settings)")
        with embedded_server() as admin:
            rows, facts = asyncio.run(
                run(admin, "embedded, cwstore.server", sizes, log, args.only, args.citus_dsn)
            )
    total = time.perf_counter() - began
    facts["Run"] = (
        f"{'--quick' if args.quick else 'full'}, {total:.0f} s in total, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    title = f"cwstore benchmarks ({'quick' if args.quick else 'full'})"
    render(rows, facts, title, console)
    if args.write_results:
        command = (
            "python benchmarks/run.py"
            + (" --quick" if args.quick else "")
            + (f" --only {args.only}" if args.only else "")
            + (" --dsn …" if args.dsn else "")
            + " --write-results"
        )
        name, suffix = section_of(args.quick, args.only)
        write_section(name, markdown(rows, facts, suffix, command))
        console.print(f"wrote section {name!r} of {RESULTS}")
    return 1 if any(r.ok is False and r.cwstore.startswith("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
