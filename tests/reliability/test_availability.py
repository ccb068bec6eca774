"""What a role that may not write cwstore can do to its readers: nothing.

The all-graphs feed (``tail_all``) reads only nodes that no running transaction can
still overtake. It used to wait for every transaction on the server that held an xid,
so any login role, even one with no privilege at all and connected to another
database, could stall the feed for everyone by leaving a transaction open. Now only
transactions of roles that may write cwstore nodes, in this database, hold it back
(``cwstore.feed_horizon``); "never skips" still holds (``tests/db/test_tail.py``).

Wake-up notifications (``NOTIFY cwstore``) are a hint any role can send: a forged one
makes a follower look at the table once more and yields nothing that is not there.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.documents import GraphBuilder

import cwstore


def _as(dsn: str, user: str, dbname: str | None = None) -> str:
    params: dict[str, Any] = conninfo_to_dict(dsn)
    params["user"] = user
    params.pop("password", None)
    if dbname is not None:
        params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture
def outsiders(db_dsn: str) -> Iterator[list[psycopg.Connection[Any]]]:
    """Two open transactions holding an xid: a role with no cwstore privilege in this
    database, and one in another database (postgres)."""
    name = f"cw_out_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(db_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    conns: list[psycopg.Connection[Any]] = []
    try:
        for dbname in (None, "postgres"):
            c = psycopg.connect(_as(db_dsn, name, dbname))
            c.execute("SELECT pg_current_xact_id()")  # an xid, held until rollback
            conns.append(c)
        yield conns
    finally:
        for c in conns:
            c.close()
        with psycopg.connect(db_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


async def _first_of_feed(store: Any, graph: str) -> str:
    async for item in store.tail_all():
        if item.graph == graph:
            return str(item.node.id)
    raise AssertionError("the feed ended")


@pytest.mark.parametrize("client", ["async", "sync"])
async def test_an_outsiders_open_transaction_does_not_stall_tail_all(
    db_dsn: str, outsiders: list[Any], client: str
) -> None:
    b = GraphBuilder()
    b.system("contract")
    b.goal("delivered")
    graph = f"avail-{uuid.uuid4().hex}"
    writer = cwstore.connect_sync(db_dsn, migrate_schema=False, max_size=1)
    try:
        writer.append(graph, b.nodes)
    finally:
        writer.close()
    if client == "async":
        store = await cwstore.connect(db_dsn, migrate_schema=False, max_size=1)
        try:
            got = await asyncio.wait_for(_first_of_feed(store, graph), timeout=15)
        finally:
            await store.close()
    else:
        sync = cwstore.connect_sync(db_dsn, migrate_schema=False, max_size=1)

        def first() -> str:
            for item in sync.tail_all():
                if isinstance(item, cwstore.TailItem) and item.graph == graph:
                    return str(item.node.id)
            raise AssertionError("the feed ended")

        try:
            got = await asyncio.wait_for(asyncio.to_thread(first), timeout=15)
        finally:
            sync.close()
    assert got == b.nodes[0]["id"]
    for c in outsiders:
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_a_writers_open_transaction_still_holds_the_feed(db_dsn: str, login_role: Any) -> None:
    """The bound, shown: a writer role's transaction that might still append is waited
    for, so a node committed after it started is not delivered before it ends."""
    writer_dsn = login_role("cwstore_writer", "default")
    b = GraphBuilder()
    b.system("contract")
    graph = f"avail-{uuid.uuid4().hex}"
    with psycopg.connect(writer_dsn) as held, psycopg.connect(db_dsn, autocommit=True) as c:
        held.execute("SELECT pg_current_xact_id()")
        store = cwstore.connect_sync(db_dsn, migrate_schema=False, max_size=1)
        try:
            store.append(graph, b.nodes)
            gid = c.execute("SELECT graph_id FROM cwstore.graphs WHERE name = %s", (graph,))
            gid_ = gid.fetchone()
            assert gid_ is not None
            rows = c.execute("SELECT graph_id FROM cwstore.tail_all_v1(0, 0, 0, 100000)").fetchall()
            assert (gid_[0],) not in rows
            held.rollback()
            rows = c.execute("SELECT graph_id FROM cwstore.tail_all_v1(0, 0, 0, 100000)").fetchall()
            assert (gid_[0],) in rows
        finally:
            store.close()


async def test_a_forged_notification_yields_nothing(db_dsn: str) -> None:
    b = GraphBuilder()
    b.system("contract")
    graph = f"avail-{uuid.uuid4().hex}"
    store = await cwstore.connect(db_dsn, migrate_schema=False, max_size=2)
    try:
        await store.append(graph, b.nodes)
        seen: list[str] = []

        async def follow() -> None:
            async for node in store.tail(graph):
                seen.append(node.id)

        task = asyncio.create_task(follow())
        try:
            with psycopg.connect(db_dsn, autocommit=True) as c:
                (gid,) = c.execute(
                    "SELECT graph_id FROM cwstore.graphs WHERE name = %s", (graph,)
                ).fetchone() or (None,)
                for payload in (f"{gid}:999", "garbage", "", f"{gid}:-1"):
                    c.execute("SELECT pg_notify('cwstore', %s)", (payload,))
            await asyncio.sleep(1.5)
        finally:
            task.cancel()
        assert seen == [b.nodes[0]["id"]]
    finally:
        await store.close()


async def test_a_follower_fetches_a_bounded_number_of_bytes(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tail and tail_all fetch at most TAIL_BATCH_BYTES of payload past a batch's first
    node (1,000 nodes of 10 MB were fetched at once before); every node still comes,
    in order."""
    from cwstore import _store_base, store, store_async
    from cwstore._store_base import q

    b = GraphBuilder()
    b.system("contract")
    for i in range(6):
        b.inference("x" * (1 << 20) + str(i))
    graph = f"avail-{uuid.uuid4().hex}"
    sync = cwstore.connect_sync(db_dsn, migrate_schema=False, max_size=1)
    try:
        sync.append(graph, b.nodes)
        with psycopg.connect(db_dsn, autocommit=True) as c:
            gid, life = c.execute(
                "SELECT graph_id, incarnation FROM cwstore.graphs WHERE name = %s", (graph,)
            ).fetchone() or (None, None)
            raw = psycopg.RawCursor(c)
            rows = raw.execute(q("tail_graph"), (gid, 0, 1000, 2_500_000, life)).fetchall()
            assert [r[0] for r in rows] == [1, 2, 3, 4]  # 0, 1, 2 MB before 2, 3, 4
            rows = raw.execute(q("tail_graph"), (gid, 4, 1000, 10, life)).fetchall()
            assert [r[0] for r in rows] == [5]  # the first node always comes
            feed = c.execute(
                "SELECT seq FROM cwstore.tail_all_v1(0, %s, 0, 1000, 2500000) WHERE graph_id = %s",
                (gid - 1, gid),
            ).fetchall()
            assert len(feed) <= 4
        for module in (_store_base, store, store_async):
            monkeypatch.setattr(module, "TAIL_BATCH_BYTES", 1_500_000, raising=False)
        seqs = []
        for node in sync.tail(graph):
            seqs.append(node.sequence)
            if len(seqs) == len(b.nodes):
                break
        assert seqs == list(range(1, len(b.nodes) + 1))
        astore = await cwstore.connect(db_dsn, migrate_schema=False, max_size=1)
        try:
            got = []
            async for node in astore.tail(graph):
                got.append(node.sequence)
                if len(got) == len(b.nodes):
                    break
            assert got == seqs
        finally:
            await astore.close()
    finally:
        sync.close()
