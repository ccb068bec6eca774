"""Readers on a hot standby: every read works there and matches the primary once the
standby has replayed, and followers (``tail``, ``tail_all``, the view's live streams)
poll, since a standby refuses LISTEN and never receives NOTIFY. Writes go to the
primary (``db_dsn``); reads to the standby (``standby_dsn``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pytest
from support.nodes import step_node
from support.replica import caught_up
from support.stores import ThreadedStore

import cwstore
from cwstore.document import CausalNode
from cwstore.results import TailItem
from cwstore.view.live import LiveHub

CLIENTS = ["asyncpg", "psycopg-sync"]
COUNT = 20


@pytest.fixture(params=CLIENTS)
async def reader(request: pytest.FixtureRequest, standby_dsn: str) -> AsyncIterator[Any]:
    """A store on the standby, once per client."""
    if request.param == "asyncpg":
        store = await cwstore.connect(standby_dsn, max_size=2)
        try:
            yield store
        finally:
            await store.close()
    else:
        threaded = ThreadedStore(await asyncio.to_thread(cwstore.connect_sync, standby_dsn))
        try:
            yield threaded
        finally:
            await threaded.close()


@pytest.fixture
async def writer(db_dsn: str) -> AsyncIterator[cwstore.AsyncStore]:
    """A store on the primary."""
    store = await cwstore.connect(db_dsn, max_size=2)
    try:
        yield store
    finally:
        await store.close()


async def _write(writer: cwstore.AsyncStore, graph: str, first: int, last: int) -> None:
    for k in range(first, last):
        heads = await writer.frontier(graph) if k else []
        await writer.append(graph, [step_node(k, heads, "f.txt" if k == 0 else None)])
        await asyncio.sleep(0.01)


async def test_every_read_on_the_standby_matches_the_primary(
    reader: Any, writer: cwstore.AsyncStore, db_dsn: str, standby_dsn: str
) -> None:
    graph = f"r-{uuid.uuid4().hex[:8]}"
    await _write(writer, graph, 0, 7)
    await asyncio.to_thread(caught_up, db_dsn, standby_dsn)
    assert await reader.export_json(graph) == await writer.export_json(graph)
    assert await reader.export_json(graph, 4) == await writer.export_json(graph, 4)
    assert await reader.replay(graph) == await writer.replay(graph)
    assert await reader.project(graph) == await writer.project(graph)
    assert await reader.history(graph, "f.txt") == await writer.history(graph, "f.txt")
    assert await reader.frontier(graph) == await writer.frontier(graph)
    assert await reader.length(graph) == 7
    assert graph in {g.name for g in await reader.graphs()}


async def test_tail_on_the_standby_delivers_every_node_once_in_order(
    reader: Any, writer: cwstore.AsyncStore
) -> None:
    graph = f"t-{uuid.uuid4().hex[:8]}"
    await _write(writer, graph, 0, 1)
    # The standby may not hold the graph yet: the tail starts once it does.
    for _ in range(200):
        try:
            await reader.length(graph)
            break
        except cwstore.UnknownGraphError:
            await asyncio.sleep(0.05)
    writing = asyncio.create_task(_write(writer, graph, 1, COUNT))
    seen: list[int] = []
    try:
        async with asyncio.timeout(30):
            async for node in reader.tail(graph):
                seen.append(node.sequence)
                if len(seen) == COUNT:
                    break
    finally:
        await writing
    assert seen == list(range(1, COUNT + 1))


async def test_tail_all_on_the_standby_delivers_a_graph_in_order(
    reader: Any, writer: cwstore.AsyncStore
) -> None:
    graph = f"a-{uuid.uuid4().hex[:8]}"
    writing = asyncio.create_task(_write(writer, graph, 0, COUNT))
    seen: list[int] = []
    try:
        async with asyncio.timeout(30):
            async for item in reader.tail_all():
                if isinstance(item, TailItem) and item.graph == graph:
                    seen.append(item.node.sequence)
                    if len(seen) == COUNT:
                        break
    finally:
        await writing
    assert seen == list(range(1, COUNT + 1))


async def test_the_views_live_stream_on_the_standby_polls_promptly(
    writer: cwstore.AsyncStore, standby_dsn: str, db_dsn: str
) -> None:
    """A live stream of the view on a standby sees each new node within a second or
    two (it cannot be woken there, so it polls more often than on a primary)."""
    graph = f"v-{uuid.uuid4().hex[:8]}"
    await _write(writer, graph, 0, 1)
    await asyncio.to_thread(caught_up, db_dsn, standby_dsn)
    store = await cwstore.connect(standby_dsn, max_size=2)
    hub = LiveHub(store, 4)
    hub.open()
    stream = cast(AsyncGenerator[CausalNode, None], hub.follow(graph, 0))
    delays: list[float] = []
    try:
        async with asyncio.timeout(30):
            assert (await anext(stream)).sequence == 1
            for k in range(1, 4):
                await asyncio.sleep(0.3)
                sent = time.monotonic()
                await writer.append(graph, [step_node(k, await writer.frontier(graph))])
                assert (await anext(stream)).sequence == k + 1
                delays.append(time.monotonic() - sent)
    finally:
        await stream.aclose()
        await hub.close()
        await store.close()
    assert max(delays) < 2.0, delays
