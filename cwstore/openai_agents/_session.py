"""The OpenAI Agents SDK's ``Session`` protocol on a cwstore store
(:class:`~cwstore.AsyncStore`).

The mapping is pure and lives in :mod:`cwstore.openai_agents._mapping`; this module
reads with the named queries of ``cwstore/openai_agents/queries.sql`` and writes with
the store's public :meth:`~cwstore.AsyncStore.append` (one node per call, expecting
the graph's length it last saw; another writer meanwhile makes it read again) and
:meth:`~cwstore.AsyncStore.erase`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

import cwstore

from ._mapping import CLEAR_KEY, Fold, batch_node, clear_node, graph_name, pop_node

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["CwstoreSession"]

_Q = cwstore.named_queries("cwstore.openai_agents")
_T = TypeVar("_T")
_RETRIES = 32
"""Attempts of one write against other writers of the same session."""


@dataclass(frozen=True, slots=True)
class _State:
    """What a writer needs of a session's graph: its length, last node, latest clear,
    and the heads of its frontier when read (other writers' concurrent nodes)."""

    length: int
    tail: str | None
    clear: str | None
    heads: tuple[str, ...] = ()

    @property
    def last(self) -> tuple[str, ...]:
        """What a new node follows: the heads, and the last node."""
        return (*self.heads, self.tail) if self.tail is not None else self.heads

    def after(self, node_id: str, *, clear: bool = False) -> _State:
        return _State(self.length + 1, node_id, node_id if clear else self.clear, (node_id,))


_EMPTY = _State(0, None, None)


def _state(row: cwstore.Row | None) -> _State:
    if row is None:
        return _EMPTY
    return _State(int(row["length"]), row["tail_id"], row["clear_id"], tuple(row["heads"]))


async def _settled(mutation: Awaitable[_T]) -> _T:
    """Run ``mutation`` to its end even when the caller is cancelled meanwhile (then
    raise :class:`asyncio.CancelledError` once it has ended): a cancelled write has
    landed whole or not at all by the time the caller sees the cancellation."""
    task = asyncio.ensure_future(mutation)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()
        raise asyncio.CancelledError
    return task.result()


async def _backoff(attempt: int) -> None:
    """A pause before attempt ``attempt + 1`` against other writers, random so that
    writers that met once do not meet again."""
    await asyncio.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 6)))


