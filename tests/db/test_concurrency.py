"""Many writers on one graph (SPEC section 7): gapless sequences, commit order equal to
sequence order, idempotent acknowledgements, chain races as compare-and-set, and graphs
that do not block each other.

Writers are real concurrent clients: asyncio tasks with an AsyncStore each, sync Stores
in spawned processes, and raw asyncpg transactions that append and then roll back.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import time
import traceback
import uuid
from typing import Any

import asyncpg
import pytest
from support.nodes import node

import cwstore
from cwstore import ChainConflictError, ConflictError, _jsontext, compute_id, fold_frontier
from cwstore._store_base import prepare_batch
from cwstore.document import resource_heads

INFINITY = 9223372036854775807
PER_WRITER = 30
ASYNC_WRITERS = 8
PROCESS_WRITERS = 4


class Writer:
    """One worker's node stream: parents are [] or nodes this worker stored; it also
    keeps its own resource and semantic keys (linked to their heads)."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = random.Random(seed)
        self.mine: list[str] = []
        self.heads: dict[str, str] = {}
        self.step = 0

    def next_node(self, *, marker: str = "ok") -> dict[str, Any]:
        self.step += 1
        tag = {"writer": self.name, "step": self.step, "marker": marker}
        own = self.rng.choice(self.mine) if self.mine else None
        roll = self.rng.random()
        if own is None or roll < 0.2:
            return node("goal", {"text": "task", **tag})
        if roll < 0.3:
            return node("system", {"contract": "parentless", **tag})
        if roll < 0.45:
            key = f"semantic:memory:{self.name}.note"
            payload = {"type": "memory", "key": f"{self.name}.note", "content": tag}
            head = self.heads.get(key)
            return node("semantic", payload, [head] if head else [own], key)
        if roll < 0.6:
            key = f"files/{self.name}.txt"
            head = self.heads.get(key)
            return node("resource", {"content": tag}, [own] + ([head] if head else []), key)
        if roll < 0.8:
            second = self.rng.choice(self.mine)
            return node("inference", tag, [own, second])
        return node("tool_call", {"name": "run", "args": tag}, [own])

    def stored(self, node: dict[str, Any]) -> None:
        self.mine.append(node["id"])
        if "resourceKey" in node:
            self.heads[node["resourceKey"]] = node["id"]


