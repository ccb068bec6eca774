"""The asyncpg adapter of :class:`~cwstore.drivers._protocol.AsyncPool`.

asyncpg speaks ``$1`` placeholders natively and returns ``json``/``jsonb`` as text
(no codec is registered), so the only conversion is ``Record`` to ``tuple``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, LiteralString, TypeAlias
from urllib.parse import quote, urlencode

import asyncpg
import psycopg
from asyncpg.pool import PoolConnectionProxy
from psycopg.conninfo import conninfo_to_dict

from .._sql import queries
from ..errors import DatabaseError, Error, InputError, map_error
from ._protocol import Row

__all__ = [
    "ERRORS",
    "AsyncpgConnection",
    "AsyncpgPool",
    "DriverError",
    "RawConnection",
    "close_listener",
    "open_raw",
    "url_dsn",
    "wrap",
]

_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    ConnectionError,
)
ERRORS = _ERRORS
"""Every error the driver (or the socket under it) raises."""
DriverError = asyncpg.PostgresError
"""An error the server sent; ``.sqlstate`` is its code."""
RawConnection: TypeAlias = asyncpg.Connection
"""The driver's own connection, as callers of :mod:`cwstore.migrate` hand it over."""
_Q = queries()


def url_dsn(dsn: str) -> str:
    """``dsn`` as a URL: asyncpg takes only URLs, libpq also ``key=value`` strings.

    A URL is returned as given; a ``key=value`` string (parsed by psycopg, as libpq
    would) becomes ``postgresql:///dbname?key=value&...``, every other setting a query
    parameter, which asyncpg reads as libpq does. Raises :class:`InputError` for a
    string libpq would refuse.
    """
    if "://" in dsn:
        return dsn
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InputError(f"not a connection string: {exc}") from None
    database = quote(str(params.pop("dbname", "")), safe="")
    query = urlencode({k: str(v) for k, v in params.items()}, quote_via=quote)
    return f"postgresql:///{database}?{query}"


def wrap(exc: BaseException) -> Error:
    """The cwstore error for an asyncpg (or socket) error."""
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, asyncpg.PostgresError):
        return map_error(
            exc.sqlstate,
            str(getattr(exc, "message", None) or exc),
            getattr(exc, "detail", None),
            getattr(exc, "constraint_name", None),
        )
    return DatabaseError(f"{type(exc).__name__}: {exc}")


async def open_raw(dsn: str) -> RawConnection:
    """A connection of the driver's own to ``dsn``; a cwstore error when it cannot be
    opened."""
    try:
        return await asyncpg.connect(url_dsn(dsn))
    except _ERRORS as exc:
        raise wrap(exc) from exc


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


class AsyncpgConnection:
    """An asyncpg connection behind the :class:`AsyncConnection` protocol."""

    def __init__(self, raw: asyncpg.Connection | PoolConnectionProxy) -> None:
        self.raw = raw

    async def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        return [tuple(r) for r in await self.raw.fetch(query, *args)]

    async def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        row = await self.raw.fetchrow(query, *args)
        return None if row is None else tuple(row)

    async def fetchval(self, query: LiteralString, *args: Any) -> Any:
        return await self.raw.fetchval(query, *args)

    async def execute(self, query: LiteralString, *args: Any) -> None:
        await self.raw.execute(query, *args)

    async def execute_script(self, script: LiteralString) -> None:
        """Run a multi-statement script (never prepared, no parameters)."""
        await self.raw.execute(script)

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return self.raw.is_in_transaction()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self.raw.transaction():
            yield

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[Row],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        if chunk_rows is None:
            await self._copy(schema, table, columns, _streamed(records))
            return
        rows = iter(records)
        chunk = await _drawn(rows, chunk_rows)
        while chunk:
            copy = asyncio.ensure_future(self._copy(schema, table, columns, chunk))
            try:
                # The server writes this chunk (and runs the statement's triggers) while
                # the next chunk's rows are drawn; both steps yield to each other.
                following = await _drawn(rows, chunk_rows)
            except BaseException:
                with suppress(Exception):  # the drawing's exception is the one to tell
                    await copy
                raise
            await copy
            chunk = following

    async def _copy(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: AsyncIterator[Row] | list[Row],
    ) -> None:
        # asyncpg's COPY can wait forever for a socket that will never drain once the
        # backend is gone, so a termination listener cancels it.
        copy = asyncio.ensure_future(
            self.raw.copy_records_to_table(
                table, schema_name=schema, columns=list(columns), records=records
            )
        )
        lost = False

        def on_lost(_: Any) -> None:
            nonlocal lost
            lost = True
            copy.cancel()

        self.raw.add_termination_listener(on_lost)
        try:
            await copy
        except asyncio.CancelledError:
            if not lost:
                raise
            raise DatabaseError(
                "the connection was lost during the import; nothing was written"
            ) from None
        finally:
            self.raw.remove_termination_listener(on_lost)


