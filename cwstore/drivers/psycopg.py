"""The psycopg (sync) adapter of :class:`~cwstore.drivers._protocol.Pool`.

Connections use ``RawCursor`` so the ``$1`` query texts asyncpg takes serve psycopg
too, plain tuple rows, and a text loader for ``json``/``jsonb`` so both drivers hand
back the same values.
"""

from __future__ import annotations

import select
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from itertools import islice
from typing import Any, LiteralString, TypeAlias

import psycopg
from psycopg import pq, sql
from psycopg.rows import TupleRow, tuple_row
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool

from .._sql import queries
from ..errors import DatabaseError, Error, map_error
from ._protocol import Row

__all__ = [
    "ERRORS",
    "DriverError",
    "PsycopgConnection",
    "PsycopgPool",
    "RawConnection",
    "open_raw",
    "wrap",
]

_ERRORS = (psycopg.Error, OSError)
ERRORS = _ERRORS
"""Every error the driver (or the socket under it) raises."""
DriverError = psycopg.Error
"""An error of the driver; ``.sqlstate`` is the server's code when the server sent it."""
RawConnection: TypeAlias = "psycopg.Connection[Any]"
"""The driver's own connection, as callers of :mod:`cwstore.migrate` hand it over."""
_Q = queries()
Conn = psycopg.Connection[TupleRow]


def wrap(exc: BaseException) -> Error:
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


class _AbortCopy(Exception):
    """Ends a COPY early (psycopg sends CopyFail); the real reason is re-raised after."""


class PsycopgConnection:
    """A psycopg connection behind the :class:`Connection` protocol."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def _cursor(self) -> psycopg.RawCursor[TupleRow]:
        # $1 placeholders and plain tuples, whatever the connection's own factories.
        return psycopg.RawCursor(self.raw, row_factory=tuple_row)

    def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        with self._cursor() as cur:
            return cur.execute(query, args).fetchall()

    def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        with self._cursor() as cur:
            return cur.execute(query, args).fetchone()

    def fetchval(self, query: LiteralString, *args: Any) -> Any:
        with self._cursor() as cur:
            row = cur.execute(query, args).fetchone()
        return None if row is None else row[0]

    def execute(self, query: LiteralString, *args: Any) -> None:
        with self._cursor() as cur:
            cur.execute(query, args)

    def execute_script(self, script: LiteralString) -> None:
        """Run a multi-statement script (never prepared, no parameters)."""
        with self._cursor() as cur:
            cur.execute(script, prepare=False)

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.raw.transaction():
            yield

    def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Row],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        if chunk_rows is None:
            self._copy(schema, table, columns, records)
            return
        rows = iter(records)

        def draw() -> list[Row]:
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
        self, schema: str, table: str, columns: Sequence[str], records: Iterable[Row]
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


def open_raw(dsn: str) -> RawConnection:
    """A connection of the driver's own to ``dsn`` (autocommit); a cwstore error when it
    cannot be opened."""
    try:
        return psycopg.connect(dsn, autocommit=True)
    except _ERRORS as exc:
        raise wrap(exc) from exc


class PsycopgListener(PsycopgConnection):
    """A dedicated psycopg connection listening on ``cwstore``."""

    def wait(self, timeout: float) -> None:
        select.select([self.raw.fileno()], [], [], timeout)
        for _ in self.raw.notifies(timeout=0):
            pass


class PsycopgPool:
    """A psycopg pool behind the :class:`Pool` protocol."""

    def __init__(self, pool: ConnectionPool[Conn], dsn: str) -> None:
        self._pool = pool
        self.dsn = dsn

    @classmethod
    def open(
        cls, dsn: str, *, min_size: int, max_size: int, settings: Mapping[str, str]
    ) -> PsycopgPool:
        """Open a pool of ``min_size`` to ``max_size`` connections, each with the
        session ``settings``. Raises a cwstore error when the server cannot be reached."""

        def configure(conn: Conn) -> None:
            _json_as_text(conn)
            for name, value in settings.items():
                conn.execute("SELECT set_config($1, $2, false)", (name, value))

        try:
            pool: ConnectionPool[Conn] = ConnectionPool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                kwargs={"autocommit": True, "cursor_factory": psycopg.RawCursor},
                configure=configure,
                open=True,
            )
            try:
                pool.wait()
            except BaseException:
                pool.close()
                raise
        except _ERRORS as exc:
            raise wrap(exc) from exc
        return cls(pool, dsn)

    @contextmanager
    def connection(self) -> Iterator[PsycopgConnection]:
        try:
            with self._pool.connection() as raw:
                yield PsycopgConnection(raw)
        except _ERRORS as exc:
            raise wrap(exc) from exc

    @contextmanager
    def listener(self) -> Iterator[PsycopgListener]:
        try:
            raw = psycopg.connect(self.dsn, autocommit=True, cursor_factory=psycopg.RawCursor)
        except _ERRORS as exc:
            raise wrap(exc) from exc
        _json_as_text(raw)
        try:
            raw.execute("LISTEN cwstore")
            raw.execute(_Q["listen"])
            yield PsycopgListener(raw)
        except _ERRORS as exc:
            raise wrap(exc) from exc
        finally:
            with suppress(*_ERRORS):
                raw.execute(_Q["unlisten"])
            raw.close()

    def close(self) -> None:
        self._pool.close()
