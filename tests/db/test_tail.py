"""Following graphs live (SPEC sections 7 and 8): ``tail`` of one graph and ``tail_all``
of every graph, while writers append concurrently.

Every wait has a timeout, so a broken feed fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import asyncpg
import pytest
from support.nodes import node

import cwstore
from cwstore import Cursor, TailItem
from cwstore._store_base import prepare_batch

WAIT = 60.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def astore(db_dsn: str) -> AsyncIterator[cwstore.AsyncStore]:
    s = await cwstore.connect(db_dsn, min_size=1, max_size=4, migrate_schema=False)
    try:
        yield s
    finally:
        await s.close()


class Collector:
    """Drains an async iterator in a task; tests wait on conditions over ``items``."""

    def __init__(self, source: Any) -> None:
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(source))

    async def _run(self, source: Any) -> None:
        try:
            async for item in source:
                self.items.append(item)
                self._changed.set()
        except BaseException as exc:
            self.error = exc
            self._changed.set()
            raise

    async def until(self, cond: Callable[[list[Any]], bool], timeout: float = WAIT) -> None:
        async def wait() -> None:
            while not cond(self.items):
                if self.error is not None:
                    raise AssertionError(f"the feed failed: {self.error!r}") from self.error
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"condition not met within {timeout}s; {len(self.items)} items so far"
            ) from None

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def _writers(
    db_dsn: str, graph: str, count: int, per_writer: int, root: str
) -> list[list[cwstore.CausalNode]]:
    """``count`` writers, each with its own AsyncStore, appending batches of 1 to 3."""
    stores = [
        await cwstore.connect(db_dsn, min_size=1, max_size=1, migrate_schema=False)
        for _ in range(count)
    ]
    start = asyncio.Event()

    async def write(i: int) -> list[cwstore.CausalNode]:
        written: list[cwstore.CausalNode] = []
        await start.wait()
        last = root
        step = 0
        while step < per_writer:
            size = min(1 + step % 3, per_writer - step)
            batch = []
            for _ in range(size):
                n = node("inference", {"writer": i, "step": step}, [last])
                batch.append(n)
                last = n["id"]
                step += 1
            written.extend(await stores[i].append(graph, batch))
            await asyncio.sleep(0.001 * (i % 3))
        return written

    tasks = [asyncio.create_task(write(i)) for i in range(count)]
    start.set()
    try:
        return await asyncio.wait_for(asyncio.gather(*tasks), 120)
    finally:
        for s in stores:
            await s.close()


# --- (a) tail of one graph -------------------------------------------------------------------


async def test_tail_started_before_writers_sees_every_node_once_in_order(
    db_dsn: str, astore: cwstore.AsyncStore
) -> None:
    graph = _name("tail")
    root = node("goal", "root")
    await astore.append(graph, [root])
    feed = Collector(astore.tail(graph, after=0))
    try:
        await feed.until(lambda items: len(items) >= 1)  # following before anyone writes
        written = await _writers(db_dsn, graph, count=4, per_writer=25, root=root["id"])
        total = 1 + sum(len(w) for w in written)
        assert total == 101
        await feed.until(lambda items: len(items) >= total)
        await asyncio.sleep(1.5)  # a duplicate or a late extra would arrive by now
        seqs = [n.sequence for n in feed.items]
        assert seqs == list(range(1, total + 1))
        stored = await astore.replay(graph)
        assert [n.to_obj() for n in feed.items] == [n.to_obj() for n in stored.nodes]
        acked = {n.id: n.sequence for w in written for n in w}
        assert {n.id: n.sequence for n in feed.items[1:]} == acked
    finally:
        await feed.stop()


async def test_tail_after_n_starts_after_n(astore: cwstore.AsyncStore) -> None:
    graph = _name("tail")
    nodes = [node("goal", f"g{i}") for i in range(6)]
    await astore.append(graph, nodes)
    feed = Collector(astore.tail(graph, after=4))
    try:
        await feed.until(lambda items: len(items) >= 2)
        assert [n.sequence for n in feed.items] == [5, 6]
        assert [n.id for n in feed.items] == [nodes[4]["id"], nodes[5]["id"]]
        await astore.append(graph, [node("goal", "g6")])
        await feed.until(lambda items: len(items) >= 3)
        assert [n.sequence for n in feed.items] == [5, 6, 7]
    finally:
        await feed.stop()

    # after = the length: only what comes next.
    feed = Collector(astore.tail(graph, after=7))
    try:
        await asyncio.sleep(0.3)
        assert feed.items == []
        await astore.append(graph, [node("goal", "g7")])
        await feed.until(lambda items: len(items) >= 1)
        assert [n.sequence for n in feed.items] == [8]
    finally:
        await feed.stop()


async def test_tail_refuses_bad_after(astore: cwstore.AsyncStore) -> None:
    graph = _name("tail")
    await astore.append(graph, [node("goal", "x")])
    for bad in (-1, "3", True):
        with pytest.raises(cwstore.InputError):
            await asyncio.wait_for(anext(aiter(astore.tail(graph, after=bad))), 5)  # type: ignore[arg-type]
    with pytest.raises(cwstore.UnknownGraphError):
        await asyncio.wait_for(anext(aiter(astore.tail(_name("nope")))), 5)


async def test_sync_tail_in_a_thread(db_dsn: str, astore: cwstore.AsyncStore) -> None:
    graph = _name("synctail")
    root = node("goal", "root")
    await astore.append(graph, [root])
    sync = await asyncio.to_thread(
        cwstore.connect_sync, db_dsn, min_size=1, max_size=1, migrate_schema=False
    )
    total = 1 + 3 * 20
    seen: list[cwstore.CausalNode] = []
    first = threading.Event()
    finished = threading.Event()
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            for n in sync.tail(graph, after=0):
                seen.append(n)
                first.set()
                if len(seen) >= total:
                    break
        except BaseException as exc:
            failure.append(exc)
        finally:
            finished.set()

    # A daemon thread: if the tail never ends, the test fails and the thread dies with
    # the interpreter instead of hanging it.
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        assert await asyncio.to_thread(first.wait, WAIT), "the sync tail delivered nothing"
        written = await _writers(db_dsn, graph, count=3, per_writer=20, root=root["id"])
        assert 1 + sum(len(w) for w in written) == total
        assert await asyncio.to_thread(finished.wait, WAIT), (
            f"the sync tail stopped at {len(seen)} of {total} nodes"
        )
        assert not failure, failure
        assert [n.sequence for n in seen] == list(range(1, total + 1))
        stored = await astore.replay(graph)
        assert [n.id for n in seen] == [n.id for n in stored.nodes]

        # after = N, sync.
        def take(after: int, count: int) -> list[int]:
            out: list[int] = []
            for n in sync.tail(graph, after=after):
                out.append(n.sequence)
                if len(out) >= count:
                    break
            return out

        assert await asyncio.wait_for(asyncio.to_thread(take, 55, 6), WAIT) == list(range(56, 62))
    finally:
        await asyncio.to_thread(sync.close)


# --- (b) tail_all across graphs ---------------------------------------------------------------


def at_least(n: int) -> Callable[[list[Any]], bool]:
    return lambda items: len(items) >= n


def _key(item: TailItem) -> tuple[str, int]:
    return (item.graph, item.node.sequence)


async def _node_count(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM cwstore.nodes"))


async def test_tail_all_waits_for_open_transactions_and_resumes(
    db_dsn: str, astore: cwstore.AsyncStore
) -> None:
    x, y, z = _name("x"), _name("y"), _name("z")
    for g in (x, y, z):
        await astore.append(g, [node("goal", f"start of {g}")])
    admin = await asyncpg.connect(db_dsn)
    holder = await asyncpg.connect(db_dsn)
    feed = Collector(astore.tail_all(after=None))
    try:
        # Following: the first node of each of our graphs has come through.
        await feed.until(lambda items: {x, y, z} <= {i.graph for i in items})

        held = node("goal", "x1, committed late")
        await holder.execute("BEGIN")
        await holder.fetch(
            "SELECT * FROM cwstore.append_v1($1, $2::json)", x, prepare_batch([held]).json
        )
        held_xid = int(await holder.fetchval("SELECT pg_current_xact_id()::text"))
        delivered_before = len(feed.items)

        # Others commit meanwhile, on Y and Z.
        for i in range(3):
            await astore.append(y, [node("goal", f"y{i}")])
            await astore.append(z, [node("goal", f"z{i}")])
        await asyncio.sleep(2.5)  # more than the feed's poll interval, after NOTIFYs
        late = feed.items[delivered_before:]
        assert not any(i.graph == x and i.node.sequence == 2 for i in feed.items), (
            "tail_all delivered a node of a transaction that has not committed"
        )
        assert not any(i.cursor.xid > held_xid for i in late), (
            "tail_all delivered a node of a later transaction while an older one was open: "
            f"{[(str(i.cursor), i.graph) for i in late]}"
        )

        await holder.execute("COMMIT")
        await feed.until(lambda items: {(x, 2), (y, 4), (z, 4)} <= {_key(i) for i in items})
        x_item = next(i for i in feed.items if _key(i) == (x, 2))
        assert x_item.node.id == held["id"] and x_item.cursor.xid == held_xid

        # Every node of the database, each exactly once, in cursor order.
        total = await _node_count(admin)
        await feed.until(lambda items: len(items) >= total)
        await asyncio.sleep(1.5)
        keys = [_key(i) for i in feed.items]
        assert len(keys) == len(set(keys)) == total
        cursors = [i.cursor for i in feed.items]
        assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
        for g in (x, y, z):
            assert sorted(s for gg, s in keys if gg == g) == list(
                range(1, (4 if g != x else 2) + 1)
            )
            # within a graph, in sequence order
            assert [s for gg, s in keys if gg == g] == sorted(s for gg, s in keys if gg == g)
        stored = {
            (r["name"], r["seq"]): r["id"]
            for r in await admin.fetch(
                "SELECT g.name, n.seq, n.id FROM cwstore.nodes n"
                " JOIN cwstore.graphs g USING (graph_id)"
            )
        }
        assert {_key(i): i.node.id for i in feed.items} == stored
        items = list(feed.items)
    finally:
        await feed.stop()
        await holder.close()

    # Resuming from any item's cursor (as a string) yields exactly the items after it.
    try:
        for k in (0, len(items) // 2, len(items) - 4, len(items) - 1):
            text = str(items[k].cursor)
            assert Cursor.parse(text) == items[k].cursor
            rest = Collector(astore.tail_all(after=text))
            try:
                want = items[k + 1 :]
                await rest.until(at_least(len(want)))
                await asyncio.sleep(1.2)
                assert [(str(i.cursor), _key(i), i.node.id) for i in rest.items] == [
                    (str(i.cursor), _key(i), i.node.id) for i in want
                ]
            finally:
                await rest.stop()
        # A Cursor object works too, and the feed then follows new commits.
        rest = Collector(astore.tail_all(after=items[-1].cursor))
        try:
            await asyncio.sleep(0.3)
            assert rest.items == []
            await astore.append(z, [node("goal", "z after resume")])
            await rest.until(lambda got: len(got) >= 1)
            assert _key(rest.items[0]) == (z, 5)
            assert rest.items[0].cursor > items[-1].cursor
        finally:
            await rest.stop()
    finally:
        await admin.close()


async def test_tail_all_under_concurrent_writers_and_rollbacks(
    db_dsn: str, astore: cwstore.AsyncStore
) -> None:
    graphs = [_name(f"busy{i}") for i in range(3)]
    roots = {g: node("goal", f"root of {g}") for g in graphs}
    for g in graphs:
        await astore.append(g, [roots[g]])
    admin = await asyncpg.connect(db_dsn)
    feed = Collector(astore.tail_all(after=None))
    stores = [
        await cwstore.connect(db_dsn, min_size=1, max_size=1, migrate_schema=False)
        for _ in range(4)
    ]
    raws = [await asyncpg.connect(db_dsn) for _ in range(4)]
    try:
        await feed.until(lambda items: set(graphs) <= {i.graph for i in items})
        start = asyncio.Event()
        doomed: list[str] = []

        async def write(i: int) -> int:
            await start.wait()
            count = 0
            for step in range(24):
                g = graphs[(i + step) % 3]
                if step % 6 == 5:
                    n = node("inference", {"doomed": i, "step": step}, [roots[g]["id"]])
                    await raws[i].execute("BEGIN")
                    try:
                        await raws[i].fetch(
                            "SELECT * FROM cwstore.append_v1($1, $2::json)",
                            g,
                            prepare_batch([n]).json,
                        )
                        doomed.append(n["id"])
                        await asyncio.sleep(0.01)
                    finally:
                        await raws[i].execute("ROLLBACK")
                batch = [
                    node("inference", {"writer": i, "step": step, "k": k}, [roots[g]["id"]])
                    for k in range(1 + step % 2)
                ]
                await stores[i].append(g, batch)
                count += len(batch)
            return count

        tasks = [asyncio.create_task(write(i)) for i in range(4)]
        start.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        total = await _node_count(admin)
        await feed.until(at_least(total))
        await asyncio.sleep(1.5)
        keys = [_key(i) for i in feed.items]
        assert len(keys) == len(set(keys)) == total
        for g in graphs:
            # Every sequence of every graph, once (the order within a graph is the
            # subject of test_tail_all_delivers_a_graph_in_sequence_order).
            seqs = sorted(s for gg, s in keys if gg == g)
            assert seqs == list(range(1, len(seqs) + 1)), g
        delivered = {i.node.id for i in feed.items}
        assert doomed and not delivered & set(doomed)
        cursors = [i.cursor for i in feed.items]
        assert cursors == sorted(cursors)
    finally:
        await feed.stop()
        for s in stores:
            await s.close()
        for r in raws:
            await r.close()
        await admin.close()


async def test_tail_all_delivers_a_graph_in_sequence_order(
    db_dsn: str, astore: cwstore.AsyncStore
) -> None:
    """Within one graph the feed must follow sequence (= commit) order, so a node never
    comes before its parent. Transaction ids do not give that order: a transaction can
    take its id early (an earlier write, or waiting for the graph's lock) and append
    after a younger one committed."""
    graph = _name("order")
    root = node("goal", "root")
    await astore.append(graph, [root])
    early = await asyncpg.connect(db_dsn)
    feed: Collector | None = None
    try:
        await early.execute("BEGIN")
        await early.fetchval("SELECT pg_current_xact_id()")  # take an xid early
        parent = node("inference", "parent", [root["id"]])
        await astore.append(graph, [parent])  # a younger transaction, committed: seq 2
        child = node("inference", "child", [parent["id"]])
        rows = await early.fetch(
            "SELECT * FROM cwstore.append_v1($1, $2::json)", graph, prepare_batch([child]).json
        )
        assert rows[0]["seq"] == 3
        await early.execute("COMMIT")

        feed = Collector(astore.tail_all(after=None))
        await feed.until(lambda items: sum(i.graph == graph for i in items) >= 3)
        ours = [i for i in feed.items if i.graph == graph]
        assert [i.node.sequence for i in ours] == [1, 2, 3], (
            "tail_all delivered the graph out of sequence order (child before its parent): "
            f"{[(i.node.sequence, str(i.cursor)) for i in ours]}"
        )
    finally:
        if feed is not None:
            await feed.stop()
        await early.close()


async def test_tail_all_refuses_a_malformed_cursor(astore: cwstore.AsyncStore) -> None:
    with pytest.raises(cwstore.InputError):
        await asyncio.wait_for(anext(aiter(astore.tail_all(after="not-a-cursor"))), 5)


async def test_sync_tail_all_resumes(db_dsn: str, astore: cwstore.AsyncStore) -> None:
    graph = _name("syncall")
    await astore.append(graph, [node("goal", f"n{i}") for i in range(3)])
    sync = await asyncio.to_thread(
        cwstore.connect_sync, db_dsn, min_size=1, max_size=1, migrate_schema=False
    )
    try:

        def ours(after: Any, count: int) -> list[TailItem]:
            out: list[TailItem] = []
            deadline = time.monotonic() + WAIT
            for item in sync.tail_all(after=after):
                if isinstance(item, TailItem) and item.graph == graph:
                    out.append(item)
                if len(out) >= count or time.monotonic() > deadline:
                    break
            return out

        items = await asyncio.wait_for(asyncio.to_thread(ours, None, 3), WAIT)
        assert [i.node.sequence for i in items] == [1, 2, 3]
        rest = await asyncio.wait_for(asyncio.to_thread(ours, str(items[0].cursor), 2), WAIT)
        assert [str(i.cursor) for i in rest] == [str(i.cursor) for i in items[1:]]
    finally:
        await asyncio.to_thread(sync.close)


# --- (c) giving connections back ---------------------------------------------------------------


async def _backends(dsn: str) -> int:
    """Client backends of the test's database other than the one counting."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await conn.close()


async def test_a_tail_cancelled_by_a_cancel_scope_closes_its_connection(
    db_dsn: str, astore: cwstore.AsyncStore
) -> None:
    """anyio's cancellation repeats at every await inside the scope, the cleanup's too:
    the listener connection must still be closed (not left to the garbage collector)."""
    graph = _name("cancel")
    await astore.append(graph, [node("goal", "x")])
    before = await _backends(db_dsn)
    held: list[Any] = []
    for _ in range(5):
        with anyio.move_on_after(0.3):
            feed = astore.tail(graph)
            held.append(feed)  # a reference, so only the tail's own cleanup can close it
            async for _ in feed:
                pass
    deadline = time.monotonic() + 5
    while (now := await _backends(db_dsn)) > before and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert now == before, f"{now - before} listener backends left behind"
