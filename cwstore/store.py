"""Store: the synchronous twin of :class:`~cwstore.store_async.AsyncStore` (psycopg 3).

Same methods, same names, same rules (they live in SQL and in
:mod:`cwstore._store_base`); a unit test compares the two public method sets. It runs
on a psycopg connection pool with ``RawCursor`` so the same ``$1`` query texts serve
both drivers.
"""

from __future__ import annotations

import select
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

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

__all__ = ["Store", "connect_sync"]

_COPY_SQL = (
    "COPY cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,"
    " resource_key) FROM STDIN"
)
_TAIL_BATCH = 1000
_POLL_SECONDS = 1.0
Conn = psycopg.Connection[TupleRow]


class _AbortCopy(Exception):
    """Ends a COPY early (psycopg sends CopyFail); the real reason is re-raised after."""


def connect_sync(
    dsn: str | None = None,
    *,
    min_size: int = 1,
    max_size: int = 10,
    migrate_schema: bool = True,
    tenant: str | None = None,
) -> Store:
    """Open a :class:`Store` (see :func:`cwstore.connect` for the arguments)."""
    real = resolve_dsn(dsn)
    settings = tenant_settings(tenant)

    def configure(conn: Conn) -> None:
        for name, value in settings.items():
            conn.execute("SELECT set_config($1, $2, false)", (name, value))

    try:
        if migrate_schema:
            with psycopg.connect(real, autocommit=True) as conn:
                migrate.apply_migrations_sync(conn)
        pool: ConnectionPool[Conn] = ConnectionPool(
            real,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True, "cursor_factory": psycopg.RawCursor},
            configure=configure if settings else None,
            open=True,
        )
        pool.wait()
    except (psycopg.Error, OSError) as exc:
        raise _wrap(exc) from exc
    return Store(pool, real)


def _wrap(exc: BaseException, batch_ids: Sequence[str] = ()) -> Error:
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, psycopg.Error) and exc.diag.sqlstate:
        d = exc.diag
        return map_constraint(
            d.sqlstate,
            d.message_primary or str(exc),
            d.message_detail,
            d.constraint_name,
            batch_ids,
        )
    return DatabaseError(f"{type(exc).__name__}: {exc}")


_DB_ERRORS = (psycopg.Error, OSError)


