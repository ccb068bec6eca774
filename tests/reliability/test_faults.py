"""Faults while writing: backends killed mid-append and mid-import, a server restarted
under live writers, lock and statement timeouts.

The promises checked (docs/reliability.md): a write that fails leaves no trace (graph
length and node count unchanged, sequences gapless); the caller sees a
:class:`cwstore.Error`, never a raw driver exception; retrying the same batch or
import is safe and stores each node once; timeouts are :class:`cwstore.StoreTimeoutError`.

Backends are found by the ``application_name`` each victim client carries in its DSN
and killed with ``pg_terminate_backend`` from another connection. Timing comes from
the server, not from sleeps: the victim is killed once ``pg_stat_activity``,
``pg_locks`` or ``pg_stat_progress_copy`` shows it at the step to interrupt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import sql
from support.reliability import (
    CLIENTS,
    Client,
    assert_graph,
    batch_of,
    chain,
    document,
    graph_rows,
    poll,
    terminate,
    with_params,
)

import cwstore
from cwstore import _jsontext, server
from cwstore._store_base import IMPORT_CHUNK_ROWS

BIG_IMPORT = 50_000
BIG_APPEND = 5_000
SEED = 3


@functools.cache
def big_document() -> dict[str, Any]:
    """A 50,000-node chain (the same for every test: graph names keep them apart)."""
    return document(chain(BIG_IMPORT, tag="big-import"))


def _graph() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def _app() -> str:
    return f"victim-{uuid.uuid4().hex[:12]}"


async def _blocked_by(admin: asyncpg.Connection, app: str, holder_pid: int) -> int | None:
    """The pid of the backend named ``app`` waiting for a lock ``holder_pid`` holds."""
    pid: int | None = await admin.fetchval(
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name = $1 AND $2 = ANY (pg_blocking_pids(pid))",
        app,
        holder_pid,
    )
    return pid


@contextlib.asynccontextmanager
async def _graph_locked(dsn: str, graph: str) -> Any:
    """Hold the graph's row lock (the append and import path's lock) in an open
    transaction; yields the holder's backend pid. Rolled back on exit."""
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("SELECT cwstore.ensure_graph_v1($1)", graph)
        tr = holder.transaction()
        await tr.start()
        locked = await holder.fetchval(
            "SELECT graph_id FROM cwstore.graphs WHERE name = $1 FOR UPDATE", graph
        )
        assert locked is not None
        try:
            yield holder.get_server_pid()
        finally:
            await tr.rollback()
    finally:
        await holder.close()


KILLED_CALL_RETURNS_WITHIN = 10.0  # seconds; it should be at once


async def _refused(task: asyncio.Task[Any], what: str) -> cwstore.Error:
    """Await a write whose backend was killed: it must end, promptly, with a
    :class:`cwstore.Error` (never a raw driver exception). A call that hangs is
    cancelled, so the failure is reported instead of stalling the suite."""
    try:
        await asyncio.wait_for(asyncio.shield(task), KILLED_CALL_RETURNS_WITHIN)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        pytest.fail(
            f"{what} did not return within {KILLED_CALL_RETURNS_WITHIN:.0f}s after its "
            "backend was terminated (it hangs)"
        )
    except BaseException as exc:
        assert isinstance(exc, cwstore.Error), (
            f"{what} raised a raw {type(exc).__module__}.{type(exc).__name__}: {exc}"
        )
        assert not isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError | psycopg.Error)
        return exc
    pytest.fail(f"{what} succeeded although its backend was terminated")


