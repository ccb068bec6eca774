"""What a store needs from a PostgreSQL driver, stated once for every adapter.

Every query text uses ``$1, $2`` placeholders. A row is read by column name
(``row["length"]``) or by position, with the same values either way; ``jsonb`` and
``json`` come back as text, ``timestamptz`` as an aware :class:`~datetime.datetime`,
arrays as lists, so both adapters hand back identical values. Every server or
connection error leaves an adapter as a :class:`cwstore.Error` (mapped from its SQLSTATE
and constraint name by :func:`cwstore.errors.map_error`), its ``__cause__`` the driver's
own exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, LiteralString, Protocol, overload


class Row(Protocol):
    """One result row: a column by its name in the query (``row["length"]``) or by
    position (``row[0]``); ``len`` and iteration give the columns in the query's order.
    Callers read columns by name, so a row does not depend on the order of a query's
    columns."""

    @overload
    def __getitem__(self, key: str, /) -> Any: ...

    @overload
    def __getitem__(self, key: int, /) -> Any: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def keys(self) -> Iterable[str]:
        """The column names, in the query's order."""
        ...


CopyRecord = Sequence[Any]
"""One row written by :meth:`AsyncConnection.copy_records`, values in column order."""


MAX_PAYLOADS = 1000
"""A listener keeps at most this many notifications' payloads between two waits."""

CLIENT_CHECK_INTERVAL = "5s"
"""PostgreSQL's ``client_connection_check_interval`` on every direct connection cwstore
opens: while a statement runs (a lock wait included) the server checks this often that
the client is still connected, and ends the backend when it is gone."""


INDEX_PLANS = {"enable_seqscan": "off"}
"""The planner settings of every direct connection cwstore opens: each lookup cwstore
makes has an index, and a plan made while a table was small (the generic plan of a
prepared statement or of a plpgsql function, kept for the connection's life) would
otherwise go on reading the whole table as it grows. Off is a penalty, not a ban: a
query with no usable index still scans."""


def session_bounds(settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The session settings of a direct connection: the client check and
    :data:`INDEX_PLANS`, then ``settings`` (a store's tenant and statement timeout)."""
    return {
        "client_connection_check_interval": CLIENT_CHECK_INTERVAL,
        **INDEX_PLANS,
        **(settings or {}),
    }


class AsyncConnection(Protocol):
    """A connection borrowed from an :class:`AsyncPool`, in autocommit mode.

    Every statement (and a transaction's begin and commit) raises a driver error as the
    :class:`cwstore.Error` it maps to, at the statement: an integration catches cwstore's
    errors inside its block, never the driver's."""

    async def fetch(self, query: LiteralString, *args: Any) -> list[Row]:
        """Every row of ``query`` (an empty list when it returns none)."""
        ...

    async def fetchrow(self, query: LiteralString, *args: Any) -> Row | None:
        """The first row of ``query``, or ``None`` when it returns none."""
        ...

    async def fetchval(self, query: LiteralString, *args: Any) -> Any:
        """The first column of the first row, or ``None`` when there is no row."""
        ...

    async def execute(self, query: LiteralString, *args: Any) -> None:
        """Run ``query`` and discard what it returns."""
        ...

    async def execute_script(self, script: LiteralString) -> None:
        """Run a script of one or more statements (never prepared, no parameters)."""
        ...

    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection."""
        ...

    def transaction(self, *, snapshot: bool = False) -> AbstractAsyncContextManager[None]:
        """A transaction: committed when the block ends, rolled back when it raises.
        With ``snapshot``, REPEATABLE READ and READ ONLY: every read in it sees one
        snapshot. Settings given per transaction (through a pooler) are set first."""
        ...

    async def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None:
        """COPY ``records`` into ``schema.table``. An exception raised while iterating
        ``records`` aborts the COPY (nothing is written) and propagates unchanged; a
        connection lost meanwhile raises :class:`cwstore.DatabaseError` without waiting.

        With ``chunk_rows``, one COPY statement per ``chunk_rows`` records, and the next
        chunk's records are drawn from ``records`` (computed, when it is a generator)
        while the server writes the current one and runs its statement triggers. Only
        inside a transaction: an exception then leaves earlier chunks written until the
        caller's transaction rolls back."""
        ...


class AsyncListener(AsyncConnection, Protocol):
    """A follower's connection: one that listens on the ``cwstore`` channel (direct to
    a primary), or one that polls (a hot standby; through a transaction-mode pooler,
    each statement on a pooled connection, in a transaction of its own)."""

    async def wait(self, timeout: float) -> list[str]:
        """Return after a notification arrived since the last call, or after ``timeout``
        seconds; a polling follower returns after its polling interval instead. A
        notification is only a wake-up: the caller reads the table.

        Returns the payloads of the notifications since the last call (each
        ``graph_id:...``, the graph a commit touched), or an empty list when none is
        known (a timeout, a poll, or more than :data:`MAX_PAYLOADS` arrived): then any
        graph may have changed."""
        ...


class AsyncPool(Protocol):
    """A pool of connections to one database."""

    dsn: str
    """The connection string the pool opened, as the driver takes it."""

    pooled: bool
    """Whether ``dsn`` leads to a transaction-mode pooler."""

    def connection(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Borrow a connection; every driver error inside the block leaves as a
        cwstore error."""
        ...

    def listener(self) -> AbstractAsyncContextManager[AsyncListener]:
        """A follower. Direct to a primary (the pool's DSN, or the listen DSN the pool
        was given): a new connection of its own (not from the pool) registered as a
        follower (``LISTEN cwstore`` and query ``listen``), unregistered and closed on
        exit. On a hot standby: a connection of its own that polls. Through a
        transaction-mode pooler without a listen DSN: a poller over the pool."""
        ...

    async def close(self) -> None:
        """Close every connection."""
        ...


class Connection(Protocol):
    """The sync twin of :class:`AsyncConnection` (same contract)."""

    def fetch(self, query: LiteralString, *args: Any) -> list[Row]: ...

    def fetchrow(self, query: LiteralString, *args: Any) -> Row | None: ...

    def fetchval(self, query: LiteralString, *args: Any) -> Any: ...

    def execute(self, query: LiteralString, *args: Any) -> None: ...

    def execute_script(self, script: LiteralString) -> None: ...

    def in_transaction(self) -> bool: ...

    def transaction(self, *, snapshot: bool = False) -> AbstractContextManager[None]: ...

    def copy_records(
        self,
        schema: str,
        table: str,
        columns: Sequence[str],
        records: Iterable[CopyRecord],
        *,
        chunk_rows: int | None = None,
    ) -> None: ...


class Listener(Connection, Protocol):
    """The sync twin of :class:`AsyncListener`."""

    def wait(self, timeout: float) -> list[str]: ...


class Pool(Protocol):
    """The sync twin of :class:`AsyncPool`."""

    dsn: str
    pooled: bool

    def connection(self) -> AbstractContextManager[Connection]: ...

    def listener(self) -> AbstractContextManager[Listener]: ...

    def close(self) -> None: ...