async def _streamed(rows: Iterable[Row]) -> AsyncIterator[Row]:
    """Hand rows to COPY, letting the event loop send each slice while the next is built."""
    for i, row in enumerate(rows):
        if i % 1000 == 0:
            await asyncio.sleep(0)
        yield row


async def _drawn(rows: Iterator[Row], count: int) -> list[Row]:
    """The next ``count`` rows (fewer at the end), letting the event loop run every few
    rows: often enough that a COPY in flight keeps its socket full."""
    out: list[Row] = []
    for row in rows:
        out.append(row)
        if len(out) == count:
            break
        if len(out) % 100 == 0:
            await asyncio.sleep(0)
    return out


class AsyncpgListener(AsyncpgConnection):
    """A dedicated asyncpg connection listening on ``cwstore``."""

    def __init__(self, raw: asyncpg.Connection) -> None:
        super().__init__(raw)
        self._event = asyncio.Event()

    def _wake(self, *_: Any) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()


async def close_listener(raw: asyncpg.Connection) -> None:
    """Unregister and close a listener connection, even when the caller is cancelled.

    A cancel scope (anyio's, Starlette's on a client that left) cancels every await
    inside it again, this cleanup's too: a cancelled ``close()`` would leave the
    backend open until the garbage collector found the connection. Then the socket is
    closed without a goodbye (``terminate``); the server ends the backend at once, and
    its row in ``cwstore.listeners`` goes at the next follower's ``listen_v1``.
    """
    try:
        with suppress(*_ERRORS):
            await raw.execute(_Q["unlisten"])
        with suppress(*_ERRORS):
            await raw.close()
    finally:
        if not raw.is_closed():
            raw.terminate()


class AsyncpgPool:
    """An asyncpg pool behind the :class:`AsyncPool` protocol."""

    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self._pool = pool
        self.dsn = dsn

    @classmethod
    async def open(
        cls, dsn: str, *, min_size: int, max_size: int, settings: Mapping[str, str]
    ) -> AsyncpgPool:
        """Open a pool of ``min_size`` to ``max_size`` connections, each with the
        session ``settings``. Raises a cwstore error when the server cannot be reached."""
        real = url_dsn(dsn)
        try:
            pool = await asyncpg.create_pool(
                real,
                min_size=min_size,
                max_size=max_size,
                server_settings=dict(settings),
                reset=_keep_session,
            )
        except _ERRORS as exc:
            raise wrap(exc) from exc
        return cls(pool, real)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncpgConnection]:
        try:
            async with self._pool.acquire() as raw:
                yield AsyncpgConnection(raw)
        except _ERRORS as exc:
            raise wrap(exc) from exc

    @asynccontextmanager
    async def listener(self) -> AsyncIterator[AsyncpgListener]:
        try:
            raw = await asyncpg.connect(self.dsn)
        except _ERRORS as exc:
            raise wrap(exc) from exc
        conn = AsyncpgListener(raw)
        try:
            await raw.add_listener("cwstore", conn._wake)
            await raw.execute(_Q["listen"])
            yield conn
        except _ERRORS as exc:
            raise wrap(exc) from exc
        finally:
            await close_listener(raw)

    async def close(self) -> None:
        await self._pool.close()
