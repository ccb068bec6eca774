"""The psycopg (sync) adapter of :class:`~cwstore.drivers._protocol.Pool`.

Connections use ``RawCursor`` so the ``$1`` query texts asyncpg takes serve psycopg
too, plain tuple rows, and a text loader for ``json``/``jsonb`` so both drivers hand
back the same values.
"""

from __future__ import annotations

import select
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool

from .._sql import queries
from ..errors import DatabaseError, Error, map_error
from ._protocol import Row

__all__ = ["PsycopgPool"]

_ERRORS = (psycopg.Error, OSError)
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

    def __init__(self, raw: Conn) -> None:
        self.raw = raw

    def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        return self.raw.execute(query, args).fetchall()

    def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        return self.raw.execute(query, args).fetchone()

    def fetchval(self, query: LiteralString, *args: Any) -> Any:
        row = self.raw.execute(query, args).fetchone()
        return None if row is None else row[0]

    def execute(self, query: LiteralString, *args: Any) -> None:
        self.raw.execute(query, args)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.raw.transaction():
            yield

    def copy_records(
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
