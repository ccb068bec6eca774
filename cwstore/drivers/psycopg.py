"""The psycopg (sync) adapter of :class:`~cwstore.drivers._protocol.Pool`.

Connections use ``RawCursor`` so the ``$1`` query texts asyncpg takes serve psycopg
too, rows that are tuples also read by column name (:class:`NamedRow`, as asyncpg's
``Record``), and a text loader for ``json``/``jsonb`` so both drivers hand back the
same values.
"""

from __future__ import annotations

import select
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import lru_cache
from itertools import islice
from typing import Any, ClassVar, LiteralString, SupportsIndex, cast, overload

import psycopg
from psycopg import pq, sql
from psycopg.rows import RowMaker, TupleRow, no_result
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool

from .._sql import queries
from ..errors import DatabaseError, Error, map_error
from ._protocol import MAX_PAYLOADS, CopyRecord, Row, session_bounds

__all__ = [
    "NamedRow",
    "PsycopgConnection",
    "PsycopgPoller",
    "PsycopgPool",
    "open_connection",
    "quote_literal",
    "statement",
]

_ERRORS = (psycopg.Error, OSError)
_Q = queries()
POLL_INTERVAL = 0.25
"""Seconds between reads of a follower that cannot listen (standby, pooler)."""
_LOCAL_SETTINGS: LiteralString = (
    "SELECT pg_catalog.set_config(k, v, true) FROM unnest($1::text[], $2::text[]) AS s(k, v)"
)
"""Sets settings for the current transaction only (a pooler's connection is shared)."""
_SESSION_SETTINGS: LiteralString = (
    "SELECT pg_catalog.set_config(k, v, false) FROM unnest($1::text[], $2::text[]) AS s(k, v)"
)
"""Sets settings for the session (a direct connection's)."""
Conn = psycopg.Connection[TupleRow]


def _wrap(exc: BaseException) -> Error:
    """The cwstore error for a psycopg (or socket) error."""
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, psycopg.Error) and exc.diag.sqlstate:
        d = exc.diag
        return map_error(
            d.sqlstate, d.message_primary or str(exc), d.message_detail, d.constraint_name
        )
    return DatabaseError(f"{type(exc).__name__}: {exc}")


def _json_as_text(conn: Conn) -> None:
    for name in ("json", "jsonb"):
        conn.adapters.register_loader(name, TextLoader)