def _process_writer(
    dsn: str,
    graph: str,
    name: str,
    count: int,
    seed: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """A writer in its own (spawned) process, on the sync Store."""
    try:
        try:
            store = cwstore.connect_sync(dsn, min_size=1, max_size=1)
        except BaseException:
            ready.put((name, traceback.format_exc()))
            raise
        try:
            ready.put((name, None))
            if not go.wait(120):
                raise RuntimeError("never told to start")
            w = Writer(name, seed)
            acked: list[tuple[str, int]] = []
            for _ in range(count):
                n = w.next_node()
                out = store.append(graph, [n], expected_length=None)
                assert len(out) == 1 and out[0].id == n["id"]
                acked.append((out[0].id, out[0].sequence))
                w.stored(n)
        finally:
            store.close()
        results.put((name, "ok", acked))
    except BaseException:
        results.put((name, "error", traceback.format_exc()))


async def _graph_id(conn: asyncpg.Connection, graph: str) -> int:
    return int(await conn.fetchval("SELECT cwstore.ensure_graph_v1($1)", graph))


async def _stored(conn: asyncpg.Connection, graph_id: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT seq, id, kind, parents, payload_text, created_at_text, resource_key"
        " FROM cwstore.nodes WHERE graph_id = $1 ORDER BY seq",
        graph_id,
    )


def _as_node(r: asyncpg.Record) -> dict[str, Any]:
    out = {
        "id": r["id"],
        "kind": r["kind"],
        "parents": list(r["parents"]),
        "payload": _jsontext.loads(r["payload_text"]),
        "createdAt": r["created_at_text"],
        "sequence": r["seq"],
    }
    if r["resource_key"] is not None:
        out["resourceKey"] = r["resource_key"]
    return out


# --- (a) many writers, one graph ----------------------------------------------------------


@pytest.mark.slow
async def test_many_writers_on_one_graph(db_dsn: str) -> None:
    graph = f"shared-{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(db_dsn)
    try:
        graph_id = await _graph_id(admin, graph)
        root = node("system", "shared contract")
        seed_store = await cwstore.connect(db_dsn, min_size=1, max_size=1)
        await seed_store.append(graph, [root])

        # --- observers, started before any writer -------------------------------------
        tail_seen: list[int] = []
        tail_started = asyncio.Event()

        async def follow() -> None:
            async for n in seed_store.tail(graph, after=0):
                tail_seen.append(n.sequence)
                tail_started.set()

        visible_order: list[int] = []
        holes: list[tuple[int, list[int]]] = []
        stop_polling = asyncio.Event()

        async def poll() -> None:
            # Each query is its own snapshot: at no moment may a later sequence be
            # visible while an earlier one is not.
            conn = await asyncpg.connect(db_dsn)
            try:
                seen: set[int] = set()
                while True:
                    last_round = stop_polling.is_set()
                    seqs = [
                        r[0]
                        for r in await conn.fetch(
                            "SELECT seq FROM cwstore.nodes WHERE graph_id = $1 ORDER BY seq",
                            graph_id,
                        )
                    ]
                    if seqs != list(range(1, len(seqs) + 1)):
                        holes.append((len(seqs), seqs[-5:]))
                    for s in seqs:
                        if s not in seen:
                            seen.add(s)
                            visible_order.append(s)
                    if last_round:
                        return
                    await asyncio.sleep(0.003)
            finally:
                await conn.close()

        follower = asyncio.create_task(follow())
        await asyncio.wait_for(tail_started.wait(), 10)
        poller = asyncio.create_task(poll())

        # --- the processes (spawned, sync Store), waiting for the start signal --------
        ctx = multiprocessing.get_context("spawn")
        ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(
                target=_process_writer,
                args=(db_dsn, graph, f"p{i}", PER_WRITER, 1000 + i, ready, go, results),
                daemon=True,
            )
            for i in range(PROCESS_WRITERS)
        ]
        for p in procs:
            p.start()
        try:
            for _ in procs:
                name, problem = await asyncio.to_thread(ready.get, True, 90)
                assert problem is None, f"process writer {name} could not connect:\n{problem}"

            # --- the async writers ----------------------------------------------------
            stores = [
                await cwstore.connect(db_dsn, min_size=1, max_size=1, migrate_schema=False)
                for _ in range(ASYNC_WRITERS)
            ]
            raws = [await asyncpg.connect(db_dsn) for _ in range(ASYNC_WRITERS)]
            start = asyncio.Event()
            rolled_back: list[str] = []

            async def writer(i: int) -> list[tuple[str, int]]:
                w = Writer(f"a{i}", i)
                store, raw = stores[i], raws[i]
                acked: list[tuple[str, int]] = []
                await start.wait()
                for step in range(PER_WRITER):
                    if step % 5 == 2:
                        # A transaction that appends, holds the graph lock a moment,
                        # and rolls back: its sequence must be reused, its node never seen.
                        doomed = w.next_node(marker="rolled back")
                        batch = prepare_batch([doomed])
                        await raw.execute("BEGIN")
                        try:
                            rows = await raw.fetch(
                                "SELECT * FROM cwstore.append_v1($1, $2::json)",
                                graph,
                                batch.json,
                            )
                            assert rows[0]["written"] is True
                            rolled_back.append(doomed["id"])
                            await asyncio.sleep(random.random() * 0.02)
                        finally:
                            await raw.execute("ROLLBACK")
                    n = w.next_node()
                    out = await store.append(graph, [n], expected_length=None)
                    assert len(out) == 1 and out[0].id == n["id"]
                    acked.append((out[0].id, out[0].sequence))
                    w.stored(n)
                    if step % 7 == 0:
                        await asyncio.sleep(0)
                return acked

            tasks = [asyncio.create_task(writer(i)) for i in range(ASYNC_WRITERS)]
            go.set()
            start.set()
            async_acks = await asyncio.wait_for(asyncio.gather(*tasks), 180)

            proc_acks: dict[str, list[tuple[str, int]]] = {}
            for _ in procs:
                name, status, payload = await asyncio.to_thread(results.get, True, 180)
                assert status == "ok", f"process writer {name} failed:\n{payload}"
                proc_acks[name] = payload
        finally:
            go.set()
            for p in procs:
                await asyncio.to_thread(p.join, 30)
                if p.is_alive():
                    p.kill()
        for p in procs:
            assert p.exitcode == 0

        acked = [a for lst in async_acks for a in lst] + [
            a for lst in proc_acks.values() for a in lst
        ]
        expected_total = 1 + len(acked)
        assert len(acked) == (ASYNC_WRITERS + PROCESS_WRITERS) * PER_WRITER
        stop_polling.set()
        await asyncio.wait_for(poller, 30)
        deadline = time.monotonic() + 30
        while len(tail_seen) < expected_total and time.monotonic() < deadline:
            assert not follower.done(), follower
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # anything delivered twice would show up now
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower

        # --- what is stored ---------------------------------------------------------------
        rows = await _stored(admin, graph_id)
        nodes = [_as_node(r) for r in rows]
        assert [n["sequence"] for n in nodes] == list(range(1, expected_total + 1))
        assert (
            await admin.fetchval("SELECT length FROM cwstore.graphs WHERE graph_id = $1", graph_id)
            == expected_total
        )
        for n in nodes:
            assert n["id"] == compute_id(
                n["kind"], n["parents"], n["payload"], n.get("resourceKey")
            ), n
        by_id = {n["id"]: n["sequence"] for n in nodes}
        assert len(by_id) == len(nodes)
        assert sorted(a[0] for a in acked) == sorted(by_id.keys() - {root["id"]})
        for nid, seq in acked:
            assert by_id[nid] == seq
        assert not set(rolled_back) & set(by_id), "a rolled-back node was stored"
        assert rolled_back, "no transaction was rolled back"
        assert not any(
            isinstance(n["payload"], dict) and "rolled back" in _jsontext.dumps(n["payload"])
            for n in nodes
        )

        assert await seed_store.frontier(graph) == fold_frontier(nodes)
        # The frontier's history, brought to the graph's length, ends in the same heads.
        await admin.fetchval("SELECT cwstore.derive_v1($1)", graph)
        open_spans = [
            r[0]
            for r in await admin.fetch(
                "SELECT n.id FROM cwstore.frontier_spans s"
                " JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq"
                " WHERE s.graph_id = $1 AND s.to_seq = $2 ORDER BY s.from_seq, s.ord",
                graph_id,
                INFINITY,
            )
        ]
        assert open_spans == fold_frontier(nodes)

        heads = {
            r["key"]: (r["head_id"], r["version"])
            for r in await admin.fetch(
                "SELECT key, head_id, version FROM cwstore.key_heads WHERE graph_id = $1",
                graph_id,
            )
        }
        expected_heads = resource_heads(nodes)
        assert {k: v[0] for k, v in heads.items()} == expected_heads
        for key, (_, version) in heads.items():
            assert version == sum(1 for n in nodes if n.get("resourceKey") == key)
        assert await admin.fetchval(
            "SELECT count(*) FROM cwstore.edges WHERE graph_id = $1", graph_id
        ) == sum(len(n["parents"]) for n in nodes)

        # --- the writers really overlapped -------------------------------------------------
        # Every process wrote while some asyncio writer was writing, and vice versa.
        async_seqs = sorted(seq for lst in async_acks for _, seq in lst)
        for name, lst in proc_acks.items():
            seqs = [seq for _, seq in lst]
            assert min(seqs) < async_seqs[-1] and max(seqs) > async_seqs[0], name
        writers_by_seq = {seq: f"a{i}" for i, lst in enumerate(async_acks) for _, seq in lst} | {
            seq: name for name, lst in proc_acks.items() for _, seq in lst
        }
        switches = sum(
            1 for s in range(2, expected_total) if writers_by_seq[s] != writers_by_seq[s + 1]
        )
        assert switches > expected_total // 4, f"writers barely interleaved ({switches})"

        # --- commit order is sequence order --------------------------------------------
        assert holes == [], f"a reader saw sequence holes: {holes[:3]}"
        assert visible_order == list(range(1, expected_total + 1))
        assert tail_seen == list(range(1, expected_total + 1))

        for s in stores:
            await s.close()
        for r in raws:
            await r.close()
        await seed_store.close()
    finally:
        await admin.close()


