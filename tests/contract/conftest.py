"""The contract suite's fixtures: one ``store`` with async methods, for every client.

Each test of ``tests/contract`` is written once, async, against ``store`` and runs
once per client: ``asyncpg`` (:class:`cwstore.AsyncStore`) and ``psycopg-sync``
(:class:`cwstore.Store`, each call run in a worker thread by :class:`ThreadedStore`,
here and nowhere else). The database is the module's throwaway ``db_dsn`` (see
``tests/conftest.py``); tests keep apart by using a fresh graph name each (``graph``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest

from cwstore import AsyncStore, Store, connect, connect_sync

CLIENTS = ["asyncpg", "psycopg-sync"]


class ThreadedStore:
    """The sync :class:`cwstore.Store` behind the async interface of ``AsyncStore``.

    Every method runs the sync one in a worker thread (``asyncio.to_thread``), so the
    contract tests await both clients the same way. ``tail`` and ``tail_all`` pull the
    sync generator one item per thread hop.
    """

    def __init__(self, store: Store) -> None:
        self.sync = store
        self.dsn = store.dsn

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    async def graphs(self) -> Any:
        return await self._call("graphs")

    async def length(self, graph: str) -> int:
        return int(await self._call("length", graph))

    async def import_state(self, graph: str, state: Any, **kwargs: Any) -> int:
        return int(await self._call("import_state", graph, state, **kwargs))

    async def export_json(self, graph: str, as_of: Any = None) -> str:
        return str(await self._call("export_json", graph, as_of))

    async def replay(self, graph: str, as_of: Any = None) -> Any:
        return await self._call("replay", graph, as_of)

    async def append(self, graph: str, nodes: Any, **kwargs: Any) -> Any:
        return await self._call("append", graph, nodes, **kwargs)

    async def save(self, graph: str, state: Any, **kwargs: Any) -> Any:
        return await self._call("save", graph, state, **kwargs)

    async def frontier(self, graph: str) -> list[str]:
        return list(await self._call("frontier", graph))

    async def _pull(self, gen: Iterator[Any]) -> AsyncIterator[Any]:
        done = object()
        try:
            while True:
                item = await asyncio.to_thread(next, gen, done)
                if item is done:
                    return
                yield item
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                await asyncio.to_thread(close)

    def tail(self, graph: str, after: int = 0) -> AsyncIterator[Any]:
        return self._pull(self.sync.tail(graph, after))

    def tail_all(self, after: Any = None) -> AsyncIterator[Any]:
        return self._pull(self.sync.tail_all(after))

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


@pytest.fixture(params=CLIENTS)
async def store(request: pytest.FixtureRequest, db_dsn: str) -> AsyncIterator[Any]:
    """A store on the module's database with async methods, once per client."""
    if request.param == "asyncpg":
        astore: AsyncStore = await connect(db_dsn, min_size=1, max_size=4, migrate_schema=False)
        try:
            yield astore
        finally:
            await astore.close()
    else:
        sync = await asyncio.to_thread(
            connect_sync, db_dsn, min_size=1, max_size=4, migrate_schema=False
        )
        threaded = ThreadedStore(sync)
        try:
            yield threaded
        finally:
            await threaded.close()


@pytest.fixture
def graph() -> str:
    """A graph name no other test uses."""
    return f"g-{uuid.uuid4().hex}"


@pytest.fixture
def stored(db_dsn: str) -> Callable[[str], tuple[int | None, int]]:
    """``stored(name)`` -> (graphs.length or None when there is no such graph, number
    of rows in cwstore.nodes for it), read with a connection of its own."""

    def read(name: str) -> tuple[int | None, int]:
        with psycopg.connect(db_dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT g.length, (SELECT count(*) FROM cwstore.nodes n"
                " WHERE n.graph_id = g.graph_id) FROM cwstore.graphs g WHERE g.name = %s",
                (name,),
            ).fetchone()
        return (None, 0) if row is None else (int(row[0]), int(row[1]))

    return read
