"""Wake-ups go out only while a follower is registered (cwstore.listeners): a plain
LISTEN hears nothing, a registered one hears every append, and a follower that is gone
stops the wake-ups at the next registration."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg

import cwstore
from cwstore._store_base import prepare_batch, q


async def _heard(listener: asyncpg.Connection, writer: asyncpg.Connection) -> list[str]:
    heard: list[str] = []

    def got(_c: Any, _pid: Any, _channel: Any, payload: Any) -> None:
        heard.append(payload)

    await listener.add_listener("cwstore", got)
    try:
        batch = prepare_batch([{"kind": "goal", "parents": [], "payload": uuid.uuid4().hex}])
        await writer.fetch(
            "SELECT * FROM cwstore.append_v1($1, $2::json)", "l-" + uuid.uuid4().hex, batch.json
        )
        await asyncio.sleep(0.5)
    finally:
        await listener.remove_listener("cwstore", got)
    return heard


async def test_only_registered_followers_are_woken(db_dsn: str) -> None:
    listener = await asyncpg.connect(db_dsn)
    writer = await asyncpg.connect(db_dsn)
    try:
        await writer.execute("DELETE FROM cwstore.listeners")
        assert await _heard(listener, writer) == []
        await listener.execute("SELECT cwstore.listen_v1()")
        heard = await _heard(listener, writer)
        assert len(heard) == 1
        assert heard[0].endswith(":1")
        await listener.execute("SELECT cwstore.unlisten_v1()")
        assert await _heard(listener, writer) == []
    finally:
        await listener.close()
        await writer.close()


async def test_a_gone_follower_is_forgotten(db_dsn: str) -> None:
    conn = await asyncpg.connect(db_dsn)
    try:
        gone = await asyncpg.connect(db_dsn)
        gone_pid = gone.get_server_pid()
        await gone.execute("SELECT cwstore.listen_v1()")
        await gone.close()
        for _ in range(100):  # the backend exits just after the client closes
            if not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", gone_pid
            ):
                break
            await asyncio.sleep(0.05)
        assert (
            await conn.fetchval("SELECT count(*) FROM cwstore.listeners WHERE pid = $1", gone_pid)
            == 1
        )
        await conn.execute("SELECT cwstore.listen_v1()")
        pids = {r[0] for r in await conn.fetch("SELECT pid FROM cwstore.listeners")}
        assert gone_pid not in pids
        assert conn.get_server_pid() in pids
        await conn.execute("SELECT cwstore.unlisten_v1()")
    finally:
        await conn.close()


async def test_a_follower_tells_which_graph_was_written(db_dsn: str) -> None:
    """``wait`` returns the payloads of the wake-ups (``graph_id:...``), with both
    adapters, so one follower can wake only the readers of that graph."""
    graph = "l-" + uuid.uuid4().hex
    async with await cwstore.connect(db_dsn, max_size=1) as store:
        await store.append(graph, [{"kind": "goal", "parents": [], "payload": "first"}])
        async with store.connection() as conn:
            row = await conn.fetchrow(q("graph_get"), graph)
        assert row is not None
        graph_id = row["graph_id"]
        async with store.follower() as follower:
            await store.append(graph, [{"kind": "goal", "parents": [], "payload": "async"}])
            assert await follower.wait(5) == [f"{graph_id}:2"]
            assert await follower.wait(0.01) == []
    with cwstore.connect_sync(db_dsn, max_size=1) as sync_store, sync_store.follower() as sync:
        sync_store.append(graph, [{"kind": "goal", "parents": [], "payload": "sync"}])
        assert await asyncio.to_thread(sync.wait, 5) == [f"{graph_id}:3"]
        assert await asyncio.to_thread(sync.wait, 0.01) == []