# --- (b) chain races -----------------------------------------------------------------------


RACERS = 6


async def _racers(db_dsn: str) -> list[Any]:
    """Four AsyncStores and two sync Stores (called through threads)."""
    stores: list[Any] = []
    for i in range(RACERS):
        if i % 3 == 2:
            stores.append(
                await asyncio.to_thread(
                    cwstore.connect_sync, db_dsn, min_size=1, max_size=1, migrate_schema=False
                )
            )
        else:
            stores.append(
                await cwstore.connect(db_dsn, min_size=1, max_size=1, migrate_schema=False)
            )
    return stores


async def _append(store: Any, graph: str, nodes: list[dict[str, Any]]) -> Any:
    if isinstance(store, cwstore.Store):
        return await asyncio.to_thread(store.append, graph, nodes)
    return await store.append(graph, nodes)


async def _read_heads(store: Any, graph: str) -> dict[str, str]:
    if isinstance(store, cwstore.Store):
        state = await asyncio.to_thread(store.replay, graph)
    else:
        state = await store.replay(graph)
    return resource_heads(state.nodes)


async def _close(stores: list[Any]) -> None:
    for s in stores:
        if isinstance(s, cwstore.Store):
            await asyncio.to_thread(s.close)
        else:
            await s.close()


def _versioned(kind: str, key_name: str, content: str, parents: list[str]) -> dict[str, Any]:
    if kind == "semantic":
        return node(
            "semantic",
            {"type": "memory", "key": key_name, "content": content},
            parents,
            f"semantic:memory:{key_name}",
        )
    return node("resource", {"content": content}, parents, key_name)