# --- (a) a backend killed in the middle of a write ----------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
async def test_kill_append_waiting_for_the_graph_lock(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    graph, app = _graph(), _app()
    seed = chain(SEED, tag=f"seed-{graph}")
    victim = await Client.open(
        client, with_params(db_dsn, application_name=app), min_size=1, max_size=1
    )
    try:
        await victim.call("import_state", graph, document(seed))
        batch = batch_of(chain(5, tag=f"more-{graph}", parent=seed[-1]["id"]))
        async with _graph_locked(db_dsn, graph) as holder_pid:
            task = asyncio.create_task(victim.call("append", graph, batch))
            pid = await poll(
                lambda: _blocked_by(aconn, app, holder_pid),
                what="the append to wait for the graph lock",
                give_up=task.done,
            )
            assert pid is not None, f"the append did not wait: {task}"
            assert await terminate(aconn, pid)
            await _refused(task, f"{client} append")
        await assert_graph(aconn, graph, [n["id"] for n in seed])

        # The same batch again, on the same client: the pool replaced the dead connection.
        stored = await victim.call("append", graph, batch)
        assert [(n.id, n.sequence) for n in stored] == [
            (n["id"], SEED + i + 1) for i, n in enumerate(batch)
        ]
        again = await victim.call("append", graph, batch)
        assert [(n.id, n.sequence) for n in again] == [(n.id, n.sequence) for n in stored]
        await assert_graph(aconn, graph, [n["id"] for n in seed + batch])
    finally:
        await victim.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_kill_import_waiting_for_the_graph_lock(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    graph, app = _graph(), _app()
    doc = document(chain(40, tag=f"doc-{graph}"))
    victim = await Client.open(
        client, with_params(db_dsn, application_name=app), min_size=1, max_size=1
    )
    try:
        async with _graph_locked(db_dsn, graph) as holder_pid:
            task = asyncio.create_task(victim.call("import_state", graph, doc))
            pid = await poll(
                lambda: _blocked_by(aconn, app, holder_pid),
                what="the import to wait for the graph lock",
                give_up=task.done,
            )
            assert pid is not None, f"the import did not wait: {task}"
            assert await terminate(aconn, pid)
            await _refused(task, f"{client} import_state")
        await assert_graph(aconn, graph, [])

        assert await victim.call("import_state", graph, doc) == 40
        await assert_graph(aconn, graph, [n["id"] for n in doc["nodes"]])
        assert await victim.call("export_json", graph) == _jsontext.dumps(doc)
    finally:
        await victim.close()


async def _inserting(admin: asyncpg.Connection, app: str) -> int | None:
    """The pid of backend ``app`` once its INSERT into cwstore.nodes has begun."""
    pid: int | None = await admin.fetchval(
        "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
        " WHERE a.application_name = $1 AND a.state = 'active'"
        "   AND l.locktype = 'relation' AND l.relation = 'cwstore.nodes'::regclass"
        "   AND l.mode = 'RowExclusiveLock' AND l.granted",
        app,
    )
    return pid


@pytest.mark.parametrize("client", CLIENTS)
async def test_kill_big_append_mid_insert(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    """A 5,000-node batch, killed once its INSERT (and the checking trigger) runs."""
    graph, app = _graph(), _app()
    seed = chain(SEED, tag=f"seed-{graph}")
    victim = await Client.open(
        client, with_params(db_dsn, application_name=app), min_size=1, max_size=1
    )
    try:
        await victim.call("import_state", graph, document(seed))
        batch = batch_of(chain(BIG_APPEND, tag=f"big-{graph}", parent=seed[-1]["id"]))
        task = asyncio.create_task(victim.call("append", graph, batch))
        pid = await poll(
            lambda: _inserting(aconn, app), what="the INSERT to start", give_up=task.done
        )
        assert pid is not None, f"the append finished before it could be killed: {task}"
        assert await terminate(aconn, pid)
        await _refused(task, f"{client} append of {BIG_APPEND} nodes")
        await assert_graph(aconn, graph, [n["id"] for n in seed])

        stored = await victim.call("append", graph, batch)
        assert [n.sequence for n in stored] == list(range(SEED + 1, SEED + BIG_APPEND + 1))
        again = await victim.call("append", graph, batch)
        assert [n.sequence for n in again] == [n.sequence for n in stored]
        await assert_graph(aconn, graph, [n["id"] for n in seed + batch])
    finally:
        await victim.close()


async def _copy_progress(admin: asyncpg.Connection, app: str, phase: str) -> int | None:
    """The pid of backend ``app`` once its COPY is in ``phase``: ``copy`` = rows
    arriving (10,000 of a chunk's in), ``trigger`` = every row of a chunk in, the AFTER
    trigger checking and materializing them (the COPY command has not ended). An import
    COPYs IMPORT_CHUNK_ROWS rows per statement, in one transaction."""
    row = await admin.fetchrow(
        "SELECT p.pid, p.tuples_processed FROM pg_stat_progress_copy p"
        " JOIN pg_stat_activity a ON a.pid = p.pid WHERE a.application_name = $1",
        app,
    )
    if row is None:
        return None
    done = int(row["tuples_processed"])
    chunk = min(BIG_IMPORT, IMPORT_CHUNK_ROWS)
    if phase == "copy" and 10_000 <= done < chunk:
        return int(row["pid"])
    if phase == "trigger" and done == chunk:
        return int(row["pid"])
    return None


@pytest.mark.parametrize(("client", "phase"), [("sync", "copy"), ("async", "trigger")])
async def test_kill_big_import_mid_copy(
    db_dsn: str, aconn: asyncpg.Connection, client: str, phase: str
) -> None:
    """A 50,000-node import killed while its rows stream in, or while the trigger runs."""
    doc = big_document()
    victim = await Client.open(client, with_params(db_dsn, application_name=(app := _app())))
    try:
        graph = _graph()
        task = asyncio.create_task(victim.call("import_state", graph, doc))
        pid = await poll(
            lambda: _copy_progress(aconn, app, phase),
            what=f"the import's COPY to reach the {phase} phase",
            give_up=task.done,
        )
        assert pid is not None, f"the import finished before it could be killed: {task}"
        assert await terminate(aconn, pid)
        await _refused(task, f"{client} import_state of {BIG_IMPORT} nodes")
        await assert_graph(aconn, graph, [])

        assert await victim.call("import_state", graph, doc) == BIG_IMPORT
        length, rows = await graph_rows(aconn, graph)
        assert length == BIG_IMPORT
        assert [r[0] for r in rows] == list(range(1, BIG_IMPORT + 1))
        assert [r[1] for r in rows] == [n["id"] for n in doc["nodes"]]
        assert await victim.call("frontier", graph) == doc["frontier"]
    finally:
        await victim.close()


STALL_NODES = 10_000
STALL_PAD = 1_000  # 10 MB of rows: more than the socket buffers take while the COPY waits
STALL_AT = 50


@functools.cache
def padded_document() -> dict[str, Any]:
    return document(chain(STALL_NODES, tag="stalled-import", pad=STALL_PAD))


@pytest.mark.parametrize("client", CLIENTS)
async def test_kill_import_while_its_copy_is_stalled(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    """The import's COPY stalls on row 50 (another transaction holds an uncommitted
    row with the same sequence, so the unique index makes the COPY wait), the client
    fills the socket and waits to write more; then the backend is killed. The client
    must end with a cwstore.Error, not wait forever for the socket to drain."""
    doc = padded_document()
    graph, app = _graph(), _app()
    victim = await Client.open(client, with_params(db_dsn, application_name=app))
    blocker = await asyncpg.connect(db_dsn)
    try:
        graph_id = await blocker.fetchval("SELECT cwstore.ensure_graph_v1($1)", graph)
        tr = blocker.transaction()
        await tr.start()
        # Fault injection only: skip the nodes triggers (superuser) so the row does not
        # lock the graph or touch its length; it is rolled back below.
        await blocker.execute("SET LOCAL session_replication_role = replica")
        n = doc["nodes"][STALL_AT - 1]
        await blocker.execute(
            "INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,"
            " created_at_text) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            graph_id,
            STALL_AT,
            n["id"],
            n["kind"],
            n["parents"],
            _jsontext.dumps(n["payload"]),
            n["createdAt"],
        )
        task = asyncio.create_task(victim.call("import_state", graph, doc))
        pid = await poll(
            lambda: _blocked_by(aconn, app, blocker.get_server_pid()),
            what="the import's COPY to stall",
            give_up=task.done,
        )
        assert pid is not None, f"the import did not stall: {task}"
        # No server-side signal says the client has filled the socket and stopped
        # writing; at ~20 MB/s it fills every buffer within a second.
        await asyncio.sleep(1.0)
        assert await terminate(aconn, pid)
        await tr.rollback()
        await _refused(task, f"{client} import_state with its COPY stalled")
        await assert_graph(aconn, graph, [])

        assert await victim.call("import_state", graph, doc) == STALL_NODES
        await assert_graph(aconn, graph, [n["id"] for n in doc["nodes"]])
    finally:
        await blocker.close()
        await victim.close()


# --- (b) the server restarted while writers write ----------------------------------------

RESTART_WRITERS = 4  # two AsyncStores, two Stores (each in its own thread)
RESTARTS = 3
ACKS_PER_ROUND = 10  # every writer, before the first restart and after each one


class _Acks:
    """Every acknowledged node per writer, and how many since the last restart."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[int, list[str]] = {i: [] for i in range(RESTART_WRITERS)}
        self.since_restart: dict[int, int] = dict.fromkeys(range(RESTART_WRITERS), 0)
        self.errors: dict[int, list[str]] = {i: [] for i in range(RESTART_WRITERS)}
        self.restarts = 0

    def describe(self) -> str:
        with self.lock:
            return "; ".join(
                f"writer {i}: {len(self.ids[i])} acknowledged, {self.since_restart[i]} after"
                f" restart {self.restarts}, errors {sorted(set(self.errors[i]))}"
                for i in self.ids
            )

    def round_done(self) -> bool | None:
        with self.lock:
            return all(v >= ACKS_PER_ROUND for v in self.since_restart.values()) or None

    def restarted(self) -> None:
        with self.lock:
            self.restarts += 1
            self.since_restart = dict.fromkeys(self.since_restart, 0)

    def ack(self, writer: int, node_id: str) -> None:
        with self.lock:
            self.ids[writer].append(node_id)
            self.since_restart[writer] += 1


def _next_node(writer: int, step: int, parent: str | None) -> dict[str, Any]:
    return batch_of(chain(1, tag=f"w{writer}-{step}", parent=parent))[0]


async def test_server_restart_while_writers_write() -> None:
    """Four writers append to one graph in a loop on a private embedded server, which
    is stopped (``pg_ctl stop -m fast``) and started again, three times. Writers retry the
    same node on :class:`cwstore.Error` until it is acknowledged; their pools must
    reconnect by themselves. Afterwards every acknowledged node is stored exactly once
    and the sequences have no holes."""
    home = Path(tempfile.mkdtemp(prefix="cwrel-"))  # short: the socket lives in it
    graph = "restart"
    acks = _Acks()
    stop = threading.Event()
    deadline = time.monotonic() + 90
    try:
        dsn = await asyncio.to_thread(server.ensure_server, home)
        with psycopg.connect(dsn, autocommit=True) as c:
            # Durability off, as for every test server: each stop is a clean shutdown.
            for name, value in server.FAST_UNSAFE_SETTINGS.items():
                c.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
            c.execute("SELECT pg_reload_conf()")
        seeder = await cwstore.connect(dsn, min_size=1, max_size=1, migrate_schema=True)
        await seeder.close()
        stores = [
            await Client.open("async" if i % 2 == 0 else "sync", dsn, min_size=1, max_size=2)
            for i in range(RESTART_WRITERS)
        ]

        def sync_writer(i: int) -> None:
            store = stores[i].store
            parent: str | None = None
            step = 0
            while not stop.is_set() and time.monotonic() < deadline:
                node = _next_node(i, step, parent)
                while time.monotonic() < deadline:
                    try:
                        out = store.append(graph, [node])
                    except cwstore.Error as exc:
                        acks.errors[i].append(type(exc).__name__)
                        time.sleep(0.01)  # back off a little while the server is down
                        continue
                    assert out[0].id == node["id"]
                    acks.ack(i, node["id"])
                    break
                parent, step = node["id"], step + 1

        async def async_writer(i: int) -> None:
            store = stores[i].store
            parent: str | None = None
            step = 0
            while not stop.is_set() and time.monotonic() < deadline:
                node = _next_node(i, step, parent)
                while time.monotonic() < deadline:
                    try:
                        out = await store.append(graph, [node])
                    except cwstore.Error as exc:
                        acks.errors[i].append(type(exc).__name__)
                        await asyncio.sleep(0.01)
                        continue
                    assert out[0].id == node["id"]
                    acks.ack(i, node["id"])
                    break
                parent, step = node["id"], step + 1

        tasks = [
            asyncio.create_task(
                async_writer(i) if i % 2 == 0 else asyncio.to_thread(sync_writer, i)
            )
            for i in range(RESTART_WRITERS)
        ]

        def a_writer_died() -> bool:
            return any(t.done() for t in tasks)

        try:
            for round_ in range(RESTARTS + 1):
                await poll(
                    _async_value(acks.round_done),
                    what=f"every writer to write after restart {round_}",
                    timeout=60,
                    give_up=a_writer_died,
                )
                if a_writer_died() or round_ == RESTARTS:
                    break
                await asyncio.to_thread(server.stop_server, home)
                acks.restarted()
                assert await asyncio.to_thread(server.ensure_server, home) == dsn
        finally:
            stop.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for s in stores:
                await s.close()
        for i, r in enumerate(results):
            # A writer ends only when told to stop; anything else escaped cwstore.Error.
            assert r is None, (
                f"writer {i} ({stores[i].kind}) died of {type(r).__module__}."
                f"{type(r).__name__}: {r} ({acks.describe()})"
            )
        assert acks.restarts == RESTARTS and acks.round_done(), acks.describe()
        assert any(acks.errors.values()), "no writer noticed the restart"

        conn = await asyncpg.connect(dsn)
        try:
            length, rows = await graph_rows(conn, graph)
        finally:
            await conn.close()
        stored_ids = [r[1] for r in rows]
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
        assert length == len(rows)
        assert len(set(stored_ids)) == len(stored_ids)
        acked = [nid for ids in acks.ids.values() for nid in ids]
        assert len(set(acked)) == len(acked)
        # Writers retry until acknowledged and stop only between nodes, so the graph
        # holds exactly the acknowledged nodes; each writer's in its own order.
        assert set(stored_ids) == set(acked)
        position = {nid: k for k, nid in enumerate(stored_ids)}
        for ids in acks.ids.values():
            assert [position[n] for n in ids] == sorted(position[n] for n in ids)
    finally:
        await asyncio.to_thread(server.stop_server, home)
        shutil.rmtree(home, ignore_errors=True)


def _async_value(fn: Any) -> Any:
    async def probe() -> Any:
        return fn()

    return probe


# --- (c) lock and statement timeouts ---------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
async def test_timeouts_surface_as_store_timeout_error(
    db_dsn: str, aconn: asyncpg.Connection, client: str, setting: str
) -> None:
    graph = _graph()
    seed = chain(SEED, tag=f"seed-{graph}")
    owner = await Client.open(client, db_dsn, min_size=1, max_size=1)
    victim = await Client.open(
        client,
        with_params(db_dsn, options=f"-c {setting}=200"),
        min_size=1,
        max_size=1,
    )
    try:
        await owner.call("import_state", graph, document(seed))
        batch = batch_of(chain(2, tag=f"more-{graph}", parent=seed[-1]["id"]))
        other = _graph()
        async with _graph_locked(db_dsn, graph):
            with pytest.raises(cwstore.StoreTimeoutError) as caught:
                await victim.call("append", graph, batch)
            assert caught.value.sqlstate == ("55P03" if setting == "lock_timeout" else "57014")
            async with _graph_locked(db_dsn, other):
                with pytest.raises(cwstore.StoreTimeoutError):
                    await victim.call("import_state", other, document(chain(2, tag=other)))
        await assert_graph(aconn, graph, [n["id"] for n in seed])
        await assert_graph(aconn, other, [])
        # Once the lock is free the same client writes (the timeout did not break it).
        await victim.call("append", graph, batch)
        await assert_graph(aconn, graph, [n["id"] for n in seed + batch])
    finally:
        await victim.close()
        await owner.close()
