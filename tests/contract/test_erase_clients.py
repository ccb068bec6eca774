"""Erasure through the clients (docs/erasure.md), once per client.

What the clients promise on top of the SQL functions: ``erase`` and the batch loops of
``erase_tenant`` and ``erase_idle``, ``tail`` bound to the life of a graph it started
on (:class:`cwstore.GraphErasedError`, and never a node of a new life of the name),
``tail_all``'s :class:`cwstore.ErasedItem` in its place in the feed, and ``save`` after
the graph it remembered was erased (and created again). The SQL-level rules (what is
removed, roles, concurrent writers, the audit record) are tested in ``test_erasure.py``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
from support.documents import GraphBuilder
from support.stores import ThreadedStore

import cwstore
from cwstore import ErasedItem, GraphErasedError, TailItem, UnknownGraphError

WAIT = 60.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _session(text: str = "write the report") -> GraphBuilder:
    b = GraphBuilder()
    b.system("You are a test agent.")
    b.goal(text)
    b.inference({"step": 1})
    return b


async def _other(store: Any, db_dsn: str, tenant: str | None = None) -> Any:
    """A second store of the same client kind as ``store`` (its own memory of saves)."""
    if isinstance(store, ThreadedStore):
        sync = await asyncio.to_thread(cwstore.connect_sync, db_dsn, max_size=2, tenant=tenant)
        return ThreadedStore(sync)
    return await cwstore.connect(db_dsn, max_size=2, tenant=tenant)


async def _next(it: Any) -> Any:
    return await asyncio.wait_for(anext(it), WAIT)


# --- erase -----------------------------------------------------------------------------


async def test_erase_returns_the_nodes_and_the_name_starts_again(store: Any) -> None:
    g = _name("erase")
    b = _session()
    await store.save(g, b.state())
    assert await store.erase(g, reason="asked to be forgotten") == 3
    with pytest.raises(UnknownGraphError) as caught:
        await store.length(g)
    assert not isinstance(caught.value, GraphErasedError)
    assert g not in [i.name for i in await store.graphs()]
    # The name is free again, from sequence 1.
    [node] = await store.append(g, [{"kind": "goal", "parents": [], "payload": "again"}])
    assert node.sequence == 1
    assert await store.length(g) == 1


async def test_erase_of_an_unknown_graph(store: Any) -> None:
    with pytest.raises(UnknownGraphError) as caught:
        await store.erase(_name("nope"))
    assert not isinstance(caught.value, GraphErasedError)


@pytest.mark.parametrize(
    ("call", "kwargs"),
    [
        ("erase", {"graph": ""}),
        ("erase", {"graph": "g", "reason": "a\x00b"}),
        ("erase_tenant", {"tenant": ""}),
        ("erase_tenant", {"tenant": "t", "batch": 0}),
        ("erase_tenant", {"tenant": "t", "batch": True}),
        ("erase_tenant", {"tenant": "t", "batch": 2**31}),
        ("idle_graphs", {"idle": timedelta(0)}),
        ("idle_graphs", {"idle": timedelta(days=-1)}),
        ("idle_graphs", {"idle": 90}),
        ("idle_graphs", {"idle": timedelta(days=1), "tenant": "a\x00"}),
        ("erase_idle", {"idle": timedelta(days=1), "batch": -1}),
        ("erase_idle", {"idle": timedelta(seconds=-1)}),
    ],
)
async def test_bad_arguments_are_refused_before_the_database(
    store: Any, call: str, kwargs: dict[str, Any]
) -> None:
    first = next(iter(kwargs))
    args = {k: v for k, v in kwargs.items() if k != first}
    with pytest.raises(cwstore.InputError):
        await getattr(store, call)(kwargs[first], **args)


async def test_erase_tenant_loops_until_every_graph_is_gone(store: Any, db_dsn: str) -> None:
    tenant = _name("tenant")
    writer = await _other(store, db_dsn, tenant=tenant)
    names = sorted(_name("t") for _ in range(5))
    try:
        for i, g in enumerate(names):
            await writer.append(g, [{"kind": "goal", "parents": [], "payload": i}])
    finally:
        await writer.close()
    erased = await store.erase_tenant(tenant, reason="contract ended", batch=2)
    assert sorted(e.graph for e in erased) == names
    assert all(isinstance(e, cwstore.ErasedGraph) and e.nodes == 1 for e in erased)
    assert not {i.name for i in await store.graphs()} & set(names)
    assert await store.erase_tenant(tenant) == []


async def test_idle_graphs_and_erase_idle(store: Any, db_dsn: str) -> None:
    tenant = _name("idle")
    writer = await _other(store, db_dsn, tenant=tenant)
    names = sorted(_name("i") for _ in range(3))
    try:
        for g in names:
            await writer.append(g, [{"kind": "goal", "parents": [], "payload": g}])
    finally:
        await writer.close()
    assert await store.idle_graphs(timedelta(days=1), tenant=tenant) == []
    await asyncio.sleep(0.3)
    found = await store.idle_graphs(timedelta(milliseconds=100), tenant=tenant)
    assert [i.graph for i in found] == names
    assert all(i.tenant == tenant and i.length == 1 for i in found)
    assert [i.name for i in await store.graphs() if i.name in names] == names  # a dry run
    erased = await store.erase_idle(
        timedelta(milliseconds=100), tenant=tenant, reason="retention", batch=1
    )
    assert sorted(e.graph for e in erased) == names
    assert {e.graph: e.last_write for e in erased} == {i.graph: i.last_write for i in found}
    assert await store.idle_graphs(timedelta(milliseconds=100), tenant=tenant) == []


# --- save after an erasure -------------------------------------------------------------


async def test_save_after_this_store_erased_the_graph_starts_from_scratch(store: Any) -> None:
    g = _name("save")
    b = _session()
    await store.save(g, b.state())
    await store.erase(g)
    b.answer("done")
    written = await store.save(g, b.state())
    assert [n.sequence for n in written] == [1, 2, 3, 4]
    assert (await store.replay(g)).to_obj() == b.state()


async def test_save_after_another_store_erased_the_graph(store: Any, db_dsn: str) -> None:
    g = _name("save")
    b = _session()
    await store.save(g, b.state())  # remembered: the next save would read nothing
    other = await _other(store, db_dsn)
    try:
        await other.erase(g)
    finally:
        await other.close()
    b.answer("done")
    written = await store.save(g, b.state())
    assert [n.sequence for n in written] == [1, 2, 3, 4]
    assert (await store.replay(g)).to_obj() == b.state()


@pytest.mark.parametrize("new_life_nodes", [5, 3])
async def test_save_after_erase_and_recreate_is_compared_with_the_new_life(
    store: Any, db_dsn: str, new_life_nodes: int
) -> None:
    g = _name("save")
    b = _session()
    await store.save(g, b.state())
    other = await _other(store, db_dsn)
    try:
        await other.erase(g)
        nb = GraphBuilder()
        for i in range(new_life_nodes):
            nb.inference({"other life": i})
        await other.save(g, nb.state())
    finally:
        await other.close()
    b.answer("done")
    with pytest.raises(cwstore.DivergedError):
        await store.save(g, b.state())
    assert (await store.replay(g)).to_obj() == nb.state()


# --- tail ------------------------------------------------------------------------------


async def test_tail_ends_with_graph_erased(store: Any) -> None:
    g = _name("tail")
    b = _session()
    await store.save(g, b.state())
    it = store.tail(g)
    try:
        got = [await _next(it) for _ in range(3)]
        assert [n.id for n in got] == [n["id"] for n in b.nodes]
        await store.erase(g)
        with pytest.raises(GraphErasedError) as caught:
            await _next(it)
        assert caught.value.graph == g
        assert isinstance(caught.value, UnknownGraphError)
    finally:
        await it.aclose()


async def test_tail_never_delivers_a_new_life_of_the_name(store: Any) -> None:
    """Erased and created again with more nodes while the tail is between two nodes:
    it delivers the rest of what it had read of the old life, then ends."""
    g = _name("tail")
    b = _session()
    await store.save(g, b.state())
    it = store.tail(g)
    try:
        first = await _next(it)
        assert first.sequence == 1
        await store.erase(g)
        nb = GraphBuilder()
        for i in range(6):
            nb.inference({"new life": i})
        await store.save(g, nb.state())
        new_ids = {n["id"] for n in nb.nodes}
        delivered = []
        with pytest.raises(GraphErasedError):
            while True:
                delivered.append(await _next(it))
        assert not {n.id for n in delivered} & new_ids
        assert [n.id for n in delivered] == [n["id"] for n in b.nodes[1 : 1 + len(delivered)]]
    finally:
        await it.aclose()


@pytest.mark.skipif(
    bool(os.environ.get("CWSTORE_TEST_CITUS_DSN")),
    reason="tail_all is refused on Citus (tests/citus/test_placement.py)",
)
async def test_tail_all_delivers_the_erasure_between_the_lives(store: Any) -> None:
    """A follower that received the old life's nodes gets the erasure after them and
    before the new life's nodes. (One that starts later never sees the erased nodes:
    they are gone; it still gets the erasure, in its place.)"""
    g = _name("feed")
    old = _session()
    await store.save(g, old.state())
    new = GraphBuilder()
    new.goal("the new life")
    new.inference({"n": 1})

    mine: list[Any] = []
    ids: set[int] = set()

    async def until_nodes(it: Any, count: int) -> None:
        while len([i for i in mine if isinstance(i, TailItem)]) < count:
            item = await _next(it)
            if isinstance(item, TailItem) and item.graph == g:
                ids.add(item.cursor.graph_id)
                mine.append(item)
            elif isinstance(item, ErasedItem) and item.graph_id in ids:
                mine.append(item)

    it = store.tail_all()
    try:
        await until_nodes(it, 3)
        await store.erase(g)
        await store.save(g, new.state())
        await until_nodes(it, 5)
    finally:
        await it.aclose()
    shape = [("erased", None) if isinstance(i, ErasedItem) else ("node", i.node.id) for i in mine]
    assert shape == [
        *(("node", n["id"]) for n in old.nodes),
        ("erased", None),
        *(("node", n["id"]) for n in new.nodes),
    ]
    erased = mine[3]
    assert erased.cursor.graph_id == erased.graph_id
    assert mine[2].cursor < erased.cursor < mine[4].cursor

    # From the start again: the erased nodes are gone, the erasure is still there.
    again: list[Any] = []
    it = store.tail_all()
    try:
        while len([i for i in again if isinstance(i, TailItem)]) < 2:
            item = await _next(it)
            if (isinstance(item, TailItem) and item.graph == g) or (
                isinstance(item, ErasedItem) and item.graph_id in ids
            ):
                again.append(item)
    finally:
        await it.aclose()
    assert again == mine[3:]


async def test_append_puts_a_new_graph_in_a_retention_group(store: Any, db_dsn: str) -> None:
    tenant, group = _name("grp"), _name("thread")
    writer = await _other(store, db_dsn, tenant=tenant)
    names = sorted(_name("g") for _ in range(2))
    try:
        for g in names:
            node = {"kind": "goal", "parents": [], "payload": g}
            await writer.append(g, [node], retention_group=group)
        with pytest.raises(cwstore.InputError):
            await writer.append(_name("g"), [node], retention_group="")
    finally:
        await writer.close()
    await asyncio.sleep(0.3)
    found = await store.idle_graphs(timedelta(milliseconds=100), tenant=tenant)
    assert [(i.graph, i.retention_group) for i in found] == [(g, group) for g in names]
    erased = await store.erase_idle(timedelta(milliseconds=100), tenant=tenant, batch=1)
    assert sorted((e.graph, e.retention_group) for e in erased) == [(g, group) for g in names]
