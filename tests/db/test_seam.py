"""The public seam for integrations, on both clients (asyncpg's :class:`cwstore.AsyncStore`
and psycopg's :class:`cwstore.Store`): an error of a statement inside a borrowed
connection, snapshot, transaction or follower surfaces as the mapped
:class:`cwstore.Error` at that statement; :func:`cwstore.prepare_append` is the store's
own append, sent in the caller's transaction; :func:`cwstore.node_from_row` reads the
node columns; ``migrate_schema()`` brings an older schema to the current migration.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, LiteralString

import psycopg
import pytest

import cwstore
from cwstore._sql import migrations
from cwstore.drivers.psycopg import PsycopgConnection
from cwstore.migrate import apply_migrations_sync

CLIENTS = ["asyncpg", "psycopg"]
BLOCKS = ["connection", "snapshot", "transaction", "follower"]

EXPORT: LiteralString = "SELECT * FROM cwstore.export_parts_v1($1, NULL, NULL)"
APPEND: LiteralString = (
    "SELECT seq, id, created_at, written, payload_text"
    " FROM cwstore.append_v1($1, $2::json, $3, $4::json, $5)"
)
SET_GROUP: LiteralString = "SELECT pg_catalog.set_config('cwstore.retention_group', $1, true)"
NODES: LiteralString = (
    "SELECT n.seq, n.id, n.kind, n.parents, n.payload_text, n.created_at_text,"
    " n.resource_key FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
    " WHERE g.name = $1 ORDER BY n.seq"
)


def _name() -> str:
    return f"seam-{uuid.uuid4().hex}"


def _goal(text: str, parents: list[str] | None = None) -> dict[str, Any]:
    return {"kind": "goal", "parents": parents or [], "payload": {"text": text}}


def _sync_block(store: cwstore.Store, block: str) -> AbstractContextManager[Any]:
    opened: Callable[[], AbstractContextManager[Any]] = getattr(store, block)
    return opened()


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("client", CLIENTS)
async def test_a_statements_error_is_the_mapped_error_at_the_statement(
    db_dsn: str, client: str, block: str
) -> None:
    """Caught inside the block as a :class:`cwstore.UnknownGraphError` (CW404), the one
    that then leaves the block: never the driver's exception."""
    graph = _name()
    caught: list[BaseException] = []
    if client == "asyncpg":
        async with await cwstore.connect(db_dsn) as store:
            with pytest.raises(cwstore.UnknownGraphError) as info:
                async with getattr(store, block)() as conn:
                    try:
                        await conn.fetch(EXPORT, graph)
                    except cwstore.Error as exc:
                        caught.append(exc)
                        raise
            # The connection went back to the pool usable.
            async with store.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1
    else:

        def run() -> pytest.ExceptionInfo[cwstore.UnknownGraphError]:
            with cwstore.connect_sync(db_dsn) as store:
                with (
                    pytest.raises(cwstore.UnknownGraphError) as info,
                    _sync_block(store, block) as conn,
                ):
                    try:
                        conn.fetch(EXPORT, graph)
                    except cwstore.Error as exc:
                        caught.append(exc)
                        raise
                with store.connection() as conn:
                    assert conn.fetchval("SELECT 1") == 1
            return info

        info = await asyncio.to_thread(run)
    assert caught == [info.value]
    assert info.value.graph == graph


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_caught_error_leaves_the_transaction_rolled_back(db_dsn: str, client: str) -> None:
    """A write before the failed statement is not committed: the transaction is aborted,
    and leaving its block after catching the error commits nothing (PostgreSQL ends it
    with a rollback, on both clients)."""
    graph = _name()
    prepared = cwstore.prepare_append(graph, [_goal("kept?")])
    if client == "asyncpg":
        async with await cwstore.connect(db_dsn) as store:
            async with store.transaction() as conn:
                await conn.fetch(APPEND, *prepared.args)
                with pytest.raises(cwstore.UnknownGraphError):
                    await conn.fetch(EXPORT, _name())
            assert graph not in [g.name for g in await store.graphs()]
    else:

        def run() -> list[str]:
            with cwstore.connect_sync(db_dsn) as store:
                with store.transaction() as conn:
                    conn.fetch(APPEND, *prepared.args)
                    with pytest.raises(cwstore.UnknownGraphError):
                        conn.fetch(EXPORT, _name())
                return [g.name for g in store.graphs()]

        assert graph not in await asyncio.to_thread(run)


