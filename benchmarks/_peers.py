"""Row 8: cwstore's appends beside its peers and the one-statement baseline, one run.

Four systems take the same appends, each in a scratch database of its own on the same
server, in alternating rounds (the order rotates every round, so a change in machine
load falls on all alike):

- **cwstore**: ``AsyncStore.append`` (asyncpg pool of 16), one node per event, each
  writer's node the child of its own previous node; with ``expected_length`` a
  :class:`cwstore.LengthConflictError` carries the graph's length and the writer retries
  with it.
- **eventsourcing** (PyPI ``eventsourcing[postgres]``, 9.x): its
  ``PostgresApplicationRecorder`` (the recorder its ``Application`` uses: one table,
  ``LOCK TABLE ... IN EXCLUSIVE MODE`` per insert for its gapless notification log)
  over its own psycopg pool of 16, called from 16 threads. Every insert names the
  aggregate version it writes; a taken version raises its ``IntegrityError``, and the
  writer does what its docs say for a conflict: it reads the aggregate's latest version
  again (``select_events(desc=True, limit=1)``) and retries. It has no unchecked append,
  so its rows with and without ``expected_length`` are the same operation.
- **message-db** 1.3.0 (``benchmarks/message_db/``, vendored): ``write_message`` over
  asyncpg, streams ``graph-<name>`` of one category; with an expected version, its
  ``Wrong expected version`` error makes the writer read ``stream_version`` and retry.
  Batches are ``write_message`` ten times in one transaction.
- **baseline**: the minimal gapless per-stream counter, one statement on a bare table
  pair (row 2's): ``UPDATE counter ... RETURNING length`` feeding ``INSERT``; with an
  expected length the ``UPDATE`` also requires ``length = $expected`` (no row: a
  conflict, the writer reads the length and retries); a batch adds 10 to the counter
  and inserts 10 rows from ``unnest``.

Per system and workload: events committed per second, p50/p99 per call (a call that
met conflicts includes its retries), conflicts per committed event, and server CPU per
committed event: the time on CPU of every client backend of the system's database
(``/proc/<pid>/schedstat``, read before and after each round), which other processes'
load does not inflate. After the workloads, what each system wrote per event: bytes of
its tables (heap, TOAST, indexes), tuples inserted and updated (``pg_stat_user_tables``
once its connections have closed and flushed their counters).

A second part measures one connection's calls one at a time, to price a refused append:
server CPU of a successful single-event append and of one refused for a stale expected
length, per system.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

import cwstore
from cwstore import compute_id
from cwstore._jsontext import dumps
from cwstore.drivers._conninfo import parse_conninfo

try:
    from eventsourcing.persistence import IntegrityError as EsIntegrityError
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
except ImportError as exc:  # the bench extra is not installed
    EVENTSOURCING_MISSING: str | None = f"{exc}"
else:
    EVENTSOURCING_MISSING = None

HERE = Path(__file__).resolve().parent
MESSAGE_DB = HERE / "message_db"
# message-db's install.sh, install-functions.sh and install-indexes.sh, in their order.
MESSAGE_DB_FILES = (
    "schema/message-store.sql",
    "extensions/pgcrypto.sql",
    "tables/messages.sql",
    "types/message.sql",
    "functions/message-store-version.sql",
    "functions/hash-64.sql",
    "functions/acquire-lock.sql",
    "functions/category.sql",
    "functions/is-category.sql",
    "functions/id.sql",
    "functions/cardinal-id.sql",
    "functions/stream-version.sql",
    "functions/write-message.sql",
    "functions/get-stream-messages.sql",
    "functions/get-category-messages.sql",
    "functions/get-last-stream-message.sql",
    "indexes/messages-id.sql",
    "indexes/messages-stream.sql",
    "indexes/messages-category.sql",
)

FILLER = "Reading the module to find where the handler parses its configuration. " * 3
SYSTEMS = ("cwstore", "eventsourcing", "message-db", "baseline")


def payload(writer: int, n: int) -> dict[str, Any]:
    return {"writer": writer, "n": n, "text": FILLER}


class Conflicted(Exception):
    """The stream had moved on; ``actual`` is its length when the system says it."""

    def __init__(self, actual: int | None) -> None:
        super().__init__(actual)
        self.actual = actual


# --- the systems -------------------------------------------------------------------------
#
# append(stream, writer, count, expected) writes ``count`` events to ``stream`` and
# returns the stream's length after them, or raises Conflicted when ``expected`` (a
# length) is stale. length(stream) reads the length. Lengths count events, whatever each
# system numbers its versions from.


class CwstoreSystem:
    name = "cwstore"
    always_versioned = False

    def __init__(self, store: cwstore.AsyncStore) -> None:
        self.store = store
        self.prev: dict[tuple[str, int], list[str]] = {}
        self.n = 0

    async def append(self, stream: str, writer: int, count: int, expected: int | None) -> int:
        parents = self.prev.get((stream, writer), [])
        nodes: list[dict[str, Any]] = []
        for _ in range(count):
            self.n += 1
            body = payload(writer, self.n)
            node: dict[str, Any] = {"kind": "inference", "parents": parents, "payload": body}
            if count > 1:  # later nodes of the batch name earlier ones: ids needed here
                node["id"] = compute_id("inference", parents, body)
                parents = [node["id"]]
            nodes.append(node)
        try:
            stored = await self.store.append(stream, nodes, expected_length=expected)
        except cwstore.LengthConflictError as e:
            raise Conflicted(e.actual_length) from e
        self.prev[stream, writer] = [stored[-1].id]
        return stored[-1].sequence

    async def length(self, stream: str) -> int:
        return await self.store.length(stream)

    async def close(self) -> None:
        await self.store.close()


BASE_SETUP = (
    "CREATE TABLE counter (stream text PRIMARY KEY, length bigint NOT NULL);"
    "CREATE TABLE items (stream text, seq bigint, id text, payload text, "
    "PRIMARY KEY (stream, seq));"
)
BASE_ONE = (
    "WITH c AS (UPDATE counter SET length = length + 1 WHERE stream = $1 "
    "AND ($4::bigint IS NULL OR length = $4) RETURNING length) "
    "INSERT INTO items SELECT $1, length, $2, $3 FROM c RETURNING seq"
)
BASE_MANY = (
    "WITH c AS (UPDATE counter SET length = length + cardinality($2::text[]) WHERE stream = $1 "
    "AND ($4::bigint IS NULL OR length = $4) RETURNING length) "
    "INSERT INTO items SELECT $1, c.length - cardinality($2::text[]) + u.o, u.id, u.payload "
    "FROM c, unnest($2::text[], $3::text[]) WITH ORDINALITY AS u(id, payload, o) RETURNING seq"
)


class BaselineSystem:
    name = "baseline"
    always_versioned = False

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.n = 0
        self.streams: set[str] = set()

    async def append(self, stream: str, writer: int, count: int, expected: int | None) -> int:
        if stream not in self.streams:  # every writer makes sure before its first write
            async with self.pool.acquire() as conn:
                await conn.execute(
                    "INSERT INTO counter VALUES ($1, 0) ON CONFLICT DO NOTHING", stream
                )
            self.streams.add(stream)
        self.n += count
        async with self.pool.acquire() as conn:
            if count == 1:
                seq = await conn.fetchval(
                    BASE_ONE, stream, f"ev{self.n}", dumps(payload(writer, self.n)), expected
                )
            else:
                ids = [f"ev{self.n - count + i}" for i in range(count)]
                bodies = [dumps(payload(writer, self.n - count + i)) for i in range(count)]
                seqs = await conn.fetch(BASE_MANY, stream, ids, bodies, expected)
                seq = max(r[0] for r in seqs) if seqs else None
        if seq is None:
            raise Conflicted(None)
        return int(seq)

    async def length(self, stream: str) -> int:
        async with self.pool.acquire() as conn:
            return int(await conn.fetchval("SELECT length FROM counter WHERE stream = $1", stream))

    async def close(self) -> None:
        await self.pool.close()


MDB_WRITE = "SELECT message_store.write_message($1, $2, 'Inference', $3::jsonb, NULL, $4)"


class MessageDbSystem:
    name = "message-db"
    always_versioned = False

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.n = 0

    @staticmethod
    def stream_name(stream: str) -> str:
        # One category ("graph"): message-db's lock is per category (acquire_lock).
        return "graph-" + stream.replace("-", "_")

    async def append(self, stream: str, writer: int, count: int, expected: int | None) -> int:
        name = self.stream_name(stream)
        version = None if expected is None else expected - 1  # its versions start at 0
        try:
            async with self.pool.acquire() as conn:
                if count == 1:
                    self.n += 1
                    position = await conn.fetchval(
                        MDB_WRITE, str(uuid.uuid4()), name, dumps(payload(writer, self.n)), version
                    )
                else:
                    args = []
                    for i in range(count):
                        self.n += 1
                        args.append(
                            (
                                str(uuid.uuid4()),
                                name,
                                dumps(payload(writer, self.n)),
                                version if i == 0 else None,
                            )
                        )
                    async with conn.transaction():
                        await conn.executemany(MDB_WRITE, args)
                    position = await conn.fetchval("SELECT message_store.stream_version($1)", name)
        except asyncpg.RaiseError as e:
            if "Wrong expected version" not in str(e):
                raise
            raise Conflicted(None) from e
        return int(position) + 1

    async def length(self, stream: str) -> int:
        async with self.pool.acquire() as conn:
            v = await conn.fetchval(
                "SELECT message_store.stream_version($1)", self.stream_name(stream)
            )
        return 0 if v is None else int(v) + 1

    async def close(self) -> None:
        await self.pool.close()


class EventsourcingSystem:
    name = "eventsourcing"
    always_versioned = True  # every insert names its version: there is no other append

    def __init__(self, dsn: str, threads: int) -> None:
        # parse_conninfo reads a host given as a query parameter too (the embedded
        # server's socket directory), which urlsplit's hostname does not.
        parts = parse_conninfo(dsn)
        self.datastore = PostgresDatastore(
            dbname=parts.get("dbname", "postgres"),
            host=parts.get("host", "127.0.0.1"),
            port=parts.get("port", "5432"),
            user=parts.get("user", "postgres"),
            password=parts.get("password", ""),
            pool_size=threads,
        )
        self.recorder = PostgresApplicationRecorder(self.datastore)
        self.recorder.create_table()
        self.executor = ThreadPoolExecutor(threads)
        self.ids: dict[str, uuid.UUID] = {}
        self.n = 0

    def _id(self, stream: str) -> uuid.UUID:
        return self.ids.setdefault(stream, uuid.uuid5(uuid.NAMESPACE_URL, stream))

    def _insert(self, stream: str, writer: int, count: int, expected: int) -> int:
        events = []
        for i in range(count):
            self.n += 1
            events.append(
                StoredEvent(
                    originator_id=self._id(stream),
                    originator_version=expected + 1 + i,  # versions start at 1
                    topic="benchmarks:Inference",
                    state=dumps(payload(writer, self.n)).encode(),
                )
            )
        try:
            self.recorder.insert_events(events)
        except EsIntegrityError as e:
            raise Conflicted(None) from e
        return expected + count

    async def append(self, stream: str, writer: int, count: int, expected: int | None) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.executor, self._insert, stream, writer, count, expected or 0
        )

    def _length(self, stream: str) -> int:
        last = self.recorder.select_events(self._id(stream), desc=True, limit=1)
        return last[0].originator_version if last else 0

    async def length(self, stream: str) -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self._length, stream)

    async def close(self) -> None:
        self.datastore.close()
        self.executor.shutdown()


System = CwstoreSystem | BaselineSystem | MessageDbSystem | EventsourcingSystem


# --- measuring -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    writers: int
    separate: bool = False
    expected: bool = False
    batch: int = 1


WORKLOADS = (
    Workload("one1", "1 stream, 1 writer", 1),
    Workload("one4", "1 stream, 4 writers", 4),
    Workload("one16", "1 stream, 16 writers", 16),
    Workload("one1x", "1 stream, 1 writer, expected_length", 1, expected=True),
    Workload("one4x", "1 stream, 4 writers, expected_length", 4, expected=True),
    Workload("one16x", "1 stream, 16 writers, expected_length", 16, expected=True),
    Workload("sep4", "separate streams, 4 writers", 4, separate=True),
    Workload("sep16", "separate streams, 16 writers", 16, separate=True),
    Workload("batch10", "batches of 10, 1 writer", 1, batch=10),
)


@dataclass
class Tally:
    events: int = 0
    calls: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    cpu_ns: int = 0
    latencies: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)  # per round

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


class CpuMeter:
    """Time on CPU of a database's client backends, from /proc/<pid>/schedstat."""

    def __init__(self, admin: asyncpg.Connection) -> None:
        self.admin = admin
        self.lost = 0  # backends gone between two reads (their time is not counted)

    async def read(self, database: str) -> dict[int, int]:
        pids = await self.admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            database,
        )
        out: dict[int, int] = {}
        for (pid,) in pids:
            try:
                out[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        return out

    def delta(self, before: dict[int, int], after: dict[int, int]) -> int:
        self.lost += sum(1 for p in before if p not in after)
        return sum(v - before.get(p, 0) for p, v in after.items())


async def run_round(
    system: System,
    w: Workload,
    tag: str,
    seconds: float,
    warmup: float,
    mark: Callable[[], Awaitable[None]],
) -> tuple[int, int, int, float, list[float]]:
    """Every writer in its own task, appending in a loop: ``warmup`` unrecorded, then
    ``mark()`` (the CPU reading), then ``seconds`` recorded."""
    events = calls = conflicts = 0
    latencies: list[float] = []
    known = [0] * w.writers  # the length each writer last saw, kept across both phases

    async def loop(writer: int, until: float, record: bool) -> None:
        nonlocal events, calls, conflicts
        stream = f"{tag}-w{writer}" if w.separate else tag
        versioned = w.expected or system.always_versioned
        while time.perf_counter() < until:
            t = time.perf_counter()
            met = 0
            while True:
                try:
                    known[writer] = await system.append(
                        stream, writer, w.batch, known[writer] if versioned else None
                    )
                    break
                except Conflicted as c:
                    met += 1
                    known[writer] = (
                        c.actual if c.actual is not None else await system.length(stream)
                    )
            if record:
                latencies.append(time.perf_counter() - t)
                events += w.batch
                calls += 1
                conflicts += met

    until = time.perf_counter() + warmup
    await asyncio.gather(*(loop(i, until, False) for i in range(w.writers)))
    await mark()
    start = time.perf_counter()
    await asyncio.gather(*(loop(i, start + seconds, True) for i in range(w.writers)))
    return events, calls, conflicts, time.perf_counter() - start, latencies


async def conflict_cost(
    system: System, meter: CpuMeter, database: str, calls: int, tag: str
) -> tuple[float, float]:
    """Server CPU (ms) of one successful single-event append with a current expected
    length, and of one refused for a stale one, calls made one at a time."""
    stream = f"{tag}-cost"
    known = await system.append(stream, 0, 1, None)
    known = await system.append(stream, 0, 1, known)
    ok_ns = bad_ns = 0
    for _ in range(2):  # alternate: success, refusal, success, refusal
        before = await meter.read(database)
        for _ in range(calls):
            known = await system.append(stream, 0, 1, known)
        ok_ns += meter.delta(before, await meter.read(database))
        before = await meter.read(database)
        for _ in range(calls):
            with contextlib.suppress(Conflicted):
                await system.append(stream, 0, 1, 1)  # stale: the stream is longer
                raise RuntimeError(f"{system.name} took a stale expected length")
        bad_ns += meter.delta(before, await meter.read(database))
    return ok_ns / (2 * calls) / 1e6, bad_ns / (2 * calls) / 1e6


TABLES_SQL = (
    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
)
TUPLES_SQL = (
    "SELECT coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint, "
    "coalesce(sum(n_tup_hot_upd), 0)::bigint, count(*) FILTER (WHERE n_tup_ins > 0) "
    "FROM pg_stat_user_tables"
)
INDEXES_SQL = (
    "SELECT count(*) FROM pg_stat_user_indexes i JOIN pg_stat_user_tables t USING (relid) "
    "WHERE t.n_tup_ins > 0"
)


@dataclass
class Peers:
    """What the section measured; ``rows`` turns it into the table."""

    tallies: dict[tuple[str, str], Tally]
    cost: dict[str, tuple[float, float]]
    writes: dict[str, tuple[float, float, float, int, int]]  # bytes, ins, upd, tables, idx
    stored: dict[str, int]
    missing: dict[str, str]
    lost_backends: int


async def measure(
    admin: str,
    with_database: Callable[[str, str], str],
    create_database: Callable[[str, str], Awaitable[str]],
    drop_database: Callable[[str, str], Awaitable[None]],
    seconds: float,
    warmup: float,
    rounds: int,
    cost_calls: int,
    log: Callable[[str], None],
) -> Peers:
    """Set up the four systems' databases, run every workload in alternating rounds,
    price refusals, measure what each wrote; drop the databases."""
    tag = f"cwpeers_{uuid.uuid4().hex[:6]}"
    names = {s: f"{tag}_{s.replace('-', '')}" for s in SYSTEMS}
    missing: dict[str, str] = {}
    if EVENTSOURCING_MISSING:
        missing["eventsourcing"] = f"not installed ({EVENTSOURCING_MISSING})"
    systems: dict[str, System] = {}
    monitor = await asyncpg.connect(admin)
    meter = CpuMeter(monitor)
    size0: dict[str, int] = {}
    try:
        for s in SYSTEMS:
            if s in missing:
                continue
            dsn = await create_database(admin, names[s])
            try:
                systems[s] = await open_system(s, dsn)
            except Exception as exc:
                missing[s] = f"error: {type(exc).__name__}: {exc}"[:120]
                continue
            conn = await asyncpg.connect(dsn)
            try:
                size0[s] = await conn.fetchval(TABLES_SQL)
            finally:
                await conn.close()
        order = [s for s in SYSTEMS if s in systems]
        tallies = {(w.key, s): Tally() for w in WORKLOADS for s in order}
        for w in WORKLOADS:
            for rnd in range(rounds):
                turn = order[rnd % len(order) :] + order[: rnd % len(order)]
                log(f"8 peers: {w.label}, round {rnd + 1}/{rounds} ({', '.join(turn)})")
                for s in turn:
                    before: dict[int, int] = {}

                    async def mark(database: str = names[s], into: dict[int, int] = before) -> None:
                        into.update(await meter.read(database))

                    ev, calls, conf, secs, lat = await run_round(
                        systems[s], w, f"{w.key}-r{rnd}", seconds, warmup, mark
                    )
                    t = tallies[w.key, s]
                    t.cpu_ns += meter.delta(before, await meter.read(names[s]))
                    t.events += ev
                    t.calls += calls
                    t.conflicts += conf
                    t.seconds += secs
                    t.latencies += lat
                    t.rates.append(ev / secs)
        log("8 peers: the price of a refused append")
        cost = {}
        for s in order:
            cost[s] = await conflict_cost(systems[s], meter, names[s], cost_calls, tag)
        # Each system's connections close (flushing their statistics) before the counts.
        for s in order:
            await systems[s].close()
        systems.clear()
        await asyncio.sleep(1.0)
        writes: dict[str, tuple[float, float, float, int, int]] = {}
        stored: dict[str, int] = {}
        for s in order:
            conn = await asyncpg.connect(with_database(admin, names[s]))
            try:
                stored[s] = await conn.fetchval(STORED_SQL[s])
                size = await conn.fetchval(TABLES_SQL) - size0[s]
                counts = await conn.fetchrow(TUPLES_SQL)
                assert counts is not None
                ins, upd, _hot, tables = counts
                idx = await conn.fetchval(INDEXES_SQL)
            finally:
                await conn.close()
            n = max(stored[s], 1)
            writes[s] = (size / n, ins / n, upd / n, tables, idx)
        return Peers(tallies, cost, writes, stored, missing, meter.lost)
    finally:
        for system in systems.values():
            with contextlib.suppress(Exception):
                await system.close()
        await monitor.close()
        for s in SYSTEMS:
            with contextlib.suppress(Exception):
                await drop_database(admin, names[s])


STORED_SQL = {
    "cwstore": "SELECT count(*) FROM cwstore.nodes",
    "eventsourcing": "SELECT count(*) FROM stored_events",
    "message-db": "SELECT count(*) FROM message_store.messages",
    "baseline": "SELECT count(*) FROM items",
}


async def keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release, as cwstore's driver does it (``_keep_session``):
    nothing. asyncpg's default sends ``RESET ALL; UNLISTEN *; CLOSE ALL; ...`` on every
    release, a round trip and server time the baseline and message-db would pay and
    cwstore would not; neither sets session state on its connections."""


async def open_system(name: str, dsn: str) -> System:
    if name == "cwstore":
        store = await cwstore.connect(dsn, min_size=16, max_size=16, migrate_schema=True)
        return CwstoreSystem(store)
    if name == "baseline":
        pool = await asyncpg.create_pool(dsn, min_size=16, max_size=16, reset=keep_session)
        async with pool.acquire() as c:
            await c.execute(BASE_SETUP)
        return BaselineSystem(pool)
    if name == "message-db":
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET client_min_messages = warning")
            for f in MESSAGE_DB_FILES:
                # message-db takes gen_random_uuid() from pgcrypto; PostgreSQL has it
                # built in since 13, and the embedded server ships no pgcrypto.
                if f == "extensions/pgcrypto.sql" and conn.get_server_version().major >= 13:
                    continue
                await conn.execute("SET search_path = message_store, public")
                await conn.execute((MESSAGE_DB / f).read_text())
        finally:
            await conn.close()
        pool = await asyncpg.create_pool(
            dsn,
            min_size=16,
            max_size=16,
            reset=keep_session,
            server_settings={"search_path": "message_store, public"},
        )
        return MessageDbSystem(pool)
    if name == "eventsourcing":
        return await asyncio.to_thread(EventsourcingSystem, dsn, 16)
    raise ValueError(name)


def cell(t: Tally, base: Tally | None) -> str:
    """events/s (round range), ratio to the baseline, p50/p99, conflicts, server CPU."""
    rounds = " to ".join(f"{r:,.0f}" for r in (min(t.rates), max(t.rates))) if t.rates else "?"
    ratio = f", {t.rate / base.rate:.2f}x base" if base and base.rate and base is not t else ""
    conf = f", {t.conflicts / t.events:.2f} confl/ev" if t.events else ""
    cpu = f", CPU {t.cpu_ns / t.events / 1e6:.3f} ms/ev" if t.events else ""
    return (
        f"{t.rate:,.0f}/s ({rounds}){ratio}; p50 {pct(t.latencies, 0.5) * 1e3:.2f} / "
        f"p99 {pct(t.latencies, 0.99) * 1e3:.1f} ms{conf}{cpu}"
    )


def markdown(p: Peers) -> str:
    """Every system side by side, one line per workload, then what each wrote."""
    lines = [
        "| workload | " + " | ".join(SYSTEMS) + " |",
        "| --- |" + " --- |" * len(SYSTEMS),
    ]
    for w in WORKLOADS:
        base = p.tallies.get((w.key, "baseline"))
        cells = [
            cell(p.tallies[w.key, s], base) if (w.key, s) in p.tallies else p.missing.get(s, "—")
            for s in SYSTEMS
        ]
        lines.append(f"| {w.label} | " + " | ".join(cells) + " |")
    lines.append(
        "| refused append (stale expected length), server CPU, one call at a time | "
        + " | ".join(
            f"{p.cost[s][1]:.3f} ms vs {p.cost[s][0]:.3f} ms a success "
            f"({p.cost[s][1] / p.cost[s][0]:.2f}x)"
            if s in p.cost
            else "—"
            for s in SYSTEMS
        )
        + " |"
    )
    lines.append(
        "| written per event (bytes of tables+indexes; tuples inserted/updated; "
        "tables, indexes written) | "
        + " | ".join(
            f"{p.writes[s][0]:,.0f} B; {p.writes[s][1]:.2f} ins / {p.writes[s][2]:.2f} upd; "
            f"{p.writes[s][3]} tables, {p.writes[s][4]} indexes ({p.stored[s]:,} events)"
            if s in p.writes
            else "—"
            for s in SYSTEMS
        )
        + " |"
    )
    if p.lost_backends:
        lines.append(f"\n({p.lost_backends} backends closed between reads: CPU undercounted)")
    return "\n".join(lines) + "\n"


def rows(p: Peers, row: Callable[..., Any]) -> list[Any]:
    """The section's targets as rows of run.py's table (``row`` is its ``Row``)."""
    out = []
    cw_missing = "cwstore" in p.missing
    for w in WORKLOADS:
        cw = p.tallies.get((w.key, "cwstore"))
        base = p.tallies.get((w.key, "baseline"))
        peers = {
            s: p.tallies[w.key, s]
            for s in ("eventsourcing", "message-db")
            if (w.key, s) in p.tallies
        }
        if cw is None or cw_missing:
            out.append(row(f"8 Peers, {w.label}", p.missing.get("cwstore", "—"), "—", ok=False))
            continue
        best = max(peers, key=lambda s: peers[s].rate) if peers else None
        text = "; ".join(f"{s} {peers[s].rate:,.0f}/s" for s in peers)
        if base:
            text += f"; baseline {base.rate:,.0f}/s"
        if w.batch > 1 and base:
            r = cw.rate / base.rate
            out.append(
                row(
                    f"8 Peers, {w.label}: vs baseline",
                    f"{cw.rate:,.0f}/s",
                    text,
                    f"{r:.2f}x",
                    "≥ 0.50x baseline",
                    r >= 0.5,
                )
            )
        if best is None:
            continue
        r = cw.rate / peers[best].rate
        out.append(
            row(
                f"8 Peers, {w.label}",
                f"{cw.rate:,.0f}/s",
                text,
                f"{r:.2f}x {best}",
                "≥ 1.00x best peer",
                r >= 1.0,
            )
        )
    one = p.tallies.get(("one1", "cwstore")), p.tallies.get(("one1", "baseline"))
    if one[0] and one[1] and one[0].events and one[1].events:
        a = one[0].cpu_ns / one[0].events / 1e6
        b = one[1].cpu_ns / one[1].events / 1e6
        seq = ""
        if "cwstore" in p.cost and "baseline" in p.cost:
            seq = f" (one call at a time: {p.cost['cwstore'][0] / p.cost['baseline'][0]:.2f}x)"
        out.append(
            row(
                "8 Server CPU per single-node append, 1 writer",
                f"{a:.3f} ms",
                f"{b:.3f} ms (baseline)",
                f"{a / b:.2f}x{seq}",
                "≤ 2.00x",
                a / b <= 2.0,
            )
        )
    if "cwstore" in p.cost:
        ok, bad = p.cost["cwstore"]
        out.append(
            row(
                "8 Server CPU of a refused append_v1 (stale expected_length)",
                f"{bad:.3f} ms",
                f"{ok:.3f} ms (a successful one)",
                f"{bad / ok:.2f}x",
                "≤ 0.10x",
                bad / ok <= 0.10,
            )
        )
    return out
