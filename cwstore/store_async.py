"""AsyncStore: the asyncio client, on an asyncpg pool.

Every write is one call of a SQL function (or, for import, one COPY between two), so
the rules live in the database and this class stays thin: prepare arguments with
:mod:`cwstore._store_base`, run a named query, map rows and errors back.

Nothing here relies on session state: appends and reads work through a
transaction-mode pooler. :meth:`AsyncStore.tail` and :meth:`AsyncStore.tail_all`
LISTEN on a dedicated connection of their own (NOTIFY is only a wake-up; the table is
the truth), which a transaction-mode pooler cannot hold: point those at the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import datetime
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote, urlencode

import asyncpg
import psycopg
from psycopg.conninfo import conninfo_to_dict

from . import migrate
from ._store_base import (
    BULK_ANALYZE_THRESHOLD,
    TAIL_BATCH_BYTES,
    Cursor,
    DivergedError,
    GraphInfo,
    ImportPlan,
    TailItem,
    as_of_args,
    check_graph_name,
    check_read_length,
    export_rows,
    export_text,
    key_version,
    map_constraint,
    node_from_row,
    prepare_batch,
    q,
    resolve_dsn,
    state_from_text,
    stored_nodes,
    tenant_settings,
)
from .errors import (
    ConflictError,
    DatabaseError,
    Error,
    InputError,
    UnknownGraphError,
    ValidationError,
)
from .model import AgentState, CausalNode
from .projection import KeyVersion, Projection
from .rules import Vocabulary, validate
from .suffix import SavedPrefix, SaveMemory, check_stored_length, check_suffix, read_state

__all__ = ["AsyncStore", "connect"]

_COPY_COLUMNS = (
    "graph_id",
    "seq",
    "id",
    "kind",
    "parents",
    "payload_text",
    "created_at_text",
    "resource_key",
)
_TAIL_BATCH = 1000
_POLL_SECONDS = 1.0


async def connect(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    migrate_schema: bool = True,
    tenant: str | None = None,
) -> AsyncStore:
    """Open an :class:`AsyncStore`.

    ``dsn`` defaults to ``CWSTORE_DSN``, else the embedded server (started or reused in
    ``CWSTORE_HOME``). With ``migrate_schema`` the schema is brought up to date first
    (idempotent; safe when many processes connect at once). ``tenant`` is the tenant
    of graphs this store creates (the session setting ``cwstore.tenant``); whether
    the role may use it is checked by the database (docs/reliability.md, "Roles and
    tenants").
    """
    real = url_dsn(resolve_dsn(dsn))
    settings = tenant_settings(tenant)
    try:
        if migrate_schema:
            conn = await asyncpg.connect(real)
            try:
                await migrate.apply_migrations(conn)
            finally:
                await conn.close()
        pool = await asyncpg.create_pool(
            real,
            min_size=min_size,
            max_size=max_size,
            server_settings=settings,
            reset=_keep_session,
        )
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise _wrap(exc) from exc
    return AsyncStore(pool, real)


def url_dsn(dsn: str) -> str:
    """``dsn`` as a URL: asyncpg takes only URLs, libpq (and ``connect_sync``) also
    ``key=value`` strings. A URL is returned as given; a ``key=value`` string (parsed by
    psycopg, as libpq would) becomes ``postgresql:///dbname?key=value&...``, every other
    setting a query parameter, which asyncpg reads as libpq does. Raises :class:`InputError` for a
    string libpq would refuse."""
    if "://" in dsn:
        return dsn
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InputError(f"not a connection string: {exc}") from None
    database = quote(str(params.pop("dbname", "")), safe="")
    query = urlencode({k: str(v) for k, v in params.items()}, quote_via=quote)
    return f"postgresql:///{database}?{query}"


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: nothing beyond asyncpg's own (roll back a transaction
    left open, drop listeners).

    asyncpg's default also sends ``RESET ALL; UNLISTEN *; CLOSE ALL;
    pg_advisory_unlock_all()``, a round trip on every release, for session state a
    caller may have set. The store's connections are its own: no method sets a session
    variable, listens, keeps a cursor or takes a session lock on them (``tail`` listens
    on a connection of its own), so there is nothing to undo, and a single-node append
    is one round trip instead of two.
    """


def _wrap(exc: BaseException, batch_ids: Sequence[str] = ()) -> Error:
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        return map_constraint(
            exc.sqlstate,
            str(getattr(exc, "message", None) or exc),
            getattr(exc, "detail", None),
            getattr(exc, "constraint_name", None),
            batch_ids,
        )
    return DatabaseError(f"{type(exc).__name__}: {exc}")


_DB_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    ConnectionError,
)


