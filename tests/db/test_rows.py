"""A row of either adapter reads the same by column name and by position (the driver
protocol's ``Row``), and is equal to the tuple of its values."""

from __future__ import annotations

from typing import Any

import pytest

from cwstore.drivers._protocol import Row
from cwstore.drivers.asyncpg import AsyncpgPool
from cwstore.drivers.psycopg import PsycopgPool

QUERY = (
    "SELECT 7::bigint AS seq, 'n1' AS id, ARRAY['a', 'b'] AS parents,"
    " '{\"k\": 1}'::jsonb AS payload_text, NULL::text AS resource_key"
)
NAMES = ("seq", "id", "parents", "payload_text", "resource_key")
VALUES = (7, "n1", ["a", "b"], '{"k": 1}', None)
TWICE = "SELECT 1 AS a, 2 AS a"
SWAPPED = ("SELECT 1 AS a, 2 AS b", "SELECT 3 AS b, 4 AS a")
# Names beyond ASCII (the psycopg adapter reads ASCII names another way), after the
# same names in ASCII were read, and a result with no columns at all.
WIDE = ('SELECT 1 AS "\u00e9t\u00e9", 2 AS "ete"', 'SELECT 3 AS "ete", 4 AS "\u00e9t\u00e9"')
NO_COLUMNS = "SELECT"


def _check(row: Row | None) -> None:
    assert row is not None
    as_object: object = row
    assert as_object == VALUES
    assert len(row) == len(VALUES) and tuple(row) == VALUES
    assert [row[name] for name in NAMES] == list(VALUES)
    assert [row[i] for i in range(len(NAMES))] == list(VALUES)
    seq, node_id, *_ = row
    assert (seq, node_id) == (7, "n1")
    with pytest.raises(KeyError):
        row["no such column"]


def _by_name(rows: list[Any]) -> list[Any]:
    return [r["a"] for r in rows]


async def test_asyncpg_rows_by_name_and_position(db_dsn: str) -> None:
    pool = await AsyncpgPool.open(db_dsn, min_size=1, max_size=1, settings={})
    try:
        async with pool.connection() as conn:
            _check(await conn.fetchrow(QUERY))
            (row,) = await conn.fetch(QUERY)
            _check(row)
            assert await conn.fetch(QUERY + " WHERE false") == []
            assert _by_name(await conn.fetch(TWICE)) == [2]
            assert [_by_name(await conn.fetch(q)) for q in SWAPPED] == [[1], [4]]
            assert [(await conn.fetch(q))[0]["\u00e9t\u00e9"] for q in WIDE] == [1, 4]
            assert [tuple(r) for r in await conn.fetch(NO_COLUMNS)] == [()]
    finally:
        await pool.close()


def test_psycopg_rows_by_name_and_position(db_dsn: str) -> None:
    pool = PsycopgPool.open(db_dsn, min_size=1, max_size=1, settings={})
    try:
        with pool.connection() as conn:
            _check(conn.fetchrow(QUERY))
            (row,) = conn.fetch(QUERY)
            _check(row)
            assert conn.fetch(QUERY + " WHERE false") == []
            assert _by_name(conn.fetch(TWICE)) == [2]
            assert [_by_name(conn.fetch(q)) for q in SWAPPED] == [[1], [4]]
            assert [conn.fetch(q)[0]["\u00e9t\u00e9"] for q in WIDE] == [1, 4]
            assert [tuple(r) for r in conn.fetch(NO_COLUMNS)] == [()]
    finally:
        pool.close()