def _key(kind: str, key_name: str) -> str:
    return f"semantic:memory:{key_name}" if kind == "semantic" else key_name


async def _race(
    stores: list[Any], graph: str, make: Any
) -> tuple[list[dict[str, Any]], list[Any], list[str | None]]:
    """Every racer reads the key heads, then all append together."""
    gate = asyncio.Event()
    nodes: list[dict[str, Any]] = [{}] * len(stores)
    read: list[str | None] = [None] * len(stores)
    arrived = 0
    all_read = asyncio.Event()

    async def one(i: int) -> Any:
        nonlocal arrived
        heads = await _read_heads(stores[i], graph)
        nodes[i], read[i] = make(i, heads)
        arrived += 1
        if arrived == len(stores):
            all_read.set()
        await gate.wait()
        try:
            return await _append(stores[i], graph, [nodes[i]])
        except ConflictError as exc:
            return exc

    tasks = [asyncio.create_task(one(i)) for i in range(len(stores))]
    await asyncio.wait_for(all_read.wait(), 30)
    gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return nodes, outcomes, read


@pytest.mark.parametrize("kind", ["semantic", "resource"])
async def test_same_key_from_the_same_head_one_wins(db_dsn: str, kind: str) -> None:
    graph = f"race-{uuid.uuid4().hex[:10]}"
    stores = await _racers(db_dsn)
    try:
        base = node("goal", "shared work")
        v1 = _versioned(kind, "shared.doc", "v1", [base["id"]])
        await _append(stores[0], graph, [base, v1])
        key = _key(kind, "shared.doc")

        def make(i: int, heads: dict[str, str]) -> tuple[dict[str, Any], str | None]:
            head = heads.get(key)
            parents = [base["id"]] + ([head] if head else [])
            return _versioned(kind, "shared.doc", f"v2 by racer {i}", parents), head

        nodes, outcomes, read = await _race(stores, graph, make)
        assert all(h == v1["id"] for h in read)
        winners = [i for i, o in enumerate(outcomes) if isinstance(o, list)]
        assert len(winners) == 1, outcomes
        winner = nodes[winners[0]]
        assert outcomes[winners[0]][0].id == winner["id"]
        assert outcomes[winners[0]][0].sequence == 3
        for i, o in enumerate(outcomes):
            if i in winners:
                continue
            assert isinstance(o, ChainConflictError), o
            assert o.key == key
            assert o.linked_head == v1["id"]
            assert o.current_head == winner["id"]

        state = await _replay(stores[0], graph)
        assert [n.id for n in state.nodes] == [base["id"], v1["id"], winner["id"]]
        assert resource_heads(state.nodes) == {key: winner["id"]}
    finally:
        await _close(stores)