@pytest.mark.parametrize("client", CLIENTS)
async def test_prepare_append_in_a_transaction_of_ones_own(db_dsn: str, client: str) -> None:
    """``append_v1`` with a prepared append, beside another statement in one
    transaction: the nodes as :meth:`append` stores them (the same ids; the same result
    when the store appends the same batch again), the retention group set, a stale
    length refused as :class:`LengthConflictError`, a database refusal numbered by the
    batch."""
    graph = _name()
    first = _goal("first")
    prepared = cwstore.prepare_append(
        graph, [first], expected_length=0, retention_group=f"{graph}-group"
    )
    assert prepared.args == (graph, prepared.nodes_json, 0, None, None)
    second = _goal("second", [prepared.ids[0]])
    then = cwstore.prepare_append(graph, [second], expected_length=1)
    stale = cwstore.prepare_append(graph, [_goal("late")], expected_length=0)
    unknown_parent = cwstore.prepare_append(
        graph, [_goal("ok"), _goal("orphan", ["0" * 64])], frontier=None
    )

    if client == "asyncpg":
        async with await cwstore.connect(db_dsn) as store:
            async with store.transaction() as conn:
                assert prepared.retention_group is not None
                await conn.execute(SET_GROUP, prepared.retention_group)
                stored = prepared.stored(await conn.fetch(APPEND, *prepared.args))
                stored += then.stored(await conn.fetch(APPEND, *then.args))
            again = await store.append(graph, [first, second])
            with pytest.raises(cwstore.LengthConflictError):
                async with store.connection() as conn:
                    await conn.fetch(APPEND, *stale.args)
            with pytest.raises(cwstore.ValidationError) as refused:
                async with store.connection() as conn:
                    try:
                        await conn.fetch(APPEND, *unknown_parent.args)
                    except cwstore.ValidationError as exc:
                        raise unknown_parent.renumbered(exc) from exc
            async with store.connection() as conn:
                group = await conn.fetchval(
                    "SELECT retention_group FROM cwstore.graphs WHERE name = $1", graph
                )
    else:

        def run() -> tuple[Any, Any, Any, Any]:
            with cwstore.connect_sync(db_dsn) as store:
                with store.transaction() as conn:
                    assert prepared.retention_group is not None
                    conn.execute(SET_GROUP, prepared.retention_group)
                    stored = prepared.stored(conn.fetch(APPEND, *prepared.args))
                    stored += then.stored(conn.fetch(APPEND, *then.args))
                again = store.append(graph, [first, second])
                with pytest.raises(cwstore.LengthConflictError), store.connection() as conn:
                    conn.fetch(APPEND, *stale.args)
                with pytest.raises(cwstore.ValidationError) as refused, store.connection() as conn:
                    try:
                        conn.fetch(APPEND, *unknown_parent.args)
                    except cwstore.ValidationError as exc:
                        raise unknown_parent.renumbered(exc) from exc
                with store.connection() as conn:
                    group = conn.fetchval(
                        "SELECT retention_group FROM cwstore.graphs WHERE name = $1", graph
                    )
            return stored, again, refused, group

        stored, again, refused, group = await asyncio.to_thread(run)
    assert [n.sequence for n in stored] == [1, 2]
    assert stored == again
    assert group == f"{graph}-group"
    assert [(v.code, v.index) for v in refused.value.violations] == [("missing_parent", 1)]


def test_prepare_append_refuses_before_sending() -> None:
    """Bad arguments are an :class:`InputError`, a bad batch a :class:`ValidationError`
    with every violation, as :meth:`append` raises them."""
    with pytest.raises(cwstore.InputError):
        cwstore.prepare_append("", [_goal("x")])
    with pytest.raises(cwstore.InputError):
        cwstore.prepare_append("g", [_goal("x")], expected_length=-1)
    with pytest.raises(cwstore.InputError):
        cwstore.prepare_append("g", [_goal("x")], incarnation=True)
    with pytest.raises(cwstore.InputError):
        cwstore.prepare_append("g", [_goal("x")], retention_group="")
    with pytest.raises(cwstore.ValidationError) as info:
        cwstore.prepare_append("g", [_goal("x"), {"kind": "nope", "parents": [], "payload": 1}])
    assert {v.index for v in info.value.violations} == {1}


@pytest.mark.parametrize("client", CLIENTS)
async def test_node_from_row_reads_the_node_columns(db_dsn: str, client: str) -> None:
    """Rows of ``cwstore.nodes`` with the documented columns are the nodes
    :meth:`replay` returns, payloads as stored."""
    graph = _name()
    root = _goal("root")
    nodes = [
        root,
        {
            "kind": "resource",
            "parents": [],
            "payload": {"n": 1.50, "z": 1, "a": [True, None]},
            "resourceKey": "doc",
        },
    ]
    if client == "asyncpg":
        async with await cwstore.connect(db_dsn) as store:
            await store.append(graph, nodes)
            async with store.snapshot() as conn:
                read = [cwstore.node_from_row(r) for r in await conn.fetch(NODES, graph)]
            replayed = (await store.replay(graph)).nodes
    else:

        def run() -> tuple[list[cwstore.CausalNode], Any]:
            with cwstore.connect_sync(db_dsn) as store:
                store.append(graph, nodes)
                with store.snapshot() as conn:
                    rows = [cwstore.node_from_row(r) for r in conn.fetch(NODES, graph)]
                return rows, store.replay(graph).nodes

        read, replayed = await asyncio.to_thread(run)
    assert read == list(replayed)
    assert read[1].resource_key == "doc"
    assert read[1].sequence == 2


@pytest.mark.parametrize("client", CLIENTS)
async def test_migrate_schema_brings_an_older_schema_to_the_current_one(
    empty_db_dsn: str, client: str
) -> None:
    """A database one migration behind: connect() refuses it naming ``cwstore init``;
    with ``migrate_schema=True`` it applies the last migration, and the store's
    ``migrate_schema()`` then finds nothing to do."""
    files = migrations()
    with psycopg.connect(empty_db_dsn, autocommit=True) as raw:
        apply_migrations_sync(PsycopgConnection(raw), files[:-1])
    if client == "asyncpg":
        with pytest.raises(cwstore.SchemaNotReadyError, match="cwstore init"):
            await cwstore.connect(empty_db_dsn)
        async with await cwstore.connect(empty_db_dsn, migrate_schema=True) as store:
            again = await store.migrate_schema()
    else:

        def run() -> list[int]:
            with pytest.raises(cwstore.SchemaNotReadyError, match="cwstore init"):
                cwstore.connect_sync(empty_db_dsn)
            with cwstore.connect_sync(empty_db_dsn, migrate_schema=True) as store:
                return store.migrate_schema()

        again = await asyncio.to_thread(run)
    assert again == []
    with psycopg.connect(empty_db_dsn) as raw:
        recorded = raw.execute("SELECT max(version) FROM cwstore.schema_migrations").fetchone()
    assert recorded == (files[-1].version,)
