""":class:`AsyncStore`, the client of one cwstore database, over the driver layer's
:class:`AsyncPool` (the ``asyncpg`` driver).

Every write is one call of a SQL function (or, for import, one COPY between two), so
the rules live in the database and this class stays thin: check arguments with
:mod:`cwstore._arg_checks`, prepare what to send with :mod:`cwstore._store_base`, run a named
query, map rows back with :mod:`cwstore._rows` (all three without I/O).

The client is written once: ``tools/async_to_sync.py`` generates ``cwstore/store.py``
from ``cwstore/store_async.py``, and CI fails when the two drift.

Through a transaction-mode pooler (:func:`connect` with ``pooler="transaction"``) the
store keeps no session state: no prepared statement outlives its transaction, the tenant
is set in each transaction. :meth:`AsyncStore.tail` and :meth:`AsyncStore.tail_all`
LISTEN on a dedicated connection of their own where it is direct to a primary (NOTIFY is
only a wake-up; the table is the truth), and poll elsewhere (a hot standby, a pooler).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

from ._arg_checks import (
    as_of_args,
    check_after,
    check_batch,
    check_expected_length,
    check_graph_name,
    check_idle,
    check_key,
    check_poll_interval,
    check_pooler,
    check_read_length,
    check_reason,
    check_tenant,
    tenant_settings,
    timeout_settings,
    vocabulary_arg,
)
from ._dsn import resolve_dsn
from ._rows import (
    erased_graph,
    erased_idle_graph,
    export_rows,
    export_text,
    graph_info,
    idle_graph,
    key_version,
    node_from_row,
    state_from_text,
    stored_nodes,
)
from ._saving import (
    AppendNodes,
    FindMismatch,
    Read,
    ReadGraph,
    Saved,
    SavePlan,
    StoredGraph,
)
from ._store_base import (
    BULK_ANALYZE_THRESHOLD,
    COPY_COLUMNS,
    IMPORT_CHUNK_ROWS,
    TAIL_BATCH_BYTES,
    ImportPlan,
    q,
)
from ._suffix import SaveMemory
from .appending import prepare_append
from .document import AgentState, CausalNode, NodeLike, StateLike, Vocabulary
from .drivers._protocol import AsyncConnection, AsyncListener, AsyncPool, Row
from .errors import (
    Error,
    GraphErasedError,
    UnknownGraphError,
    ValidationError,
)
from .results import (
    Cursor,
    ErasedGraph,
    ErasedIdleGraph,
    ErasedItem,
    GraphInfo,
    IdleGraph,
    KeyVersion,
    Projection,
    TailItem,
)

__all__ = ["AsyncStore", "connect"]

_TAIL_BATCH = 1000
_POLL_SECONDS = 1.0


async def connect(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    migrate_schema: bool = False,
    tenant: str | None = None,
    embedded: bool = False,
    statement_timeout: float | None = None,
    pooler: str | None = None,
    listen_dsn: str | None = None,
    poll_interval: float = 0.25,
) -> AsyncStore:
    """Open a store (:class:`AsyncStore`) on a pool of its own.

    Parameters
    ----------
    dsn:
        The database; defaults to the ``CWSTORE_DSN`` environment variable.
    min_size, max_size:
        Bounds of the connection pool.
    migrate_schema:
        Bring the schema up to date first (idempotent; safe when many processes
        connect at once). Off by default: deploy the schema with ``cwstore init``.
    tenant:
        The tenant of graphs this store creates (the session setting
        ``cwstore.tenant``); whether the role may use it is checked by the database.
    embedded:
        Start (or reuse) the embedded PostgreSQL in ``CWSTORE_HOME`` and use it
        (needs the ``server`` extra). Never implied.
    statement_timeout:
        Seconds any one statement of this store may run (PostgreSQL's
        ``statement_timeout``, a session setting): past it the statement is cancelled
        and the call raises :class:`StoreTimeoutError`. ``None``: the server's.
    pooler:
        ``"transaction"`` when ``dsn`` leads to a transaction-mode pooler (PgBouncer's
        ``pool_mode = transaction``): then the store keeps no session state on its
        connections (no prepared statement, ``tenant`` set in each transaction, no
        LISTEN), at some cost per call (``docs/deploy.md``). ``"none"``: direct, or a
        session-mode pooler. Defaults to the ``CWSTORE_POOLER`` environment variable,
        else ``"none"``.
    listen_dsn:
        Where :meth:`~AsyncStore.tail` and :meth:`~AsyncStore.tail_all` follow from: a
        direct connection to the primary, where they LISTEN. Without it, they listen
        on ``dsn`` when it is direct to a primary, and poll every ``poll_interval``
        seconds through a transaction-mode pooler or on a hot standby.
    poll_interval:
        Seconds between a polling follower's reads (0 < s <= 3600).

    Raises
    ------
    InputError
        (a :class:`ValueError`) no ``dsn``, no ``CWSTORE_DSN`` and not ``embedded``;
        or both ``dsn`` and ``embedded``; or a bad ``tenant``, ``statement_timeout``,
        ``pooler`` or ``poll_interval``. Nothing was started.
    SchemaNotReadyError
        The database holds no cwstore schema, or one behind this client (run
        ``cwstore init``); the rule is :func:`cwstore.migrate.check_schema`'s.
    DatabaseError
        The server could not be reached.
    """
    settings = tenant_settings(tenant) | timeout_settings(statement_timeout)
    pooled = check_pooler(pooler)
    interval = check_poll_interval(poll_interval)
    real = resolve_dsn(dsn, embedded=embedded)
    # The driver is imported here, not with this module: `import cwstore` needs neither
    # driver, and a user of one client never needs the other's.
    from ._migrate_async import check_schema, migrate_dsn
    from .drivers.asyncpg import AsyncpgPool

    if migrate_schema:
        await migrate_dsn(real, pooled=pooled)
    pool = await AsyncpgPool.open(
        real,
        min_size=min_size,
        max_size=max_size,
        settings=settings,
        pooled=pooled,
        listen_dsn=listen_dsn,
        poll_interval=interval,
    )
    try:
        async with pool.connection() as conn:
            await check_schema(conn)
    except BaseException:
        await pool.close()
        raise
    return AsyncStore(pool)


class AsyncStore:
    """The client of one cwstore database. Use :func:`connect` to make one."""

    def __init__(self, pool: AsyncPool) -> None:
        self._pool = pool
        self._saved = SaveMemory()
        self.dsn = pool.dsn

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

    # --- the seam for integrations ------------------------------------------------------

    def connection(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Borrow a connection of this store's pool for queries of your own, in autocommit
        mode (each statement its own transaction); it goes back to the pool when the block
        ends, also when the task is cancelled.

        What an integration (the LangGraph saver, the view, a framework's session) runs
        beside the store's own calls: ``$1, $2`` placeholders for either driver, rows read
        by column name, every error a :class:`cwstore.Error` mapped from its SQLSTATE
        (raised by the statement that failed, here and in :meth:`snapshot`,
        :meth:`transaction` and :meth:`follower`; never the driver's exception), and
        this store's bounds in effect (its tenant, statement timeout and client check; a
        store made with ``pooler="transaction"`` sets them per transaction, so use
        :meth:`snapshot` or :meth:`transaction` there for statements that need them).
        Write through the SQL functions (``cwstore.append_v1`` and the others) or the
        store's methods: the tables refuse direct writes.
        """
        return self._pool.connection()

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A connection (as :meth:`connection`) inside a ``REPEATABLE READ, READ ONLY``
        transaction: every query of the block sees one snapshot of the database. Ends
        when the block does."""
        async with self._pool.connection() as conn, conn.transaction(snapshot=True):
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A connection (as :meth:`connection`) inside a read-write transaction,
        committed when the block ends and rolled back when it raises (or the task is
        cancelled): several calls of the SQL API that must land together. A statement
        that fails aborts the transaction: a block that catches its error and goes on
        commits nothing (PostgreSQL rolls it back at the end).

        To append in it, send :func:`cwstore.prepare_append`'s arguments to
        ``cwstore.append_v1`` (docs/integrations.md)."""
        async with self._pool.connection() as conn, conn.transaction():
            yield conn

    def follower(self) -> AbstractAsyncContextManager[AsyncListener]:
        """A follower of this store's database, as :meth:`tail` uses: it listens for the
        wake-up of new nodes (or polls, on a hot standby or through a pooler), with this
        store's bounds. Its ``wait(timeout)`` returns when something may have been
        written; read what is new with :meth:`connection`."""
        return self._pool.listener()

    async def migrate_schema(self) -> list[int]:
        """Bring this store's database schema to the current migration, as ``cwstore
        init`` does (and opening a store with ``migrate_schema=True``), on a connection
        of its own (closed after) to this store's DSN, in its pooler mode: idempotent,
        and safe when many processes run it at once. Returns the migration versions it applied, in
        order (empty when the schema was current; on a fresh database, every version).

        Raises :class:`MigrationError` when a migration cannot be applied (another
        migration chain, a changed migration file, a lock not granted in time, a failed
        step, which is rolled back) and a :class:`cwstore.Error` when the server cannot
        be reached.
        """
        from ._migrate_async import migrate_dsn

        return list((await migrate_dsn(self.dsn, pooled=self._pool.pooled)).applied)

    async def _graph(self, conn: AsyncConnection, graph: str) -> Row:
        check_graph_name(graph)
        row = await conn.fetchrow(q("graph_get"), graph)
        if row is None:
            raise UnknownGraphError(graph=graph)
        return row

    # --- graphs ------------------------------------------------------------------------

    async def graphs(self) -> list[GraphInfo]:
        """Every graph this role may read, with its length, vocabulary and tenant."""
        async with self._pool.connection() as conn:
            rows = await conn.fetch(q("graphs_list"))
        return [graph_info(r) for r in rows]

    async def length(self, graph: str) -> int:
        """How many nodes the graph holds. Raises :class:`UnknownGraphError`."""
        async with self._pool.connection() as conn:
            return int((await self._graph(conn, graph))["length"])

    # --- import and replay ---------------------------------------------------------------

    async def import_state(
        self, graph: str, state: StateLike, *, vocabulary: Vocabulary | None = None
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
        async with self._pool.connection() as conn, conn.transaction():
            graph_id = await conn.fetchval(q("begin_import"), graph, vocabulary_arg(vocab))
            owner = await conn.fetchval(q("may_copy_nodes"))
            if owner:
                await conn.copy_records(
                    "cwstore",
                    "nodes",
                    COPY_COLUMNS,
                    plan.records(graph_id),
                    chunk_rows=IMPORT_CHUNK_ROWS,
                )
            else:
                for columns in plan.column_slices(graph_id):
                    await conn.fetchval(q("import_rows"), graph_id, *columns)
            await conn.execute(q("declare_frontier"), graph_id, plan.frontier)
        if owner and plan.count >= BULK_ANALYZE_THRESHOLD:
            async with self._pool.connection() as conn:
                await conn.execute(q("analyze_graph_tables"))
        return plan.count

    async def _export(self, graph: str, as_of: int | datetime | None) -> tuple[str, list[str]]:
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        async with self._pool.connection() as conn:
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
        nodes: Iterable[NodeLike],
        *,
        expected_length: int | None = None,
        frontier: Sequence[str] | None = None,
        incarnation: int | None = None,
        retention_group: str | None = None,
    ) -> list[CausalNode]:
        """Append a batch of nodes; returns them as stored, with ids and sequences.

        A node may omit ``id``, ``sequence`` and ``createdAt``: its parents are sorted
        and deduplicated as the runtime does, its id computed (SPEC section 2), its
        ``createdAt`` set to now; a given ``id`` is verified, a given ``sequence``
        ignored. The batch commits whole or not at all. Nodes the graph already holds
        are returned as stored and not written again (idempotent retries). ``frontier``
        declares the frontier after the batch; without it the fold of SPEC section 4
        applies. ``incarnation`` names the life of the graph to write
        (:attr:`GraphInfo.incarnation`): when the graph is another life by then (erased
        and made again) or none, :class:`GraphErasedError` and nothing is written (the
        graph is not created). ``retention_group`` puts the graph in that group if this
        call creates it (a group is idle, and erased by :meth:`erase_idle`, only as a
        whole; an existing graph keeps its group).

        Raises :class:`ValidationError`, :class:`LengthConflictError` (stale
        ``expected_length``), :class:`ChainConflictError` (a key moved on),
        :class:`GraphErasedError` (the graph was erased while the call waited for it, or
        is not the life named); :class:`InputError` for a bad ``incarnation`` or
        ``retention_group``, before anything is sent.
        """
        return stored_nodes(
            *await self._append_rows(
                graph, nodes, expected_length, frontier, incarnation, retention_group
            )
        )

    async def _append_rows(
        self,
        graph: str,
        nodes: Iterable[NodeLike],
        expected_length: int | None,
        frontier: Sequence[str] | None,
        incarnation: int | None = None,
        retention_group: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[Row]]:
        """:meth:`append`'s batch and the rows ``append_v1`` returned for it."""
        prepared = prepare_append(
            graph,
            nodes,
            expected_length=expected_length,
            frontier=frontier,
            incarnation=incarnation,
            retention_group=retention_group,
        )
        try:
            async with self._pool.connection() as conn:
                if prepared.retention_group is None:
                    rows = await conn.fetch(q("append"), *prepared.args)
                else:
                    async with conn.transaction():
                        await conn.execute(q("set_retention_group"), prepared.retention_group)
                        rows = await conn.fetch(q("append"), *prepared.args)
        except ValidationError as exc:
            raise prepared.renumbered(exc) from exc.__cause__
        return prepared.nodes, rows

    async def save(
        self, graph: str, state: StateLike, *, expected_length: int | None = None
    ) -> list[CausalNode]:
        """Persist a whole state the runtime handed back: append only what is new.

        The stored graph must be a prefix of ``state`` (same ids in the same order);
        otherwise :class:`DivergedError` (a :class:`ConflictError`) and nothing is
        written. The state's frontier is declared after the new nodes. Returns the nodes
        this call wrote. A concurrent writer makes it a :class:`LengthConflictError`.

        Only the nodes past the stored prefix are validated (:mod:`cwstore._suffix`);
        the prefix is compared by id. After this store's first save of a graph it
        remembers the graph's ids and node objects, so a save then reads nothing back
        and costs time in proportion to the new nodes when the state holds the very node
        objects saved before (an :class:`AgentState`'s, or the dicts of a document
        extended in place; a dict changed in place after it was saved is taken as
        saved); other node objects cost reading each node's id. A state that is not
        valid past the prefix raises :class:`ValidationError`.

        A graph erased since this store last saved it (by this store or another) is
        saved again from scratch: what the store remembered of it is dropped when its
        append is refused, and the stored graph is read again in one snapshot. Raises
        :class:`GraphErasedError` when the graph is erased while this call writes it
        (nothing was written).

        What it reads and writes, and when, is decided by :mod:`cwstore._saving`; this
        method only performs it.
        """
        check_graph_name(graph)
        check_expected_length(expected_length)
        plan = SavePlan(self._saved, graph, state, expected_length)
        step = plan.start()
        while not isinstance(step, Saved):
            if isinstance(step, AppendNodes):
                try:
                    appended = await self._append_rows(
                        graph, step.nodes, step.expected_length, step.frontier, step.incarnation
                    )
                except Error as exc:
                    step = plan.refused(exc)
                else:
                    step = plan.answer(appended)
                continue
            # Reads that follow one another see one snapshot.
            async with self._pool.connection() as conn, conn.transaction(snapshot=True):
                while isinstance(step, Read):
                    step = plan.answer(await self._read_for_save(conn, graph, step))
        return step.nodes

    async def _read_for_save(self, conn: AsyncConnection, graph: str, step: Read) -> Any:
        """What :class:`~cwstore._saving.SavePlan` asked to read, as it asked for it."""
        if isinstance(step, ReadGraph):
            row = await conn.fetchrow(q("graph_get"), graph)
            if row is None:
                return None
            return StoredGraph(row["graph_id"], int(row["length"]), int(row["incarnation"]))
        if isinstance(step, FindMismatch):
            return await conn.fetchval(q("first_mismatch"), step.graph_id, step.ids)
        return [r["id"] for r in await conn.fetch(q("frontier_now"), step.graph_id)]

    async def frontier(self, graph: str) -> list[str]:
        """The current frontier (heads in the order they joined), for a new goal's
        parents."""
        async with self._pool.connection() as conn:
            g = await self._graph(conn, graph)
            return [r["id"] for r in await conn.fetch(q("frontier_now"), g["graph_id"])]

    # --- reading state ---------------------------------------------------------------------

    async def project(self, graph: str, as_of: int | datetime | None = None) -> Projection:
        """The projection now or as of a sequence or time (see :class:`Projection`).

        Read from the database's materialized tables with index lookups: its cost does
        not grow with the graph's length.
        """
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        async with self._pool.connection() as conn:
            value = await conn.fetchval(q("projection_at"), graph, seq, at)
        projection = Projection.from_text(graph, value)
        check_read_length(graph, seq, projection.length)
        return projection

    async def history(self, graph: str, key: str) -> list[KeyVersion]:
        """Every version of a resource or semantic key, oldest first.

        Raises :class:`InputError` for a key that is not a non-empty string without
        U+0000 or lone surrogates, :class:`UnknownGraphError` for no such graph.
        """
        check_key(key)
        async with self._pool.connection() as conn:
            g = await self._graph(conn, graph)
            rows = await conn.fetch(q("key_history"), g["graph_id"], key)
        return [key_version(key, r) for r in rows]

    # --- erasure and retention ------------------------------------------------------------

    async def erase(self, graph: str, *, reason: str | None = None) -> int:
        """Erase the graph: every row of it, from every cwstore table, in one
        transaction, leaving an audit record without its name or content
        (``docs/erasure.md``). Returns how many nodes it held.

        Appends and imports in flight finish first (the erasure waits for the graph's
        lock); a writer that then finds the graph gone gets :class:`GraphErasedError`
        and writes nothing; a tail of it ends with :class:`GraphErasedError`. The name
        can be used again afterwards, for a new graph from sequence 1. This store
        forgets what it remembered of the graph for :meth:`save`.

        Parameters
        ----------
        graph:
            The graph's name.
        reason:
            Why, kept in the audit record (free text; ``None`` for none).

        Raises
        ------
        InputError
            A bad name or reason (nothing was sent).
        UnknownGraphError
            No such graph, or one of a tenant the role may not read.
        PermissionDeniedError
            The role may read the graph but not erase it (only ``cwstore_admin``
            members, for their tenants, and unrestricted roles may).
        """
        check_graph_name(graph)
        check_reason(reason)
        self._saved.forget(graph)
        try:
            async with self._pool.connection() as conn:
                return int(await conn.fetchval(q("erase_graph"), graph, reason))
        finally:
            self._saved.forget(graph)

    async def erase_tenant(
        self, tenant: str, *, reason: str | None = None, batch: int = 100
    ) -> list[ErasedGraph]:
        """Erase every graph of ``tenant`` (as :meth:`erase` does each), ``batch``
        graphs per transaction, until none is left; then the tenant's memberships go
        too. Returns the graphs erased, in the order they went (an empty list when the
        tenant had none).

        When it raises part way, the batches before were erased and stay erased; call
        it again to finish.

        Raises :class:`InputError` for a bad tenant, reason or ``batch`` (an integer
        from 1 to 2**31 - 1), before anything is sent; :class:`PermissionDeniedError`
        when the role may not erase the tenant's graphs.
        """
        check_tenant(tenant)
        check_reason(reason)
        check_batch(batch)
        erased: list[ErasedGraph] = []
        async with self._pool.connection() as conn:
            while True:
                rows = await conn.fetch(q("erase_tenant"), tenant, reason, batch)
                for r in rows:
                    self._saved.forget(r["graph"])
                if not rows:
                    return erased
                erased.extend(erased_graph(r) for r in rows)

    async def idle_graphs(self, idle: timedelta, *, tenant: str | None = None) -> list[IdleGraph]:
        """The graphs idle for longer than ``idle`` that this role may erase, of
        ``tenant`` or of every tenant when ``None``, by name: what :meth:`erase_idle`
        would erase now. Erases nothing. Idle: nothing written since (the time of the
        last statement of the graph's last write; its creation for a graph holding
        none), and the same for every graph of its retention group.

        Raises :class:`InputError` for an ``idle`` that is not a positive
        :class:`~datetime.timedelta` or a bad tenant, before anything is sent.
        """
        check_idle(idle)
        if tenant is not None:
            check_tenant(tenant)
        async with self._pool.connection() as conn:
            rows = await conn.fetch(q("idle_graphs"), idle, tenant)
        return [idle_graph(r) for r in rows]

    async def erase_idle(
        self,
        idle: timedelta,
        *,
        tenant: str | None = None,
        reason: str | None = None,
        batch: int = 100,
    ) -> list[ErasedIdleGraph]:
        """Erase the graphs idle for longer than ``idle`` (see :meth:`idle_graphs`),
        ``batch`` per transaction, until none is left; returns those erased.

        Each graph is checked again under its lock; one a writer holds at that moment
        is skipped (it is not idle). A retention group is erased whole in one
        transaction (even past ``batch``) or not at all. When it raises part way, the
        batches before stay erased. Raises :class:`InputError` for a bad ``idle``, tenant, reason or
        ``batch``, before anything is sent.
        """
        check_idle(idle)
        if tenant is not None:
            check_tenant(tenant)
        check_reason(reason)
        check_batch(batch)
        erased: list[ErasedIdleGraph] = []
        async with self._pool.connection() as conn:
            while True:
                rows = await conn.fetch(q("erase_idle"), idle, tenant, reason, batch)
                for r in rows:
                    self._saved.forget(r["graph"])
                if not rows:
                    return erased
                erased.extend(erased_idle_graph(r) for r in rows)

    # --- following -------------------------------------------------------------------------

    async def tail(self, graph: str, after: int = 0) -> AsyncIterator[CausalNode]:
        """Yield the graph's nodes with sequence > ``after``, in order, then follow new
        commits live, forever (break out of the loop to stop). No gaps, no duplicates:
        commit order equals sequence order within a graph.

        The tail is bound to the life of the graph it started on: when that life is
        erased it ends with :class:`GraphErasedError`, after the nodes it had delivered,
        and it never delivers a node of a new graph created under the same name.
        Raises :class:`UnknownGraphError` when there is no such graph to start with.
        """
        check_after(after)
        async with self._pool.listener() as conn:
            g = await self._graph(conn, graph)
            graph_id, incarnation, last = int(g["graph_id"]), int(g["incarnation"]), after
            while True:
                rows = await conn.fetch(
                    q("tail_graph"), graph_id, last, _TAIL_BATCH, TAIL_BATCH_BYTES, incarnation
                )
                for r in rows:
                    last = int(r["seq"])
                    yield node_from_row(r)
                if not rows:
                    if not await conn.fetchval(q("graph_alive"), graph_id, incarnation):
                        raise GraphErasedError(graph=graph)
                    await conn.wait(_POLL_SECONDS)

    async def tail_all(
        self, after: Cursor | str | None = None
    ) -> AsyncIterator[TailItem | ErasedItem]:
        """One feed of every graph's new nodes and erasures, live, with a resumable
        cursor.

        Reads only rows of transactions older than every transaction still running, so
        a transaction that commits late is never skipped (at the price of waiting for
        long-running ones). A graph's erasure comes as an :class:`ErasedItem` (its
        ``graph_id``, no name), after every node of the erased life and before any node
        of a new life of the same name: a follower keeping a copy forgets the nodes it
        received with that ``graph_id``.
        """
        cursor = Cursor.parse(after)
        async with self._pool.listener() as conn:
            while True:
                rows = await conn.fetch(
                    q("tail_all"),
                    cursor.xid,
                    cursor.graph_id,
                    cursor.seq,
                    _TAIL_BATCH,
                    TAIL_BATCH_BYTES,
                )
                for r in rows:
                    cursor = Cursor(int(r["xid"]), int(r["graph_id"]), int(r["seq"]))
                    if r["erased"]:
                        yield ErasedItem(cursor, cursor.graph_id)
                    else:
                        yield TailItem(cursor, r["name"], node_from_row(r))
                if not rows:
                    await conn.wait(_POLL_SECONDS)
