"""A channel value or pending write larger than a node's payload limit (4 MiB) is stored
in parts and comes back as LangGraph's PostgreSQL saver gives it back: 50 MB channel
values (bytes, a string, a dict of many small values) and a 20 MB pending write, through
the sync and the async saver. On main each put failed (``ValidationError``,
``too_large``). The put is one transaction (a put that fails leaves nothing), the
client's peak memory is a small multiple of the value (``tracemalloc``), and prune,
delete, copy and the move from LangGraph's PostgreSQL saver keep the value whole."""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver

import cwstore
from cwstore.langgraph import AsyncCwstoreSaver, CwstoreSaver, move_threads
from cwstore.langgraph._mapping import graph_name

MB = 1_000_000
SHAPES = ("bytes", "str", "dict")


def _value(shape: str, size: int) -> Any:
    """A value of about ``size`` bytes serialized."""
    if shape == "bytes":
        return os.urandom(size)
    if shape == "str":
        return "é" + "x" * (size - 2)
    return {f"k{i}": {"n": i, "s": "v" * 20, "f": [i, 0.5]} for i in range(size // 55)}


def _size(value: Any) -> int:
    """The value's serialized size: its bytes, or its JSON text's."""
    if isinstance(value, bytes):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _checkpoint(values: dict[str, Any], version: int) -> Any:
    return {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=-1)),
        "channel_values": values,
        "channel_versions": dict.fromkeys(values, version),
    }


def _put(saver: BaseCheckpointSaver[Any], config: Any, values: dict[str, Any], v: int) -> Any:
    return saver.put(config, _checkpoint(values, v), {"step": v}, dict.fromkeys(values, v))


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and bool(a == b)


@pytest.fixture(scope="module")
def savers(db_dsn: str) -> Iterator[tuple[CwstoreSaver, PostgresSaver]]:
    with cwstore.connect_sync(db_dsn) as store, PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        yield CwstoreSaver(store), pg


@pytest.mark.parametrize("shape", SHAPES)
def test_a_50_mb_channel_value_round_trips_as_in_postgres_saver(
    savers: tuple[CwstoreSaver, PostgresSaver], shape: str
) -> None:
    cw, pg = savers
    value = _value(shape, 50 * MB)
    thread = f"big-{shape}-{uuid.uuid4().hex[:8]}"
    got = []
    for saver in (cw, pg):
        stored = _put(saver, _config(thread), {"big": value, "small": 1}, 1)
        tup = saver.get_tuple(stored)
        (listed,) = list(saver.list(_config(thread)))
        assert tup is not None
        got.append(tup.checkpoint["channel_values"])
        assert listed.checkpoint["channel_values"] == tup.checkpoint["channel_values"]
    assert _same(got[0]["big"], value) and _same(got[1]["big"], value)
    assert got[0] == got[1]


@pytest.mark.parametrize("shape", SHAPES)
async def test_the_async_saver_stores_a_50_mb_value(db_dsn: str, shape: str) -> None:
    value = _value(shape, 50 * MB)
    thread = f"abig-{shape}-{uuid.uuid4().hex[:8]}"
    async with await cwstore.connect(db_dsn) as store:
        saver = AsyncCwstoreSaver(store)
        checkpoint = _checkpoint({"big": value}, 1)
        stored = await saver.aput(_config(thread), checkpoint, {"step": 1}, {"big": 1})
        await saver.aput_writes(stored, [("big", value)], "task-1")
        fresh = AsyncCwstoreSaver(store)  # remembers nothing: reads every part
        tup = await fresh.aget_tuple(stored)
        assert tup is not None
        assert _same(tup.checkpoint["channel_values"]["big"], value)
        assert len(tup.pending_writes or []) == 1
        assert _same((tup.pending_writes or [])[0][2], value)
        listed = [t async for t in fresh.alist(_config(thread))]
        assert _same(listed[0].checkpoint["channel_values"]["big"], value)


def test_a_20_mb_pending_write_round_trips_as_in_postgres_saver(
    savers: tuple[CwstoreSaver, PostgresSaver],
) -> None:
    cw, pg = savers
    value = _value("bytes", 20 * MB)
    thread = f"bigw-{uuid.uuid4().hex[:8]}"
    got = []
    for saver in (cw, pg):
        stored = _put(saver, _config(thread), {"small": 1}, 1)
        saver.put_writes(stored, [("big", value), ("small", 2)], "task-1")
        saver.put_writes(stored, [("other", {"x": "y" * (5 * MB)})], "task-2")
        tup = saver.get_tuple(stored)
        assert tup is not None
        got.append(tup.pending_writes or [])
    assert got[0] == got[1]
    assert _same(got[0][0][2], value)