class AsyncStore:
    """The async client of one cwstore database. Use :func:`connect` to make one."""

    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self._pool = pool
        self.dsn = dsn
        self._saved = SaveMemory()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection of the pool."""
        await self._pool.close()

    @asynccontextmanager
    async def _conn(self, batch_ids: Sequence[str] = ()) -> AsyncIterator[Any]:
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except _DB_ERRORS as exc:
            raise _wrap(exc, batch_ids) from exc

    async def _graph(self, conn: asyncpg.Connection, graph: str) -> asyncpg.Record:
        check_graph_name(graph)
        row = await conn.fetchrow(q("graph_get"), graph)
        if row is None:
            raise UnknownGraphError(graph=graph)
        return row

    # --- graphs ------------------------------------------------------------------------

    async def graphs(self) -> list[GraphInfo]:
        """Every graph this role may read, with its length, vocabulary and tenant."""
        async with self._conn() as conn:
            rows = await conn.fetch(q("graphs_list"))
        return [
            GraphInfo(
                r["name"],
                r["length"],
                tuple(r["vocabulary"]) if r["vocabulary"] else None,
                r["created_at"],
                r["tenant"],
            )
            for r in rows
        ]

    async def length(self, graph: str) -> int:
        """How many nodes the graph holds. Raises :class:`UnknownGraphError`."""
        async with self._conn() as conn:
            return int((await self._graph(conn, graph))["length"])

    # --- import and replay ---------------------------------------------------------------

    async def import_state(
        self, graph: str, state: Any, *, vocabulary: Vocabulary | None = None
    ) -> int:
        """Import a whole AgentState into an empty (or new) graph; returns its length.

        ``state`` is an :class:`AgentState`, parsed JSON, or JSON text. The document is
        validated first (every violation, :class:`ValidationError`), then written in
        one transaction with COPY (or, for a role that may not COPY into the node table,
        such as ``cwstore_writer``, in slices through ``import_rows_v1``); nothing is
        written unless everything passes.
        Raises :class:`GraphExistsError` when the graph already holds nodes.
        """
        check_graph_name(graph)
        vocab = vocabulary or Vocabulary.dynamic()
        plan = ImportPlan(state, vocab)
        async with self._conn() as conn, conn.transaction():
            graph_id = await conn.fetchval(q("begin_import"), graph, _vocab_arg(vocab))
            owner = await conn.fetchval(q("may_copy_nodes"))
            if owner:
                await _copy_or_fail(conn, plan, graph_id)
            else:
                for columns in plan.column_slices(graph_id):
                    await conn.fetchval(q("import_rows"), graph_id, *columns)
            await conn.execute(q("declare_frontier"), graph_id, plan.frontier)
        if owner and plan.count >= BULK_ANALYZE_THRESHOLD:
            async with self._conn() as conn:
                await conn.execute(q("analyze_graph_tables"))
        return plan.count

    async def _export(self, graph: str, as_of: int | datetime | None) -> tuple[str, list[str]]:
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        async with self._conn() as conn:
            rows = await conn.fetch(q("export"), graph, seq, at)
        return export_rows(graph, seq, rows)

    async def export_json(self, graph: str, as_of: int | datetime | None = None) -> str:
        """The graph (or its prefix as of a sequence or time) as AgentState v1 JSON text.

        Built from the stored exact texts without re-parsing: payloads come back byte
        for byte. As of a time T: the prefix up to the last node whose ``createdAt`` is
        at or before T. The frontier is the one in force at that point. One statement
        (``export_parts_v1``), so one snapshot and one round trip; the nodes come in parts,
        so a graph over 1 GB (the most one database value holds) exports too.
        """
        return export_text(*await self._export(graph, as_of))

    async def replay(self, graph: str, as_of: int | datetime | None = None) -> AgentState:
        """The graph (or a prefix of it) as an :class:`AgentState` the runtime loads."""
        return state_from_text(*await self._export(graph, as_of))

    # --- live writes ---------------------------------------------------------------------

    async def append(
        self,
        graph: str,
        nodes: Iterable[Any],
        *,
        expected_length: int | None = None,
        frontier: Sequence[str] | None = None,
    ) -> list[CausalNode]:
        """Append a batch of nodes; returns them as stored, with ids and sequences.

        See :func:`cwstore._store_base.prepare_batch` for what a node may omit. The
        batch commits whole or not at all. Nodes the graph already holds are returned
        as stored and not written again (idempotent retries). ``frontier`` declares the
        frontier after the batch; without it the fold of SPEC section 4 applies.

        Raises :class:`ValidationError`, :class:`LengthConflictError` (stale
        ``expected_length``), :class:`ChainConflictError` (a key moved on).
        """
        return stored_nodes(*await self._append_rows(graph, nodes, expected_length, frontier))

    async def _append_rows(
        self,
        graph: str,
        nodes: Iterable[Any],
        expected_length: int | None,
        frontier: Sequence[str] | None,
    ) -> tuple[list[dict[str, Any]], list[Any]]:
        """:meth:`append`'s batch and the rows ``append_v1`` returned for it."""
        check_graph_name(graph)
        batch = prepare_batch(nodes, frontier)
        ids = [n.get("id", "") for n in batch.nodes]
        async with self._conn(ids) as conn:
            rows = await conn.fetch(
                q("append"), graph, batch.json, expected_length, batch.frontier_json
            )
        return batch.nodes, rows

    async def save(
        self, graph: str, state: Any, *, expected_length: int | None = None
    ) -> list[CausalNode]:
        """Persist a whole state the runtime handed back: append only what is new.

        The stored graph must be a prefix of ``state`` (same ids in the same order);
        otherwise :class:`DivergedError` (a :class:`ConflictError`) and nothing is
        written. The state's frontier is declared after the new nodes. Returns the nodes
        this call wrote. A concurrent writer makes it a :class:`LengthConflictError`.

        Only the nodes past the stored prefix are validated (:mod:`cwstore.suffix`);
        the prefix is compared by id. After this store's first save of a graph it
        remembers the graph's ids, so a save then reads nothing back and costs time in
        proportion to the new nodes (plus, for a dict, reading each node's id; the
        nodes of an :class:`AgentState` are compared as objects). A state that is not
        valid past the prefix raises :class:`ValidationError`.
        """
        check_graph_name(graph)
        todo = read_state(state)
        known = self._saved.usable(graph, todo, expected_length)
        if known is not None:
            new = check_suffix(todo, known)
            with suppress(ConflictError):
                sent, rows = await self._append_rows(graph, new, known.length, todo.frontier)
                if self._saved.wrote(graph, known, todo, new, rows):
                    return stored_nodes(sent, rows)
            self._saved.forget(graph)
        async with self._conn() as conn:
            row = await conn.fetchrow(q("graph_get"), graph)
            stored = check_stored_length(graph, todo, row["length"] if row else 0, expected_length)
            if stored and row is not None:
                ids = todo.plain_ids(stored)
                if ids is None:
                    raise ValidationError(validate(state))
                bad = await conn.fetchval(q("first_mismatch"), row["graph_id"], ids)
                if bad is not None:
                    raise DivergedError(graph=graph, position=int(bad), stored_length=stored)
                if stored == len(todo):
                    current = [r[0] for r in await conn.fetch(q("frontier_now"), row["graph_id"])]
                    if current == list(todo.frontier):
                        self._saved.remember(graph, SavedPrefix.of_state(todo, stored))
                        return []
        if not len(todo):
            return []
        prefix = SavedPrefix.of_state(todo, stored)
        # With nothing new, re-sending the last node writes nothing but declares the frontier.
        new = check_suffix(todo, prefix) or todo.objects(-1)
        sent, rows = await self._append_rows(graph, new, stored, todo.frontier)
        if stored == len(todo):
            self._saved.remember(graph, prefix)
            return []
        self._saved.wrote(graph, prefix, todo, new, rows)
        return [n for n in stored_nodes(sent, rows) if n.sequence > stored]

    async def frontier(self, graph: str) -> list[str]:
        """The current frontier (heads in the order they joined), for a new goal's
        parents."""
        async with self._conn() as conn:
            g = await self._graph(conn, graph)
            return [r[0] for r in await conn.fetch(q("frontier_now"), g["graph_id"])]

    # --- reading state ---------------------------------------------------------------------

    async def project(self, graph: str, as_of: int | datetime | None = None) -> Projection:
        """The projection now or as of a sequence or time (see :class:`Projection`).

        Read from the database's materialized tables with index lookups: its cost does
        not grow with the graph's length.
        """
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        async with self._conn() as conn:
            value = await conn.fetchval(q("projection_at"), graph, seq, at)
        projection = Projection.from_text(graph, value)
        check_read_length(graph, seq, projection.length)
        return projection

    async def history(self, graph: str, key: str) -> list[KeyVersion]:
        """Every version of a resource or semantic key, oldest first."""
        async with self._conn() as conn:
            g = await self._graph(conn, graph)
            rows = await conn.fetch(q("key_history"), g["graph_id"], key)
        return [key_version(key, r) for r in rows]

    # --- following -------------------------------------------------------------------------

    @asynccontextmanager
    async def _listener(self) -> AsyncIterator[tuple[asyncpg.Connection, asyncio.Event]]:
        event = asyncio.Event()
        try:
            conn = await asyncpg.connect(self.dsn)
        except _DB_ERRORS as exc:
            raise _wrap(exc) from exc

        def wake(*_: Any) -> None:
            event.set()

        try:
            await conn.add_listener("cwstore", wake)
            await conn.execute(q("listen"))
            yield conn, event
        finally:
            with suppress(*_DB_ERRORS):
                await conn.execute(q("unlisten"))
            with suppress(*_DB_ERRORS):
                await conn.close()

    async def tail(self, graph: str, after: int = 0) -> AsyncIterator[CausalNode]:
        """Yield the graph's nodes with sequence > ``after``, in order, then follow new
        commits live, forever (break out of the loop to stop). No gaps, no duplicates:
        commit order equals sequence order within a graph."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InputError(f"after must be a sequence number >= 0, got {after!r}")
        async with self._listener() as (conn, event):
            g = await self._graph(conn, graph)
            graph_id, last = int(g["graph_id"]), after
            while True:
                event.clear()
                try:
                    rows = await conn.fetch(
                        q("tail_graph"), graph_id, last, _TAIL_BATCH, TAIL_BATCH_BYTES
                    )
                except _DB_ERRORS as exc:
                    raise _wrap(exc) from exc
                for r in rows:
                    last = int(r[0])
                    yield node_from_row(*r)
                if not rows:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), _POLL_SECONDS)

    async def tail_all(self, after: Cursor | str | None = None) -> AsyncIterator[TailItem]:
        """One feed of every graph's new nodes, live, with a resumable cursor.

        Reads only rows of transactions older than every transaction still running, so
        a transaction that commits late is never skipped (at the price of waiting for
        long-running ones).
        """
        cursor = Cursor.parse(after)
        async with self._listener() as (conn, event):
            while True:
                event.clear()
                try:
                    rows = await conn.fetch(
                        q("tail_all"),
                        cursor.xid,
                        cursor.graph_id,
                        cursor.seq,
                        _TAIL_BATCH,
                        TAIL_BATCH_BYTES,
                    )
                except _DB_ERRORS as exc:
                    raise _wrap(exc) from exc
                for r in rows:
                    cursor = Cursor(int(r[0]), int(r[1]), int(r[3]))
                    yield TailItem(cursor, r[2], node_from_row(*r[3:]))
                if not rows:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), _POLL_SECONDS)


def _vocab_arg(vocab: Vocabulary) -> list[str] | None:
    return list(vocab.types) if vocab.types is not None else None


async def _copy_or_fail(conn: Any, plan: ImportPlan, graph_id: int) -> None:
    """COPY the plan's rows; if the connection dies meanwhile, fail instead of waiting.

    asyncpg's COPY can wait forever for a socket that will never drain once the backend
    is gone, so a termination listener cancels it.
    """
    copy = asyncio.ensure_future(
        conn.copy_records_to_table(
            "nodes",
            schema_name="cwstore",
            columns=_COPY_COLUMNS,
            records=_streamed(plan.records(graph_id)),
        )
    )
    lost = False

    def on_lost(_: Any) -> None:
        nonlocal lost
        lost = True
        copy.cancel()

    conn.add_termination_listener(on_lost)
    try:
        await copy
    except asyncio.CancelledError:
        if not lost:
            raise
        raise DatabaseError(
            "the connection was lost during the import; nothing was written"
        ) from None
    finally:
        conn.remove_termination_listener(on_lost)


async def _streamed(rows: Iterable[tuple[Any, ...]]) -> AsyncIterator[tuple[Any, ...]]:
    """Hand rows to COPY, letting the event loop send each slice while the next is built."""
    for i, row in enumerate(rows):
        if i % 1000 == 0:
            await asyncio.sleep(0)
        yield row
