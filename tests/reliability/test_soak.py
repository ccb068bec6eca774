"""Soak: many writers, two graphs, rolled-back transactions and killed backends, for a
bounded time; then every promise is checked against what is stored.

Size: ``CWSTORE_SOAK_WRITERS`` writers (default 16) for ``CWSTORE_SOAK_SECONDS``
seconds (default 5). The defaults are small enough for every CI run; raise them for
an endurance run, e.g. ``CWSTORE_SOAK_WRITERS=64 CWSTORE_SOAK_SECONDS=600``.

Each writer is an asyncio task with its own :class:`cwstore.AsyncStore` (one pooled
connection) and its own raw asyncpg connection. It appends one node at a time to its
graph (half the writers on each), retrying the same node on :class:`cwstore.Error`
until it is acknowledged; now and then it instead opens a raw transaction, calls
``cwstore.append_v1`` and rolls back. A killer task terminates random writer backends
(pooled or raw) throughout. Writers use no declared frontiers, so the stored frontier
must equal SPEC section 4's fold over the stored nodes.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest
from support.nodes import node
from support.reliability import INFINITY_SEQ, pids_of, terminate, with_params

import cwstore
from cwstore import _jsontext, fold_frontier
from cwstore._store_base import prepare_batch
from cwstore.document import resource_heads

WRITERS = int(os.environ.get("CWSTORE_SOAK_WRITERS", "16"))
SECONDS = float(os.environ.get("CWSTORE_SOAK_SECONDS", "5"))
ROLLBACK_SHARE = 0.15
KILL_EVERY = (0.02, 0.12)  # seconds between kills, uniform
FRONTIER_SAMPLES = 40  # sequences per graph where the historical frontier is checked

_RAW_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    ConnectionError,
)


@dataclass
class SoakWriter:
    """One worker: its node stream (parents are its own stored nodes; it owns one
    resource key and one semantic key, each linked to its head) and its record."""

    index: int
    graph: str
    app: str
    rng: random.Random
    mine: list[str] = field(default_factory=list)
    heads: dict[str, str] = field(default_factory=dict)
    step: int = 0
    acked: list[tuple[str, int]] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def next_node(self, marker: str = "ok") -> dict[str, Any]:
        self.step += 1
        tag = {"writer": self.index, "step": self.step, "marker": marker}
        own = self.rng.choice(self.mine[-20:]) if self.mine else None
        roll = self.rng.random()
        if marker != "ok" or own is None or roll < 0.15:
            return node("goal", {"text": "task", **tag}, [own] if own else [])
        if roll < 0.25:
            return node("system", {"contract": "parentless", **tag})
        if roll < 0.4:
            skey = f"w{self.index}.note"
            key = f"semantic:memory:{skey}"
            head = self.heads.get(key)
            payload = {"type": "memory", "key": skey, "content": tag}
            return node("semantic", payload, [head] if head else [own], key)
        if roll < 0.55:
            key = f"files/w{self.index}.txt"
            head = self.heads.get(key)
            return node("resource", {"content": tag}, [own] + ([head] if head else []), key)
        if roll < 0.8:
            return node("inference", tag, list({own, self.rng.choice(self.mine)}))
        return node("tool_call", {"name": "run", "args": tag}, [own])

    def stored(self, node: dict[str, Any], seq: int) -> None:
        self.acked.append((node["id"], seq))
        self.mine.append(node["id"])
        if "resourceKey" in node:
            self.heads[node["resourceKey"]] = node["id"]

    def failed(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1


async def _raw_rollback(raw: asyncpg.Connection, w: SoakWriter) -> None:
    """append_v1 inside a transaction that is then rolled back (or killed)."""
    node = w.next_node(marker="rolled back")
    w.rolled_back.append(node["id"])
    batch = prepare_batch([node])
    async with raw.transaction():
        rows = await raw.fetch("SELECT * FROM cwstore.append_v1($1, $2::json)", w.graph, batch.json)
        assert rows[0]["written"] is True
        if w.rng.random() < 0.5:
            await asyncio.sleep(w.rng.random() * 0.005)  # hold the graph lock a moment
        raise _Rollback


class _Rollback(Exception):
    pass


@pytest.mark.soak
async def test_soak_writers_rollbacks_and_kills(db_dsn: str) -> None:
    run = uuid.uuid4().hex[:8]
    graphs = [f"soak-{run}-a", f"soak-{run}-b"]
    writers = [
        SoakWriter(i, graphs[i % 2], f"soak-{run}-{i}", random.Random(f"{run}-{i}"))
        for i in range(WRITERS)
    ]
    admin = await asyncpg.connect(db_dsn)
    stores = [
        await cwstore.connect(
            with_params(db_dsn, application_name=w.app),
            min_size=1,
            max_size=1,
            migrate_schema=False,
        )
        for w in writers
    ]
    end = time.monotonic() + SECONDS
    hard_stop = end + 60  # writers finish their last node by then, or the test fails
    kills = 0

    async def write(w: SoakWriter, store: cwstore.AsyncStore) -> None:
        raw: asyncpg.Connection | None = None
        try:
            while time.monotonic() < end:
                if w.rng.random() < ROLLBACK_SHARE:
                    try:
                        if raw is None or raw.is_closed():
                            raw = await asyncpg.connect(with_params(db_dsn, application_name=w.app))
                        await _raw_rollback(raw, w)
                    except _Rollback:
                        pass
                    except _RAW_ERRORS as exc:  # killed: the transaction never committed
                        w.failed(exc)
                        if raw is not None:
                            raw.terminate()
                        raw = None
                    continue
                node = w.next_node()
                while True:
                    assert time.monotonic() < hard_stop, f"writer {w.index} never got an ack"
                    try:
                        out = await store.append(w.graph, [node])
                    except cwstore.Error as exc:  # anything else fails the test
                        w.failed(exc)
                        await asyncio.sleep(0.002)
                        continue
                    assert [n.id for n in out] == [node["id"]]
                    w.stored(node, out[0].sequence)
                    break
        finally:
            if raw is not None:
                raw.terminate()

    async def killer() -> None:
        nonlocal kills
        rng = random.Random(run)
        while time.monotonic() < end:
            await asyncio.sleep(rng.uniform(*KILL_EVERY))
            pids = await pids_of(admin, rng.choice(writers).app)
            if pids and await terminate(admin, rng.choice(pids)):
                kills += 1

    try:
        tasks = [asyncio.create_task(write(w, s)) for w, s in zip(writers, stores, strict=True)]
        kill_task = asyncio.create_task(killer())
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await kill_task
        for w, r in zip(writers, results, strict=True):
            assert r is None, (
                f"writer {w.index} died of {type(r).__module__}.{type(r).__name__}: {r}"
                f" (errors it had caught: {w.errors})"
            )

        assert kills > 0
        assert sum(sum(w.errors.values()) for w in writers) > 0, "no kill hit a writer"
        assert sum(len(w.rolled_back) for w in writers) > 0
        for graph in graphs:
            await _check_graph(admin, graph, [w for w in writers if w.graph == graph])
    finally:
        for s in stores:
            await s.close()
        await admin.close()


def _brief_heads(nodes: list[dict[str, Any]]) -> set[int]:
    """The sequences s where node s is a head at s only: the frontier's last head there
    and gone at s + 1. frontier_spans does not hold such a span; the reads add it."""
    fronts = [fold_frontier([])]
    for n in nodes:
        fronts.append(fold_frontier([n], start=fronts[-1]))
    return {
        s
        for s in range(1, len(nodes))
        if fronts[s] and fronts[s][-1] == nodes[s - 1]["id"] and fronts[s][-1] not in fronts[s + 1]
    }


async def _check_graph(admin: asyncpg.Connection, graph: str, writers: list[SoakWriter]) -> None:
    g = await admin.fetchrow("SELECT graph_id, length FROM cwstore.graphs WHERE name = $1", graph)
    assert g is not None
    graph_id, length = g["graph_id"], g["length"]
    rows = await admin.fetch(
        "SELECT seq, id, kind, parents, payload_text, resource_key"
        " FROM cwstore.nodes WHERE graph_id = $1 ORDER BY seq",
        graph_id,
    )
    nodes: list[dict[str, Any]] = []
    for r in rows:
        n: dict[str, Any] = {"id": r["id"], "kind": r["kind"], "parents": list(r["parents"])}
        n["payload"] = _jsontext.loads(r["payload_text"])
        if r["resource_key"] is not None:
            n["resourceKey"] = r["resource_key"]
        nodes.append(n)

    # Gapless, and the length is the count.
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert length == len(rows)

    # Every acknowledged append stored exactly once, at the sequence acknowledged;
    # nothing else stored; no rolled-back node stored.
    seq_of = {r["id"]: r["seq"] for r in rows}
    assert len(seq_of) == len(rows)
    acked = [a for w in writers for a in w.acked]
    assert len({a[0] for a in acked}) == len(acked)
    assert sorted(a[0] for a in acked) == sorted(seq_of)
    for nid, seq in acked:
        assert seq_of[nid] == seq
    rolled_back = {nid for w in writers for nid in w.rolled_back}
    assert not rolled_back & seq_of.keys(), "a rolled-back node was stored"
    for w in writers:
        seqs = [s for _, s in w.acked]
        assert seqs == sorted(seqs), f"writer {w.index}'s nodes are out of order"

    # Derived state: the frontier now and at sampled sequences is SPEC section 4's fold,
    # resource heads and versions follow the chains, one edge per parent. The frontier
    # as the reads give it, with its history trailing the graph and once brought to the
    # graph's length; then as the spans hold it (without a head of one sequence only,
    # sampled where there are some).
    name = await admin.fetchval("SELECT name FROM cwstore.graphs WHERE graph_id = $1", graph_id)
    step = max(1, len(nodes) // FRONTIER_SAMPLES)
    brief = _brief_heads(nodes)
    samples = sorted({*range(step, len(nodes) + 1, step), len(nodes), *sorted(brief)[:10]})

    async def read_frontiers() -> None:
        for seq in [None, *samples]:
            read = [
                r[0]
                for r in await admin.fetch(
                    "SELECT id FROM cwstore.frontier_at($1, $2) ORDER BY position", name, seq
                )
            ]
            assert read == fold_frontier(nodes if seq is None else nodes[:seq]), seq

    await read_frontiers()
    await admin.fetchval("SELECT cwstore.derive_v1($1)", name)
    await read_frontiers()
    frontier_now = [
        r[0]
        for r in await admin.fetch(
            "SELECT n.id FROM cwstore.frontier_spans s"
            " JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq"
            " WHERE s.graph_id = $1 AND s.to_seq = $2 ORDER BY s.from_seq, s.ord",
            graph_id,
            INFINITY_SEQ,
        )
    ]
    assert frontier_now == fold_frontier(nodes)
    for seq in samples:
        at = [
            r[0]
            for r in await admin.fetch(
                "SELECT n.id FROM cwstore.frontier_spans s"
                " JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq"
                " WHERE s.graph_id = $1 AND s.from_seq <= $2 AND $2 < s.to_seq"
                " ORDER BY s.from_seq, s.ord",
                graph_id,
                seq,
            )
        ]
        held = fold_frontier(nodes[:seq])
        if seq in brief:
            held = held[:-1]
        assert at == held, f"frontier at sequence {seq}"

    heads = {
        r["key"]: (r["head_id"], r["version"])
        for r in await admin.fetch(
            "SELECT key, head_id, version FROM cwstore.key_heads WHERE graph_id = $1", graph_id
        )
    }
    assert {k: v[0] for k, v in heads.items()} == resource_heads(nodes)
    for key, (_, version) in heads.items():
        chain_seqs = [i + 1 for i, n in enumerate(nodes) if n.get("resourceKey") == key]
        assert version == len(chain_seqs)
        closed = await admin.fetch(
            "SELECT version, node_seq, to_seq FROM cwstore.key_versions"
            " WHERE graph_id = $1 AND key = $2 ORDER BY version",
            graph_id,
            key,
        )
        assert [(v["version"], v["node_seq"], v["to_seq"]) for v in closed] == [
            (i, s, t) for i, (s, t) in enumerate(itertools.pairwise(chain_seqs), start=1)
        ]
    assert await admin.fetchval(
        "SELECT count(*) FROM cwstore.edges WHERE graph_id = $1", graph_id
    ) == sum(len(n["parents"]) for n in nodes)
