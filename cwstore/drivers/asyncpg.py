"""The asyncpg adapter of :class:`~cwstore.drivers._protocol.AsyncPool`.

asyncpg speaks ``$1`` placeholders natively and returns ``json``/``jsonb`` as text
(no codec is registered), and its ``Record`` is a :class:`Row` as it comes (by name or
position, ``len``, iteration, equal to the tuple of its values): rows are handed back
unconverted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, suppress
from typing import Any, LiteralString, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .._sql import queries
from ..errors import DatabaseError, Error, map_error
from ._conninfo import AsyncpgTarget, asyncpg_target
from ._protocol import MAX_PAYLOADS, CopyRecord, Row, session_bounds

__all__ = [
    "AsyncpgConnection",
    "AsyncpgPoller",
    "AsyncpgPool",
    "close_listener",
    "open_connection",
]

_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    ConnectionError,
)
_Q = queries()
POLL_INTERVAL = 0.25
"""Seconds between reads of a follower that cannot listen (standby, pooler)."""


def _wrap(exc: BaseException) -> Error:
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


@asynccontextmanager
async def open_connection(dsn: str, *, pooled: bool = False) -> AsyncIterator[AsyncpgConnection]:
    """A connection of its own to ``dsn`` (autocommit, mapped: every driver error leaves
    as a cwstore error), closed when the block ends; a cwstore error when it cannot be
    opened, an :class:`InputError` (before connecting) for a DSN asyncpg cannot honour
    (:func:`cwstore.drivers._conninfo.asyncpg_target`). ``pooled``: the DSN leads to a
    transaction-mode pooler, so no statement is kept prepared across transactions and
    no session setting is sent; else the connection carries :func:`session_bounds`."""
    raw = await _connect(asyncpg_target(dsn), session_bounds(), pooled=pooled)
    try:
        yield AsyncpgConnection(raw)
    finally:
        await close_listener(raw, registered=False)


async def _connect(
    target: AsyncpgTarget, settings: Mapping[str, str], *, pooled: bool = False
) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(
            target.url,
            server_settings={} if pooled else dict(settings),
            **target.options,
            **_no_statement_cache(pooled),
        )
    except _ERRORS as exc:
        raise _wrap(exc) from exc


def _no_statement_cache(pooled: bool) -> dict[str, Any]:
    """asyncpg's options for a connection through a transaction-mode pooler: no named
    prepared statement (each query is parsed in the transaction that runs it)."""
    return {"statement_cache_size": 0} if pooled else {}


_LOCAL_SETTINGS: LiteralString = (
    "SELECT pg_catalog.set_config(k, v, true) FROM unnest($1::text[], $2::text[]) AS s(k, v)"
)
"""Sets settings for the current transaction only (a pooler's connection is shared)."""


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
    """An asyncpg connection behind the :class:`AsyncConnection` protocol.

    Each statement (and each transaction's begin and end) raises a driver error as the
    cwstore error it maps to (:func:`_wrap`), where it happens."""

    def __init__(
        self,
        raw: asyncpg.Connection | PoolConnectionProxy,
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

    @asynccontextmanager
    async def _scope(self) -> AsyncIterator[None]:
        """Run a statement in a transaction of its own that carries the local settings
        (nothing to do without them, or inside a transaction, which has them)."""
        if not self._local or self.raw.is_in_transaction():
            yield
            return
        async with self.raw.transaction():
            await self._apply_local()
            yield

    async def _apply_local(self) -> None:
        await self.raw.execute(_LOCAL_SETTINGS, list(self._local), list(self._local.values()))

    async def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        with self._errors():
            async with self._scope():
                return cast("list[Row]", await self.raw.fetch(query, *args))

    async def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        with self._errors():
            async with self._scope():
                return await self.raw.fetchrow(query, *args)

    async def fetchval(self, query: LiteralString, *args: Any) -> Any:
        with self._errors():
            async with self._scope():
                return await self.raw.fetchval(query, *args)

    async def execute(self, query: LiteralString, *args: Any) -> None:
        with self._errors():
            async with self._scope():
                await self.raw.execute(query, *args)

    async def execute_script(self, script: LiteralString) -> None:
        """Run a multi-statement script (never prepared, no parameters)."""
        with self._errors():
            await self.raw.execute(script)

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        return self.raw.is_in_transaction()

    @asynccontextmanager
    async def transaction(self, *, snapshot: bool = False) -> AsyncIterator[None]:
        nested = self.raw.is_in_transaction()
        if snapshot:
            tx = self.raw.transaction(isolation="repeatable_read", readonly=True)
        else:
            tx = self.raw.transaction()
        with self._errors():
            async with tx:
                if self._local and not nested:
                    await self._apply_local()
                yield

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        with self._errors():
            await self._copy_chunks(schema, table, columns, records, chunk_rows)

    async def _copy_chunks(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        chunk_rows: int | None,
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
        records: AsyncIterator[CopyRecord] | list[CopyRecord],
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


async def _streamed(rows: Iterable[CopyRecord]) -> AsyncIterator[CopyRecord]:
    """Hand rows to COPY, letting the event loop send each slice while the next is built."""
    for i, row in enumerate(rows):
        if i % 1000 == 0:
            await asyncio.sleep(0)
        yield row


async def _drawn(rows: Iterator[CopyRecord], count: int) -> list[CopyRecord]:
    """The next ``count`` rows (fewer at the end), letting the event loop run every few
    rows: often enough that a COPY in flight keeps its socket full."""
    out: list[CopyRecord] = []
    for row in rows:
        out.append(row)
        if len(out) == count:
            break
        if len(out) % 100 == 0:
            await asyncio.sleep(0)
    return out


class AsyncpgListener(AsyncpgConnection):
    """A dedicated asyncpg connection that follows commits: it listens on ``cwstore``
    when ``interval`` is None (a primary, reached directly), else it polls every
    ``interval`` seconds (a hot standby, where LISTEN is refused and NOTIFY never
    arrives)."""

    def __init__(self, raw: asyncpg.Connection, interval: float | None) -> None:
        super().__init__(raw)
        self._event = asyncio.Event()
        self._payloads: list[str] | None = []
        self.interval = interval

    def _wake(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if self._payloads is not None:
            self._payloads.append(str(payload))
            if len(self._payloads) > MAX_PAYLOADS:
                self._payloads = None  # too many to keep: say "anything may have changed"
        self._event.set()

    async def wait(self, timeout: float) -> list[str]:
        if self.interval is not None:
            timeout = self.interval
        with suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
        payloads, self._payloads = self._payloads or [], []
        return payloads


class AsyncpgPoller:
    """A follower through a transaction-mode pooler: every statement borrows a pooled
    connection (one transaction each), and :meth:`wait` sleeps ``interval`` seconds, as
    a LISTEN there would not be kept."""

    def __init__(self, pool: AsyncpgPool, interval: float) -> None:
        self._pool = pool
        self.interval = interval

    async def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        async with self._pool.connection() as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        async with self._pool.connection() as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: LiteralString, *args: Any) -> Any:
        async with self._pool.connection() as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: LiteralString, *args: Any) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(query, *args)

    async def execute_script(self, script: LiteralString) -> None:
        async with self._pool.connection() as conn:
            await conn.execute_script(script)

    def in_transaction(self) -> bool:
        return False

    def transaction(self, *, snapshot: bool = False) -> AbstractAsyncContextManager[None]:
        raise TypeError("a follower through a pooler runs single statements, not transactions")

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        raise TypeError("a follower through a pooler does not write")

    async def wait(self, timeout: float) -> list[str]:
        await asyncio.sleep(self.interval)
        return []


async def close_listener(raw: asyncpg.Connection, *, registered: bool = True) -> None:
    """Unregister and close a listener connection, even when the caller is cancelled.

    A cancel scope (anyio's, Starlette's on a client that left) cancels every await
    inside it again, this cleanup's too: a cancelled ``close()`` would leave the
    backend open until the garbage collector found the connection. Then the socket is
    closed without a goodbye (``terminate``); the server ends the backend at once, and
    its row in ``cwstore.listeners`` goes at the next follower's ``listen_v1``.
    """
    try:
        if registered:
            with suppress(*_ERRORS):
                await raw.execute(_Q["unlisten"])
        with suppress(*_ERRORS):
            await raw.close()
    finally:
        if not raw.is_closed():
            raw.terminate()


class AsyncpgPool:
    """An asyncpg pool behind the :class:`AsyncPool` protocol."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        dsn: str,
        *,
        pooled: bool = False,
        settings: Mapping[str, str],
        listen: AsyncpgTarget | None,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self._pool = pool
        self.dsn = dsn
        self.pooled = pooled
        self._local = dict(settings) if pooled else {}
        self._session = session_bounds(settings)
        self._listen = listen
        self._poll_interval = poll_interval

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        settings: Mapping[str, str],
        pooled: bool = False,
        listen_dsn: str | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> AsyncpgPool:
        """Open a pool of ``min_size`` to ``max_size`` connections with ``settings``:
        session settings on direct connections (with :func:`session_bounds`), and on the
        listener's; with ``pooled`` (the DSN leads to a transaction-mode pooler)
        settings of each transaction instead, and no prepared statement kept.

        Raises :class:`InputError` (before connecting) for a DSN asyncpg cannot honour
        (:func:`cwstore.drivers._conninfo.asyncpg_target`), a cwstore error when the server
        cannot be reached."""
        target = asyncpg_target(dsn)
        listen = None if listen_dsn is None else asyncpg_target(listen_dsn)
        try:
            pool = await asyncpg.create_pool(
                target.url,
                min_size=min_size,
                max_size=max_size,
                server_settings={} if pooled else session_bounds(settings),
                reset=_keep_session,
                **target.options,
                **_no_statement_cache(pooled),
            )
        except _ERRORS as exc:
            raise _wrap(exc) from exc
        return cls(
            pool,
            dsn,
            pooled=pooled,
            settings=settings,
            listen=listen if listen is not None else None if pooled else target,
            poll_interval=poll_interval,
        )

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncpgConnection]:
        try:
            async with self._pool.acquire() as raw:
                yield AsyncpgConnection(raw, self._local)
        except _ERRORS as exc:
            raise _wrap(exc) from exc

    @asynccontextmanager
    async def listener(self) -> AsyncIterator[AsyncpgListener | AsyncpgPoller]:
        if self._listen is None:
            yield AsyncpgPoller(self, self._poll_interval)
            return
        # A direct connection (listen_dsn, or dsn when no pooler is in between): it
        # carries the store's session settings and bounds like the pool's.
        raw = await _connect(self._listen, self._session)
        standby = False
        try:
            standby = bool(await raw.fetchval("SELECT pg_catalog.pg_is_in_recovery()"))
            conn = AsyncpgListener(raw, self._poll_interval if standby else None)
            if not standby:
                await raw.add_listener("cwstore", conn._wake)
                await raw.execute(_Q["listen"])
            yield conn
        except _ERRORS as exc:
            raise _wrap(exc) from exc
        finally:
            await close_listener(raw, registered=not standby)

    async def close(self) -> None:
        await self._pool.close()
