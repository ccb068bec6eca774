"""Helpers shared by the reliability tests (imported by name: pytest puts this folder on
``sys.path``, as it does for every test folder without an ``__init__.py``).

Nothing here knows how the store works inside: documents are built with the public
:func:`cwstore.compute_id`, and what is stored is read back with plain SQL over the
documented tables, so a test can judge the store by its promises alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import asyncpg

import cwstore
from cwstore import compute_id

from .nodes import T0

T = TypeVar("T")

INFINITY_SEQ = 9223372036854775807

# SPEC section 6: the only codes a refusal may carry.
SPEC_CODES = frozenset(
    {
        "version",
        "kind",
        "semantic_payload",
        "semantic_type",
        "duplicate_id",
        "missing_parent",
        "parent_order",
        "identity",
        "sequence",
        "created_at",
        "resource_chain",
        "frontier_reference",
        "unrepresentable",
        "shape",
    }
)


def with_params(dsn: str, **params: str) -> str:
    """``dsn`` (a URL) with query parameters added or replaced.

    Both drivers read ``application_name`` and ``options`` from the URL: libpq natively,
    asyncpg by passing unknown parameters on as startup settings. Spaces are written
    ``%20`` (libpq does not read ``+`` as a space).
    """
    parts = urlsplit(dsn)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query, safe="/", quote_via=quote)))


def chain(
    n: int,
    *,
    tag: str = "",
    parent: str | None = None,
    first_sequence: int = 1,
    pad: int = 0,
    sequence: bool = True,
) -> list[dict[str, Any]]:
    """``n`` nodes in one simple chain, each the only parent of the next.

    The first node is a parentless ``goal`` (or a child of ``parent``); the rest are
    ``inference`` nodes. ``tag`` makes the content (and so the ids) distinct between
    chains; ``pad`` adds that many characters to every payload. Fast: one
    :func:`compute_id` per node on a small payload.
    """
    nodes: list[dict[str, Any]] = []
    prev = parent
    filler = "x" * pad
    for i in range(n):
        parents = [prev] if prev is not None else []
        kind = "inference" if parents else "goal"
        payload: dict[str, Any] = {"tag": tag, "i": i}
        if pad:
            payload["pad"] = filler
        node: dict[str, Any] = {
            "id": compute_id(kind, parents, payload),
            "kind": kind,
            "parents": parents,
            "payload": payload,
            "createdAt": T0,
        }
        if sequence:
            node["sequence"] = first_sequence + i
        nodes.append(node)
        prev = node["id"]
    return nodes


def document(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """An AgentState v1 document over ``nodes``, frontier = the last node."""
    return {"version": 1, "nodes": nodes, "frontier": [nodes[-1]["id"]] if nodes else []}


def batch_of(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes as an append batch (no ``sequence``: the database assigns it)."""
    return [{k: v for k, v in n.items() if k != "sequence"} for n in nodes]


async def graph_rows(conn: asyncpg.Connection, graph: str) -> tuple[int | None, list[Any]]:
    """``(length or None when the graph does not exist, [(seq, id), ...] in seq order)``."""
    length = await conn.fetchval("SELECT length FROM cwstore.graphs WHERE name = $1", graph)
    rows = await conn.fetch(
        "SELECT n.seq, n.id FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
        " WHERE g.name = $1 ORDER BY n.seq",
        graph,
    )
    return length, [(r[0], r[1]) for r in rows]


async def assert_graph(
    conn: asyncpg.Connection, graph: str, expected_ids: list[str] | None
) -> None:
    """The graph holds exactly ``expected_ids`` in this order, with sequences 1..n and a
    matching length; ``None`` or ``[]`` also accept a graph that does not exist."""
    length, rows = await graph_rows(conn, graph)
    want = expected_ids or []
    assert [r[1] for r in rows] == want, f"stored ids differ from {len(want)} expected"
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "sequence holes"
    if length is None:
        assert not want, f"graph {graph!r} does not exist"
    else:
        assert length == len(want)


async def poll(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 30.0,
    what: str = "condition",
    give_up: Callable[[], bool] | None = None,
) -> T | None:
    """Call ``probe`` until it returns something not None; None when ``give_up()``.

    Polls every few milliseconds (no fixed sleeps); fails after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got is not None:
            return got
        if give_up is not None and give_up():
            return None
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


async def pids_of(conn: asyncpg.Connection, app: str) -> list[int]:
    """Backends of the current database whose application_name is ``app``."""
    return [
        r[0]
        for r in await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = $1 AND pid <> pg_backend_pid()",
            app,
        )
    ]


async def terminate(conn: asyncpg.Connection, pid: int) -> bool:
    return bool(await conn.fetchval("SELECT pg_terminate_backend($1)", pid))


class Client:
    """One of the two clients behind one async interface (the sync :class:`cwstore.Store`
    runs each call in a worker thread)."""

    def __init__(self, kind: str, store: Any) -> None:
        self.kind = kind
        self.store = store

    @classmethod
    async def open(cls, kind: str, dsn: str, **kwargs: Any) -> Client:
        kwargs.setdefault("migrate_schema", False)
        if kind == "async":
            return cls(kind, await cwstore.connect(dsn, **kwargs))
        return cls(kind, await asyncio.to_thread(cwstore.connect_sync, dsn, **kwargs))

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.store, name)
        if self.kind == "async":
            return await method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)

    async def close(self) -> None:
        if self.kind == "async":
            await self.store.close()
        else:
            await asyncio.to_thread(self.store.close)


CLIENTS = ["async", "sync"]
