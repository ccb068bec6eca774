"""``tools/async_to_sync.py`` rewrites by syntax node, and refuses what it cannot map."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

_TOOL = Path(__file__).resolve().parents[2] / "tools" / "async_to_sync.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("async_to_sync", _TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _load()

SOURCE = '''\
"""Open a store (:class:`AsyncStore`, ``asyncpg``); see :meth:`~cwstore.AsyncStore.tail`.

Paths are copied: ``cwstore/store_async.py``.
"""

from .drivers.asyncpg import AsyncpgPool as Pool  # a comment survives
from ._migrate_async import AsyncStore, connect

__all__ = ["AsyncStore", "connect"]


async def tail(store: AsyncStore, *, pool: AsyncpgPool) -> AsyncIterator[int]:
    async with store._pool.connection() as conn:
        async for row in conn.cursor():  # rows
            yield (await conn.fetchval("SELECT 1"))[0]
    await connect(dsn=None, pooled=await store.aput(x=1))
'''


EXPECTED = '''\
"""Open a store (:class:`Store`, ``psycopg``); see :meth:`~cwstore.Store.tail`.

Paths are copied: ``cwstore/store_async.py``.
"""

from .drivers.psycopg import PsycopgPool as Pool  # a comment survives
from ._migrate_sync import Store, connect_sync

__all__ = ["Store", "connect_sync"]


def tail(store: Store, *, pool: PsycopgPool) -> Iterator[int]:
    with store._pool.connection() as conn:
        for row in conn.cursor():  # rows
            yield (conn.fetchval("SELECT 1"))[0]
    connect_sync(dsn=None, pooled=store.put(x=1))
'''


def test_rewrites_nodes_and_keeps_layout() -> None:
    text, used = tool.convert(SOURCE)
    assert text == EXPECTED
    assert {"AsyncStore", "connect", "asyncpg", "_migrate_async", "aput"} <= used


def test_names_outside_the_map_stay() -> None:
    source = 'def setup(status: int) -> str:\n    """Run :func:`setup`."""\n    return x.list\n'
    assert tool.convert(source)[0] == source


@pytest.mark.parametrize(
    ("source", "complaint"),
    [
        ("x = AsyncThing()\n", "'AsyncThing' is not in NAMES"),
        ('"""The async client."""\n', "'async' in a string"),
        ('"""Await it."""\n', "'Await' in a string"),
        ('"""Use AsyncStore."""\n', "'AsyncStore' in a string"),
        ('"""Calls aget_tuple."""\n', "'aget_tuple' in a string"),
        ('"""Open an :class:`AsyncStore`."""\n', "an article before 'AsyncStore'"),
        ('"""Call ``connect(dsn)``."""\n', "cannot map 'connect'"),
        ('"""See ``asyncio.run``."""\n', "'asyncio' is not in NAMES"),
        ("x = 1  # async here\n", "'async' in a comment"),
        ('x = f"{y} :class:`AsyncStore`"\n', "an f-string with a name to map"),
        ("async def f():\n    return [y async for y in g()]\n", "async comprehension"),
        ("try:\n    pass\nexcept E as connect:\n    pass\n", "'connect' here is not renamed"),
    ],
)
def test_refuses_what_it_cannot_map(source: str, complaint: str) -> None:
    with pytest.raises(tool.MappingError, match=complaint.replace("(", r"\(")):
        tool.convert(source)