class Store:
    """The sync client of one cwstore database. Use :func:`connect_sync` to make one."""

    def __init__(self, pool: ConnectionPool[Conn], dsn: str) -> None:
        self._pool = pool
        self.dsn = dsn
        self._saved = SaveMemory()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection of the pool."""
        self._pool.close()

    @contextmanager
    def _conn(self, batch_ids: Sequence[str] = ()) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except _DB_ERRORS as exc:
            raise _wrap(exc, batch_ids) from exc

    @staticmethod
    def _one(conn: Conn, sql: Any, *args: Any) -> Any:
        row = conn.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def _graph(self, conn: Conn, graph: str) -> tuple[Any, ...]:
        check_graph_name(graph)
        row = conn.execute(q("graph_get"), (graph,)).fetchone()
        if row is None:
            raise UnknownGraphError(graph=graph)
        return row

    # --- graphs ------------------------------------------------------------------------

    def graphs(self) -> list[GraphInfo]:
        """Every graph this role may read, with its length, vocabulary and tenant."""
        with self._conn() as conn:
            rows = conn.execute(q("graphs_list")).fetchall()
        return [GraphInfo(r[0], r[1], tuple(r[2]) if r[2] else None, r[3], r[4]) for r in rows]

    def length(self, graph: str) -> int:
        """How many nodes the graph holds. Raises :class:`UnknownGraphError`."""
        with self._conn() as conn:
            return int(self._graph(conn, graph)[1])

    # --- import and replay ---------------------------------------------------------------

    def import_state(self, graph: str, state: Any, *, vocabulary: Vocabulary | None = None) -> int:
        """Import a whole AgentState into an empty graph (see the async twin)."""
        check_graph_name(graph)
        vocab = vocabulary or Vocabulary.dynamic()
        plan = ImportPlan(state, vocab)
        with self._conn() as conn, conn.transaction():
            graph_id = self._one(
                conn, q("begin_import"), graph, list(vocab.types) if vocab.types else None
            )
            owner = self._one(conn, q("may_copy_nodes"))
            if owner:
                _copy(conn, plan, graph_id)
            else:
                for columns in plan.column_slices(graph_id):
                    conn.execute(q("import_rows"), (graph_id, *columns))
            conn.execute(q("declare_frontier"), (graph_id, plan.frontier))
        if owner and plan.count >= BULK_ANALYZE_THRESHOLD:
            with self._conn() as conn:
                conn.execute(q("analyze_graph_tables"))
        return plan.count

    def _export(self, graph: str, as_of: int | datetime | None) -> tuple[str, list[str]]:
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        with self._conn() as conn:
            rows = conn.execute(q("export"), (graph, seq, at)).fetchall()
        return export_rows(graph, seq, rows)

    def export_json(self, graph: str, as_of: int | datetime | None = None) -> str:
        """The graph or a prefix as AgentState v1 JSON text (see the async twin)."""
        return export_text(*self._export(graph, as_of))

    def replay(self, graph: str, as_of: int | datetime | None = None) -> AgentState:
        """The graph or a prefix as an :class:`AgentState` the runtime loads."""
        return state_from_text(*self._export(graph, as_of))

    # --- live writes ---------------------------------------------------------------------

    def append(
        self,
        graph: str,
        nodes: Iterable[Any],
        *,
        expected_length: int | None = None,
        frontier: Sequence[str] | None = None,
    ) -> list[CausalNode]:
        """Append a batch of nodes; returns them as stored (see the async twin)."""
        return stored_nodes(*self._append_rows(graph, nodes, expected_length, frontier))

    def _append_rows(
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
        with self._conn(ids) as conn:
            rows = conn.execute(
                q("append"), (graph, batch.json, expected_length, batch.frontier_json)
            ).fetchall()
        return batch.nodes, rows

    def save(
        self, graph: str, state: Any, *, expected_length: int | None = None
    ) -> list[CausalNode]:
        """Persist a whole state, appending only what is new (see the async twin)."""
        check_graph_name(graph)
        todo = read_state(state)
        known = self._saved.usable(graph, todo, expected_length)
        if known is not None:
            new = check_suffix(todo, known)
            with suppress(ConflictError):
                sent, rows = self._append_rows(graph, new, known.length, todo.frontier)
                if self._saved.wrote(graph, known, todo, new, rows):
                    return stored_nodes(sent, rows)
            self._saved.forget(graph)
        with self._conn() as conn:
            row = conn.execute(q("graph_get"), (graph,)).fetchone()
            stored = check_stored_length(graph, todo, row[1] if row else 0, expected_length)
            if stored and row is not None:
                ids = todo.plain_ids(stored)
                if ids is None:
                    raise ValidationError(validate(state))
                bad = self._one(conn, q("first_mismatch"), row[0], ids)
                if bad is not None:
                    raise DivergedError(graph=graph, position=int(bad), stored_length=stored)
                if stored == len(todo):
                    current = [r[0] for r in conn.execute(q("frontier_now"), (row[0],))]
                    if current == list(todo.frontier):
                        self._saved.remember(graph, SavedPrefix.of_state(todo, stored))
                        return []
        if not len(todo):
            return []
        prefix = SavedPrefix.of_state(todo, stored)
        new = check_suffix(todo, prefix) or todo.objects(-1)
        sent, rows = self._append_rows(graph, new, stored, todo.frontier)
        if stored == len(todo):
            self._saved.remember(graph, prefix)
            return []
        self._saved.wrote(graph, prefix, todo, new, rows)
        return [n for n in stored_nodes(sent, rows) if n.sequence > stored]

    def frontier(self, graph: str) -> list[str]:
        """The current frontier, heads in the order they joined."""
        with self._conn() as conn:
            g = self._graph(conn, graph)
            return [r[0] for r in conn.execute(q("frontier_now"), (g[0],)).fetchall()]

    # --- reading state ---------------------------------------------------------------------

    def project(self, graph: str, as_of: int | datetime | None = None) -> Projection:
        """The projection now or as of a sequence or time (see the async twin)."""
        check_graph_name(graph)
        seq, at = as_of_args(as_of)
        with self._conn() as conn:
            value = self._one(conn, q("projection_at"), graph, seq, at)
        projection = Projection.from_text(graph, value)
        check_read_length(graph, seq, projection.length)
        return projection

    def history(self, graph: str, key: str) -> list[KeyVersion]:
        """Every version of a resource or semantic key, oldest first."""
        with self._conn() as conn:
            g = self._graph(conn, graph)
            rows = conn.execute(q("key_history"), (g[0], key)).fetchall()
        return [key_version(key, r) for r in rows]

    # --- following -------------------------------------------------------------------------

    @contextmanager
    def _listener(self) -> Iterator[Conn]:
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, cursor_factory=psycopg.RawCursor)
        except _DB_ERRORS as exc:
            raise _wrap(exc) from exc
        try:
            conn.execute("LISTEN cwstore")
            conn.execute(q("listen"))
            yield conn
        finally:
            with suppress(*_DB_ERRORS):
                conn.execute(q("unlisten"))
            conn.close()

    @staticmethod
    def _wait(conn: Conn) -> None:
        select.select([conn.fileno()], [], [], _POLL_SECONDS)
        for _ in conn.notifies(timeout=0):
            pass

    def tail(self, graph: str, after: int = 0) -> Iterator[CausalNode]:
        """Yield nodes after ``after`` in order, then follow live (see the async twin)."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InputError(f"after must be a sequence number >= 0, got {after!r}")
        with self._listener() as conn:
            try:
                g = self._graph(conn, graph)
                graph_id, last = int(g[0]), after
                while True:
                    rows = conn.execute(
                        q("tail_graph"), (graph_id, last, _TAIL_BATCH, TAIL_BATCH_BYTES)
                    ).fetchall()
                    for r in rows:
                        last = int(r[0])
                        yield node_from_row(*r)
                    if not rows:
                        self._wait(conn)
            except _DB_ERRORS as exc:
                raise _wrap(exc) from exc

    def tail_all(self, after: Cursor | str | None = None) -> Iterator[TailItem]:
        """Every graph's new nodes, live, with a resumable cursor (see the async twin)."""
        cursor = Cursor.parse(after)
        with self._listener() as conn:
            try:
                while True:
                    rows = conn.execute(
                        q("tail_all"),
                        (cursor.xid, cursor.graph_id, cursor.seq, _TAIL_BATCH, TAIL_BATCH_BYTES),
                    ).fetchall()
                    for r in rows:
                        cursor = Cursor(int(r[0]), int(r[1]), int(r[3]))
                        yield TailItem(cursor, r[2], node_from_row(*r[3:]))
                    if not rows:
                        self._wait(conn)
            except _DB_ERRORS as exc:
                raise _wrap(exc) from exc


def _copy(conn: Conn, plan: ImportPlan, graph_id: int) -> None:
    """COPY the plan's rows; a violation found mid-stream aborts the COPY (CopyFail)."""
    refused: ValidationError | None = None
    try:
        with conn.cursor().copy(_COPY_SQL) as copy:
            try:
                for row in plan.records(graph_id):
                    copy.write_row(row)
            except ValidationError as exc:
                refused = exc
                raise _AbortCopy from None
    except _AbortCopy:
        assert refused is not None
        raise refused from None