@pytest.mark.parametrize("kind", ["semantic", "resource"])
async def test_brand_new_key_one_wins(db_dsn: str, kind: str) -> None:
    graph = f"race-{uuid.uuid4().hex[:10]}"
    stores = await _racers(db_dsn)
    try:
        base = node("goal", "shared work")
        await _append(stores[0], graph, [base])
        key = _key(kind, "fresh.key")

        def make(i: int, heads: dict[str, str]) -> tuple[dict[str, Any], str | None]:
            assert key not in heads
            parents = [base["id"]] if i % 2 else []
            return _versioned(kind, "fresh.key", f"first by racer {i}", parents), None

        nodes, outcomes, _ = await _race(stores, graph, make)
        winners = [i for i, o in enumerate(outcomes) if isinstance(o, list)]
        assert len(winners) == 1, outcomes
        winner = nodes[winners[0]]
        for i, o in enumerate(outcomes):
            if i in winners:
                continue
            assert isinstance(o, ChainConflictError), o
            assert o.key == key
            assert o.linked_head is None
            assert o.current_head == winner["id"]
        state = await _replay(stores[0], graph)
        assert [n.id for n in state.nodes] == [base["id"], winner["id"]]
    finally:
        await _close(stores)


async def test_writers_on_distinct_keys_all_win(db_dsn: str) -> None:
    graph = f"race-{uuid.uuid4().hex[:10]}"
    stores = await _racers(db_dsn)
    try:
        base = node("goal", "shared work")
        firsts = [
            _versioned("semantic" if i % 2 else "resource", f"own.{i}", "v1", [base["id"]])
            for i in range(RACERS)
        ]
        await _append(stores[0], graph, [base, *firsts])
        keys = [_key("semantic" if i % 2 else "resource", f"own.{i}") for i in range(RACERS)]

        def make(i: int, heads: dict[str, str]) -> tuple[dict[str, Any], str | None]:
            kind = "semantic" if i % 2 else "resource"
            head = heads[keys[i]]
            return _versioned(kind, f"own.{i}", "v2", [base["id"], head]), head

        nodes, outcomes, _ = await _race(stores, graph, make)
        assert all(isinstance(o, list) for o in outcomes), outcomes
        assert sorted(o[0].sequence for o in outcomes) == list(range(RACERS + 2, 2 * RACERS + 2))
        state = await _replay(stores[0], graph)
        assert len(state.nodes) == 2 * RACERS + 1
        assert resource_heads(state.nodes) == {keys[i]: nodes[i]["id"] for i in range(RACERS)}
    finally:
        await _close(stores)


async def _replay(store: Any, graph: str) -> cwstore.AgentState:
    if isinstance(store, cwstore.Store):
        return await asyncio.to_thread(store.replay, graph)
    state: cwstore.AgentState = await store.replay(graph)
    return state


# --- (c) graphs do not block each other -------------------------------------------------------


async def test_an_open_transaction_on_one_graph_does_not_block_another(db_dsn: str) -> None:
    a, b = f"held-{uuid.uuid4().hex[:10]}", f"free-{uuid.uuid4().hex[:10]}"
    store = await cwstore.connect(db_dsn, min_size=2, max_size=4, migrate_schema=False)
    holder = await asyncpg.connect(db_dsn)
    probe = await asyncpg.connect(db_dsn)
    try:
        await store.append(a, [node("goal", "a0")])
        await store.append(b, [node("goal", "b0")])

        held = node("goal", "a1, never committed")
        await holder.execute("BEGIN")
        rows = await holder.fetch(
            "SELECT * FROM cwstore.append_v1($1, $2::json)", a, prepare_batch([held]).json
        )
        assert rows[0]["seq"] == 2

        # The lock is really held: another append to A times out on it.
        await probe.execute("SET lock_timeout = '300ms'")
        with pytest.raises(asyncpg.LockNotAvailableError):
            await probe.fetch(
                "SELECT * FROM cwstore.append_v1($1, $2::json)",
                a,
                prepare_batch([node("goal", "a2")]).json,
            )

        began = time.monotonic()
        out = await asyncio.wait_for(store.append(b, [node("goal", "b1")]), 3)
        assert out[0].sequence == 2
        # A graph created on first use meanwhile, and a reader of A.
        c = f"new-{uuid.uuid4().hex[:10]}"
        out = await asyncio.wait_for(store.append(c, [node("goal", "c0")]), 3)
        assert out[0].sequence == 1
        state = await asyncio.wait_for(store.replay(a), 3)
        assert [n.sequence for n in state.nodes] == [1]
        assert await asyncio.wait_for(store.frontier(a), 3) == [state.nodes[0].id]
        assert time.monotonic() - began < 5

        await holder.execute("ROLLBACK")
        assert await store.length(a) == 1
        out = await asyncio.wait_for(store.append(a, [node("goal", "a2 after rollback")]), 3)
        assert out[0].sequence == 2
    finally:
        await holder.close()
        await probe.close()
        await store.close()