class NamedRow(tuple[Any, ...]):
    """A row as a tuple (equal to the tuple of its values, unpacked and sliced as one)
    whose columns are also read by name: ``row["length"]``. Of two columns of one name,
    the last is the one read, as with asyncpg. Each set of column names has a subclass
    holding the name-to-position map, so a row holds only its values."""

    __slots__ = ()
    _positions: ClassVar[dict[str, int]] = {}

    @overload
    def __getitem__(self, key: SupportsIndex | str, /) -> Any: ...

    @overload
    def __getitem__(self, key: slice, /) -> tuple[Any, ...]: ...

    def __getitem__(self, key: SupportsIndex | str | slice, /) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._positions[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        """The column names, in the query's order."""
        return list(self._positions)


@lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[NamedRow]:
    """The row type of a result with columns ``names`` (made once per set of names)."""
    positions = {name: i for i, name in enumerate(names)}
    return type("NamedRow", (NamedRow,), {"__slots__": (), "_positions": positions})


@lru_cache(maxsize=512)
def _ascii_row_class(names: tuple[bytes, ...]) -> type[NamedRow]:
    return _row_class(tuple(name.decode("ascii") for name in names))


_TUPLES = frozenset({pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE})


def named_row(cursor: psycopg.Cursor[Any]) -> RowMaker[NamedRow]:
    """psycopg's row factory for :class:`NamedRow`: the names read once per result
    (ASCII names, every one of cwstore's, straight from the result's field names)."""
    res = cursor.pgresult
    if res is None or not (res.nfields or res.status in _TUPLES):
        return no_result
    raw = tuple(res.fname(i) or b"" for i in range(res.nfields))
    if all(name.isascii() for name in raw):
        return _ascii_row_class(raw)
    description = cursor.description or []
    return _row_class(tuple(column.name for column in description))


class _AbortCopy(Exception):
    """Ends a COPY early (psycopg sends CopyFail); the real reason is re-raised after."""


class PsycopgConnection:
    """A psycopg connection behind the :class:`Connection` protocol.

    Each statement (and each transaction's begin and end) raises a driver error as the
    cwstore error it maps to (:func:`_wrap`), where it happens."""

    def __init__(
        self,
        raw: psycopg.Connection[Any],
        local_settings: Mapping[str, str] | None = None,
    ) -> None:
        self.raw = raw
        # Settings applied in every transaction (through a pooler, where a session
        # setting would stay with a server connection other clients get next).
        self._local = dict(local_settings or {})

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Driver errors of the block as cwstore errors."""
        try:
            yield
        except _ERRORS as exc:
            raise _wrap(exc) from exc

    def _cursor(self) -> psycopg.RawCursor[NamedRow]:
        # $1 placeholders and named rows, whatever the connection's own factories.
        return psycopg.RawCursor(self.raw, row_factory=named_row)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """Run a statement in a transaction of its own that carries the local settings
        (nothing to do without them, or inside a transaction, which has them)."""
        if not self._local or self.in_transaction():
            yield
            return
        with self.raw.transaction():
            self._apply_local()
            yield

    def _apply_local(self) -> None:
        with self._cursor() as cur:
            cur.execute(_LOCAL_SETTINGS, (list(self._local), list(self._local.values())))

    def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        with self._errors(), self._scope(), self._cursor() as cur:
            return cast("list[Row]", cur.execute(query, args).fetchall())

    def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        with self._errors(), self._scope(), self._cursor() as cur:
            return cur.execute(query, args).fetchone()

    def fetchval(self, query: LiteralString, *args: Any) -> Any:
        with self._errors(), self._scope(), self._cursor() as cur:
            row = cur.execute(query, args).fetchone()
        return None if row is None else row[0]

    def execute(self, query: LiteralString, *args: Any) -> None:
        with self._errors(), self._scope(), self._cursor() as cur:
            cur.execute(query, args)

    def execute_script(self, script: LiteralString) -> None:
        """Run a multi-statement script (never prepared, no parameters)."""
        with self._errors(), self._cursor() as cur:
            cur.execute(script, prepare=False)

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @contextmanager
    def transaction(self, *, snapshot: bool = False) -> Iterator[None]:
        nested = self.in_transaction()
        with self._errors(), self.raw.transaction():
            if snapshot and not nested:
                with self._cursor() as cur:
                    cur.execute(_Q["read_snapshot"])
            if self._local and not nested:
                self._apply_local()
            yield

    def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        with self._errors():
            self._copy_chunks(schema, table, columns, records, chunk_rows)

    def _copy_chunks(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        chunk_rows: int | None,
    ) -> None:
        if chunk_rows is None:
            self._copy(schema, table, columns, records)
            return
        rows = iter(records)

        def draw() -> list[CopyRecord]:
            return list(islice(rows, chunk_rows))

        with ThreadPoolExecutor(1, thread_name_prefix="cwstore-copy") as drawer:
            chunk = draw()
            while chunk:
                # The next chunk's rows are drawn in a thread while this one is written:
                # this thread mostly waits on the server then, with the GIL released.
                following = drawer.submit(draw)
                try:
                    self._copy(schema, table, columns, chunk)
                except BaseException:
                    following.exception()  # the drawing thread is done before this returns
                    raise
                chunk = following.result()

    def _copy(
        self, schema: str, table: str, columns: Sequence[str], records: Iterable[CopyRecord]
    ) -> None:
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(schema, table), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        refused: BaseException | None = None
        try:
            with self.raw.cursor().copy(statement) as copy:
                try:
                    for row in records:
                        copy.write_row(row)
                except Exception as exc:
                    refused = exc
                    raise _AbortCopy from None
        except _AbortCopy:
            assert refused is not None
            raise refused from None


@contextmanager
def open_connection(dsn: str, *, pooled: bool = False) -> Iterator[PsycopgConnection]:
    """A connection of its own to ``dsn`` (autocommit; every driver error leaves as a
    cwstore error), closed when the block ends; a cwstore error when it cannot be
    opened. ``pooled``: the DSN leads to a transaction-mode pooler, so no statement is
    kept prepared across transactions and no session setting is made; else the
    connection carries :func:`session_bounds`."""
    try:
        raw = psycopg.connect(dsn, autocommit=True, **_no_prepare(pooled))
    except _ERRORS as exc:
        raise _wrap(exc) from exc
    _json_as_text(raw)
    if not pooled:
        _set_session(raw, session_bounds())
    try:
        yield PsycopgConnection(raw)
    finally:
        with suppress(*_ERRORS):
            raw.close()


def _set_session(conn: psycopg.Connection[Any], settings: Mapping[str, str]) -> None:
    """Make ``settings`` the session's; the connection is closed if that fails."""
    try:
        with psycopg.RawCursor(conn) as cur:
            cur.execute(_SESSION_SETTINGS, (list(settings), list(settings.values())))
    except _ERRORS as exc:
        conn.close()
        raise _wrap(exc) from exc


def _no_prepare(pooled: bool) -> dict[str, Any]:
    """psycopg's options for a connection through a transaction-mode pooler: never
    prepare a statement on the server (each is sent unnamed, parsed where it runs)."""
    return {"prepare_threshold": None} if pooled else {}


def statement(
    template: LiteralString,
    *,
    names: Mapping[str, str] | None = None,
    values: Mapping[str, str] | None = None,
) -> LiteralString:
    """``template`` with its ``{field}`` placeholders filled: ``names`` quoted as
    identifiers, ``values`` as string literals (:func:`quote_literal`). For the
    statements that take no parameters (``CREATE DATABASE``, ``ALTER SYSTEM``) and for
    text shown to be pasted into psql. Every value in the text is quoted, so it is as
    safe to run as a literal query text.
    """
    fields: dict[str, sql.Composable] = {k: sql.Identifier(v) for k, v in (names or {}).items()}
    fields.update((k, sql.Literal(v)) for k, v in (values or {}).items())
    return sql.SQL(template).format(**fields).as_string()


def quote_literal(value: str) -> str:
    """``value`` as a SQL string literal, as libpq's ``PQescapeLiteral`` writes it: in
    single quotes, a quote doubled, and with a backslash doubled behind `` E`` when it
    holds one (so it reads the same whatever ``standard_conforming_strings`` is)."""
    return sql.Literal(value).as_string()


class PsycopgListener(PsycopgConnection):
    """A dedicated psycopg connection that follows commits: it listens on ``cwstore``
    when ``interval`` is None (a primary, reached directly), else it polls every
    ``interval`` seconds (a hot standby, where LISTEN is refused and NOTIFY never
    arrives)."""

    def __init__(self, raw: psycopg.Connection[Any], interval: float | None) -> None:
        super().__init__(raw)
        self.interval = interval

    def wait(self, timeout: float) -> list[str]:
        if self.interval is not None:
            time.sleep(self.interval)
            return []
        with self._errors():
            select.select([self.raw.fileno()], [], [], timeout)
            payloads = [n.payload for n in self.raw.notifies(timeout=0)]
        return [] if len(payloads) > MAX_PAYLOADS else payloads


class PsycopgPoller:
    """A follower through a transaction-mode pooler: every statement borrows a pooled
    connection (one transaction each), and :meth:`wait` sleeps ``interval`` seconds, as
    a LISTEN there would not be kept."""

    def __init__(self, pool: PsycopgPool, interval: float) -> None:
        self._pool = pool
        self.interval = interval

    def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        with self._pool.connection() as conn:
            return conn.fetch(query, *args)

    def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        with self._pool.connection() as conn:
            return conn.fetchrow(query, *args)

    def fetchval(self, query: LiteralString, *args: Any) -> Any:
        with self._pool.connection() as conn:
            return conn.fetchval(query, *args)

    def execute(self, query: LiteralString, *args: Any) -> None:
        with self._pool.connection() as conn:
            conn.execute(query, *args)

    def execute_script(self, script: LiteralString) -> None:
        with self._pool.connection() as conn:
            conn.execute_script(script)

    def in_transaction(self) -> bool:
        return False

    def transaction(self, *, snapshot: bool = False) -> AbstractContextManager[None]:
        raise TypeError("a follower through a pooler runs single statements, not transactions")

    def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        raise TypeError("a follower through a pooler does not write")

    def wait(self, timeout: float) -> list[str]:
        time.sleep(self.interval)
        return []


class PsycopgPool:
    """A psycopg pool behind the :class:`Pool` protocol."""

    def __init__(
        self,
        pool: ConnectionPool[Conn],
        dsn: str,
        *,
        pooled: bool = False,
        settings: Mapping[str, str],
        listen_dsn: str | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self._pool = pool
        self.dsn = dsn
        self.pooled = pooled
        self._local = dict(settings) if pooled else {}
        self._session = session_bounds(settings)
        self._listen_dsn = listen_dsn
        self._poll_interval = poll_interval

    @classmethod
    def open(
        cls,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        settings: Mapping[str, str],
        pooled: bool = False,
        listen_dsn: str | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> PsycopgPool:
        """Open a pool of ``min_size`` to ``max_size`` connections with ``settings``:
        session settings on direct connections; with ``pooled`` (the DSN leads to a
        transaction-mode pooler) settings of each transaction instead, and no prepared
        statement kept. Raises a cwstore error when the server cannot be reached."""

        def configure(conn: Conn) -> None:
            _json_as_text(conn)
            if not pooled:
                _set_session(conn, session_bounds(settings))

        try:
            pool: ConnectionPool[Conn] = ConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                kwargs={
                    "autocommit": True,
                    "cursor_factory": psycopg.RawCursor,
                    **_no_prepare(pooled),
                },
                configure=configure,
                open=True,
            )
            try:
                pool.wait()
            except BaseException:
                pool.close()
                raise
        except _ERRORS as exc:
            raise _wrap(exc) from exc
        return cls(
            pool,
            dsn,
            pooled=pooled,
            settings=settings,
            listen_dsn=listen_dsn,
            poll_interval=poll_interval,
        )

    @contextmanager
    def connection(self) -> Iterator[PsycopgConnection]:
        try:
            with self._pool.connection() as raw:
                yield PsycopgConnection(raw, self._local)
        except _ERRORS as exc:
            raise _wrap(exc) from exc

    @contextmanager
    def listener(self) -> Iterator[PsycopgListener | PsycopgPoller]:
        target = self._listen_dsn or (None if self.pooled else self.dsn)
        if target is None:
            yield PsycopgPoller(self, self._poll_interval)
            return
        try:
            raw = psycopg.connect(target, autocommit=True, cursor_factory=psycopg.RawCursor)
        except _ERRORS as exc:
            raise _wrap(exc) from exc
        _json_as_text(raw)
        # A direct connection (listen_dsn, or dsn when no pooler is in between): it
        # carries the store's session settings and bounds like the pool's.
        _set_session(raw, self._session)
        standby = False
        try:
            row = raw.execute("SELECT pg_catalog.pg_is_in_recovery()").fetchone()
            standby = bool(row and row[0])
            if not standby:
                raw.execute("LISTEN cwstore")
                raw.execute(_Q["listen"])
            yield PsycopgListener(raw, self._poll_interval if standby else None)
        except _ERRORS as exc:
            raise _wrap(exc) from exc
        finally:
            if not standby:
                with suppress(*_ERRORS):
                    raw.execute(_Q["unlisten"])
            raw.close()

    def close(self) -> None:
        self._pool.close()
