"""Both clients through a transaction-mode pooler (PgBouncer, ``pool_mode =
transaction``), where a server connection goes to another client between
transactions, and with it whatever session state it holds.

Needs ``CWSTORE_TEST_POOLER_DSN``: a DSN of the pooler in front of the server of
``CWSTORE_TEST_DSN`` (its database name is replaced by each module's); skipped
without one. ``.ci/run`` starts Debian's PgBouncer on 127.0.0.1:6432 for it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from support.nodes import step_node

import cwstore
from cwstore.drivers.psycopg import PsycopgConnection

WORKERS = 6
STEPS = 12


async def test_async_workers_share_a_pool_through_the_pooler(pooled_dsn: str) -> None:
    prefix = uuid.uuid4().hex[:8]
    store = await cwstore.connect(pooled_dsn, min_size=8, max_size=8, pooler="transaction")

    async def work(i: int) -> None:
        graph = f"{prefix}-a{i}"
        for k in range(STEPS):
            heads = await store.frontier(graph) if k else []
            await store.append(graph, [step_node(k, heads)], expected_length=k)
            assert (await store.project(graph)).length == k + 1

    try:
        await asyncio.gather(*(work(i) for i in range(WORKERS)))
        lengths = {g.name: g.length for g in await store.graphs() if g.name.startswith(prefix)}
    finally:
        await store.close()
    assert lengths == {f"{prefix}-a{i}": STEPS for i in range(WORKERS)}


def test_sync_threads_share_a_pool_through_the_pooler(pooled_dsn: str) -> None:
    prefix = uuid.uuid4().hex[:8]
    store = cwstore.connect_sync(pooled_dsn, min_size=8, max_size=8, pooler="transaction")
    errors: list[BaseException] = []

    def work(i: int) -> None:
        graph = f"{prefix}-s{i}"
        try:
            for k in range(STEPS):
                heads = store.frontier(graph) if k else []
                store.append(graph, [step_node(k, heads)], expected_length=k)
                assert store.project(graph).length == k + 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lengths = {g.name: g.length for g in store.graphs() if g.name.startswith(prefix)}
    finally:
        store.close()
    assert errors == []
    assert lengths == {f"{prefix}-s{i}": STEPS for i in range(WORKERS)}


@pytest.fixture
def tenants(db_dsn: str) -> Iterator[None]:
    """Tenants ``acme`` and ``beta`` exist (``cwstore init --roles``)."""
    from cwstore import roles

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        roles.install_roles_sync(PsycopgConnection(conn))
        for tenant in ("acme", "beta"):
            roles.add_tenant_member_sync(PsycopgConnection(conn), tenant, "cwstore_writer")
    yield


@pytest.mark.parametrize("client", ["asyncpg", "psycopg-sync"])
async def test_the_tenant_stays_with_its_store_through_the_pooler(
    pooled_dsn: str, db_dsn: str, tenants: None, client: str
) -> None:
    """Two stores of different tenants share the pooler's server connections: each
    graph is created with its own store's tenant (a session setting would follow the
    server connection to the other store)."""
    prefix = uuid.uuid4().hex[:8]

    async def run(tenant: str) -> None:
        if client == "asyncpg":
            store = await cwstore.connect(
                pooled_dsn, max_size=3, tenant=tenant, pooler="transaction"
            )
            try:
                for k in range(8):
                    await store.append(f"{prefix}-{tenant}-{k}", [step_node(0, [])])
            finally:
                await store.close()
        else:

            def sync() -> None:
                with cwstore.connect_sync(
                    pooled_dsn, max_size=3, tenant=tenant, pooler="transaction"
                ) as store:
                    for k in range(8):
                        store.append(f"{prefix}-{tenant}-{k}", [step_node(0, [])])

            await asyncio.to_thread(sync)

    await asyncio.gather(run("acme"), run("beta"))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, tenant FROM cwstore.graphs WHERE name LIKE %s", (f"{prefix}-%",)
        ).fetchall()
    assert len(rows) == 16
    assert all(name.split("-")[1] == tenant for name, tenant in rows), rows


@pytest.mark.parametrize("client", ["asyncpg", "psycopg-sync"])
async def test_tail_through_the_pooler_polls_and_delivers_every_node_once(
    pooled_dsn: str, db_dsn: str, client: str
) -> None:
    """A tail through the pooler delivers every node once, in order, while a writer
    appends, and registers no listener: a LISTEN (and its row in cwstore.listeners)
    would stay with a server connection other clients use."""
    graph = f"t-{uuid.uuid4().hex[:8]}"
    count = 30
    writer = await cwstore.connect(pooled_dsn, max_size=2, pooler="transaction")
    await writer.append(graph, [step_node(0, [])])

    async def write() -> None:
        for k in range(1, count):
            await writer.append(graph, [step_node(k, await writer.frontier(graph))])
            await asyncio.sleep(0.01)

    def listeners() -> int:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM cwstore.listeners").fetchone()
        return int(row[0]) if row else -1

    seen: list[int] = []
    registered: list[int] = []
    try:
        if client == "asyncpg":
            reader = await cwstore.connect(pooled_dsn, max_size=2, pooler="transaction")
            writing = asyncio.create_task(write())
            try:
                async for node in reader.tail(graph):
                    seen.append(node.sequence)
                    if len(seen) == 2:
                        registered.append(await asyncio.to_thread(listeners))
                    if len(seen) == count:
                        break
            finally:
                await writing
                await reader.close()
        else:

            def follow() -> None:
                with cwstore.connect_sync(pooled_dsn, max_size=2, pooler="transaction") as s:
                    for node in s.tail(graph):
                        seen.append(node.sequence)
                        if len(seen) == 2:
                            registered.append(listeners())
                        if len(seen) == count:
                            break

            await asyncio.gather(asyncio.to_thread(follow), write())
    finally:
        await writer.close()
    assert seen == list(range(1, count + 1))
    assert registered == [0]