class CwstoreSession:
    """A session of the OpenAI Agents SDK (``agents.memory.session.Session``) kept as
    the cwstore graph ``openai-agents:<session_id>`` (docs/openai-agents.md).

    ``add_items`` appends the batch as one node, atomically; ``get_items(limit)``
    returns the latest ``limit`` items (all when ``None``; the default from
    ``session_settings``), oldest first; ``pop_item`` and ``clear_session`` append a
    node that retracts the tail item or everything before it: nothing is deleted, so
    history, point-in-time reads and ``cwstore view`` still show it; :meth:`erase`
    removes the session for good (cwstore's erasure).

    ``retention_group`` puts the session's graph in that retention group when its first
    write creates it (``store.erase_idle`` erases a group's idle graphs together).
    A write the caller cancels still ends (whole, or not at all on an error) before the
    cancellation is raised, as the SDK's own sessions do. A store, and so a session,
    belongs to the event loop it was opened in. ``store`` stays the caller's; a session
    made by :meth:`from_dsn` owns its store and closes it in :meth:`close` (or at the
    end of ``async with``).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: cwstore.AsyncStore,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        retention_group: str | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise cwstore.InputError(f"session_id must be a str, not {type(session_id).__name__}")
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(dict(session_settings))
            if isinstance(session_settings, Mapping)
            else session_settings or SessionSettings()
        )
        self._store = store
        self._graph = graph_name(session_id)
        self._retention_group = retention_group
        self._owns_store = False
        self._known: _State | None = None

    @classmethod
    async def from_dsn(
        cls,
        session_id: str,
        dsn: str | None = None,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        retention_group: str | None = None,
        migrate_schema: bool = False,
        **connect_options: Any,
    ) -> Self:
        """A session on a store of its own (:func:`cwstore.connect` with ``dsn`` and
        ``connect_options``; ``migrate_schema=True`` brings the schema up to date)."""
        store = await cwstore.connect(dsn, migrate_schema=migrate_schema, **connect_options)
        session = cls(
            session_id, store, session_settings=session_settings, retention_group=retention_group
        )
        session._owns_store = True
        return session

    @property
    def store(self) -> cwstore.AsyncStore:
        """The store this session reads and writes."""
        return self._store

    @property
    def graph(self) -> str:
        """The name of this session's graph."""
        return self._graph

    async def close(self) -> None:
        """Close the store if this session opened it (:meth:`from_dsn`)."""
        if self._owns_store:
            await self._store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- reading ------------------------------------------------------------------------

    async def _read_state(self) -> _State:
        async with self._store.connection() as conn:
            row = await conn.fetchrow(_Q["state"], self._graph, CLEAR_KEY)
        self._known = _state(row)
        return self._known

    async def _fold(self, limit: int | None) -> tuple[Fold, _State]:
        """The live items (newest first, up to ``limit``) and the state they were read
        at. One query when the newest ``limit`` nodes hold them (or ``limit`` is
        ``None``); else pages of nodes, newest first, all from one snapshot."""
        async with self._store.connection() as conn:
            found = await self._pages(conn, limit, 1)
        if found is None:
            async with self._store.snapshot() as conn:
                found = await self._pages(conn, limit, None)
        assert found is not None
        self._known = found[1]
        return found

    async def _pages(
        self, conn: cwstore.AsyncConnection, limit: int | None, pages: int | None
    ) -> tuple[Fold, _State] | None:
        """:meth:`_fold` in at most ``pages`` queries (``None``: as many as it takes);
        ``None`` when that was not enough."""
        fold = Fold(limit)
        page: int | None = None if limit is None else max(limit, 1)
        below: int | None = None
        done = 0
        while True:
            rows = await conn.fetch(_Q["nodes"], self._graph, CLEAR_KEY, below, page)
            done += 1
            state = _state(rows[0] if rows else None)
            nodes = rows[1:]
            for row in nodes:
                fold.add(row["id"], row["payload_text"])
            if fold.full or page is None or len(nodes) < page:
                return fold, state
            if pages is not None and done >= pages:
                return None
            below = int(nodes[-1]["seq"])
            page *= 2

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (``None``: the ``session_settings`` limit, else
        all), oldest first; none for a limit of 0 or less."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        fold, _ = await self._fold(limit)
        return cast("list[TResponseInputItem]", fold.items())

    # --- writing ------------------------------------------------------------------------

    async def _append(
        self, node: dict[str, Any], state: _State, *, clear: bool = False, exact: bool = True
    ) -> None:
        """Append ``node`` to the graph as ``state`` found it (its length expected, when
        ``exact``).

        Raises :class:`~cwstore.LengthConflictError` when the graph moved on meanwhile,
        also when another writer appended the very same node first (``append_v1``
        returns it as not written by this call): this call then wrote nothing.
        """
        prepared = cwstore.prepare_append(
            self._graph,
            [node],
            expected_length=state.length if exact else None,
            retention_group=self._retention_group,
        )
        try:
            rows = await self._send(prepared)
        except cwstore.ConflictError:
            self._known = None
            raise
        except cwstore.ValidationError as exc:
            raise prepared.renumbered(exc) from exc
        if not rows[0]["written"]:
            self._known = None
            raise cwstore.LengthConflictError(
                graph=self._graph,
                expected_length=state.length,
                actual_length=int(rows[0]["seq"]),
            )
        node_id: str = rows[0]["id"]
        if exact:
            self._known = state.after(node_id, clear=clear)
        else:
            self._known = None

    async def _send(self, prepared: cwstore.PreparedAppend) -> list[cwstore.Row]:
        """``append_v1`` with ``prepared``'s arguments: one statement (and the retention
        group's setting before it, in one transaction, when there is one)."""
        if prepared.retention_group is None:
            async with self._store.connection() as conn:
                return list(await conn.fetch(_Q["append"], *prepared.args))
        async with self._store.transaction() as conn:
            await conn.execute(_Q["set_retention_group"], prepared.retention_group)
            return list(await conn.fetch(_Q["append"], *prepared.args))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (in order) as one node: all of them or, on an error, none.

        The node's parent is the graph's last node as this session knows it, its length
        expected. When another writer moved the graph on, the batch is appended after
        whatever is there by then (the graph's frontier and last node, read again, as
        parents; no length expected): concurrent batches are kept whole, in the order
        they commit, and a conflict is never handed to the caller.
        """
        if not items:
            return
        await _settled(self._add_items(_checked(items)))

    async def _add_items(self, batch: list[Mapping[str, Any]]) -> None:
        state = self._known or await self._read_state()
        try:
            await self._append(batch_node(batch, state.last), state)
            return
        except cwstore.LengthConflictError:
            pass
        for attempt in range(_RETRIES):
            state = await self._read_state()
            try:
                await self._append(batch_node(batch, state.last), state, exact=False)
                return
            except cwstore.LengthConflictError:
                if attempt == _RETRIES - 1:
                    raise

    async def pop_item(self) -> TResponseInputItem | None:
        """Retract the latest item and return it; ``None`` when there is none."""
        return await _settled(self._pop_item())

    async def _pop_item(self) -> TResponseInputItem | None:
        for attempt in range(_RETRIES):
            fold, state = await self._fold(1)
            if not fold.found or state.tail is None:
                return None
            item, node, index = fold.found[0]
            try:
                await self._append(pop_node(state.last, node, index), state)
                return cast("TResponseInputItem", item)
            except (cwstore.LengthConflictError, cwstore.ChainConflictError):
                if attempt == _RETRIES - 1:
                    raise
            await _backoff(attempt)
        return None

    async def clear_session(self) -> None:
        """Retract every item (a clear node); nothing when the session has none."""
        await _settled(self._clear_session())

    async def _clear_session(self) -> None:
        for attempt in range(_RETRIES):
            state = await self._read_state()
            if state.tail is None or state.tail == state.clear:
                return
            try:
                await self._append(clear_node(state.last, state.clear), state, clear=True)
                return
            except (cwstore.LengthConflictError, cwstore.ChainConflictError):
                if attempt == _RETRIES - 1:
                    raise
            await _backoff(attempt)

    async def erase(self, *, reason: str | None = None) -> int:
        """Erase the session's graph for good (:meth:`cwstore.AsyncStore.erase`: every
        row, an audit record without name or content); the number of nodes it held, 0
        when there was no graph."""
        self._known = None
        try:
            return await self._store.erase(self._graph, reason=reason)
        except cwstore.UnknownGraphError:
            return 0


def _checked(items: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The items as mappings; an :class:`~cwstore.InputError` naming the first that is
    not one."""
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise cwstore.InputError(
                f"items[{index}]: an input item is a mapping, not {type(item).__name__}"
            )
    return cast("list[Mapping[str, Any]]", list(items))