def test_a_put_is_stored_in_parts_within_the_node_limit(
    savers: tuple[CwstoreSaver, PostgresSaver], db_dsn: str
) -> None:
    cw, _ = savers
    value = _value("bytes", 10 * MB)
    thread = f"parts-{uuid.uuid4().hex[:8]}"
    config = _put(cw, _config(thread), {"big": value}, 1)
    # The same value again in a new version of the channel: its parts are not repeated.
    config = _put(cw, config, {"big": value}, 2)
    _put(cw, config, {"big": b"small"}, 3)
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE starts_with(n.resource_key, 'lg:part:')),"
            " max(octet_length(n.payload_text)), sum(octet_length(n.payload_text))"
            "  FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
            " WHERE g.name = %s",
            (graph_name(thread, ""),),
        ).fetchone()
    assert row is not None
    parts, largest, total = row
    assert parts == 13  # 10 MB in parts of 786,432 bytes
    assert largest <= (1 << 20) + 100
    assert total < 10 * MB * 4 // 3 + MB
    tup = cw.get_tuple(_config(thread))
    assert tup is not None and tup.checkpoint["channel_values"]["big"] == b"small"
    history = [t.checkpoint["channel_values"]["big"] for t in cw.list(_config(thread))]
    assert history[1:] == [value, value]


def test_a_put_that_fails_after_its_parts_leaves_nothing(
    savers: tuple[CwstoreSaver, PostgresSaver], db_dsn: str
) -> None:
    cw, _ = savers
    thread = f"atomic-{uuid.uuid4().hex[:8]}"
    config = _put(cw, _config(thread), {"small": 1}, 1)
    # A message past the node limit: refused, in the append after the value's parts.
    huge = HumanMessage(content="m" * (5 * 1024 * 1024), id="huge")
    with pytest.raises(cwstore.ValidationError) as caught:
        _put(cw, config, {"big": _value("bytes", 10 * MB), "messages": [huge]}, 2)
    assert "too_large" in caught.value.codes
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT g.length FROM cwstore.graphs g WHERE g.name = %s", (graph_name(thread, ""),)
        ).fetchone()
    assert row is not None and row[0] == 1  # the first put's checkpoint, its small value inline
    assert len(list(cw.list(_config(thread)))) == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_a_large_put_holds_a_few_times_the_value(
    savers: tuple[CwstoreSaver, PostgresSaver], shape: str
) -> None:
    cw, _ = savers
    value = _value(shape, 30 * MB)
    size = _size(value)
    thread = f"mem-{shape}-{uuid.uuid4().hex[:8]}"
    _put(cw, _config(f"{thread}-warm"), {"big": _value(shape, 2 * MB)}, 1)
    gc.collect()
    tracemalloc.start()
    try:
        stored = _put(cw, _config(thread), {"big": value}, 1)
        put_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        cw.put_writes(stored, [("big", value)], "task-1")
        writes_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        gc.collect()
        tracemalloc.start()
        tup = CwstoreSaver(cw.store).get_tuple(_config(thread))
        get_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tup is not None
    assert put_peak < 4 * size, f"put: {put_peak / size:.1f}x"
    assert writes_peak < 4 * size, f"put_writes: {writes_peak / size:.1f}x"
    if shape != "dict":  # a dict's objects take far more than its JSON text
        # Two values come back: the channel's and the pending write's.
        assert get_peak < 2 * 4 * size, f"get: {get_peak / size:.1f}x"


def test_prune_delete_copy_and_move_keep_a_large_value(
    savers: tuple[CwstoreSaver, PostgresSaver],
) -> None:
    cw, pg = savers
    value = _value("bytes", 12 * MB)
    write = _value("str", 6 * MB)
    thread = f"day2-{uuid.uuid4().hex[:8]}"
    config = _put(cw, _config(thread), {"big": value, "n": 1}, 1)
    config = _put(cw, config, {"big": value, "n": 2}, 2)
    cw.put_writes(config, [("w", write)], "task-1")

    cw.copy_thread(thread, f"{thread}-copy")
    cw.prune([thread], strategy="keep_latest")
    for t in (thread, f"{thread}-copy"):
        tup = cw.get_tuple(_config(t))
        assert tup is not None
        assert _same(tup.checkpoint["channel_values"]["big"], value)
        assert tup.pending_writes == [("task-1", "w", write)]
    assert len(list(cw.list(_config(thread)))) == 1
    assert len(list(cw.list(_config(f"{thread}-copy")))) == 2

    cw.delete_thread(thread)
    cw.prune([f"{thread}-copy"], strategy="delete")
    assert cw.get_tuple(_config(thread)) is None
    assert cw.get_tuple(_config(f"{thread}-copy")) is None

    moved = f"{thread}-pg"
    stored = _put(pg, _config(moved), {"big": value}, 1)
    pg.put_writes(stored, [("w", write)], "task-1")
    assert move_threads(pg, cw, [moved]) == [(moved, 1)]
    tup = cw.get_tuple(_config(moved))
    assert tup is not None
    assert _same(tup.checkpoint["channel_values"]["big"], value)
    assert tup.pending_writes == [("task-1", "w", write)]
