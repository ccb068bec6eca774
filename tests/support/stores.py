"""Helpers shared by the contract tests (imported by name: pytest puts this folder on
``sys.path``, as it does for every test folder without an ``__init__.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from cwstore import Store


def dsn_as(dsn: str, user: str) -> str:
    """``dsn`` (a URL) logging in as ``user`` instead, without a password."""
    parts = urlsplit(dsn)
    hostport = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{hostport}"))


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

    async def project(self, graph: str, as_of: Any = None) -> Any:
        return await self._call("project", graph, as_of)

    async def history(self, graph: str, key: str) -> Any:
        return await self._call("history", graph, key)

    async def erase(self, graph: str, **kwargs: Any) -> int:
        return int(await self._call("erase", graph, **kwargs))

    async def erase_tenant(self, tenant: str, **kwargs: Any) -> Any:
        return await self._call("erase_tenant", tenant, **kwargs)

    async def idle_graphs(self, idle: Any, **kwargs: Any) -> Any:
        return await self._call("idle_graphs", idle, **kwargs)

    async def erase_idle(self, idle: Any, **kwargs: Any) -> Any:
        return await self._call("erase_idle", idle, **kwargs)

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
