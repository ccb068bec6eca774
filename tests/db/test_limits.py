"""One limit, every door: the graph-name limit the clients check is the one the SQL
functions enforce, and a name past it is refused where a graph would be created."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from cwstore._store_base import MAX_GRAPH_NAME_BYTES, check_graph_name
from cwstore.errors import InputError


def test_the_clients_and_the_sql_share_the_graph_name_limit(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT cwstore.max_graph_name_bytes()").fetchone()
    assert row == (MAX_GRAPH_NAME_BYTES,)
    check_graph_name("é" * (MAX_GRAPH_NAME_BYTES // 2))
    with pytest.raises(InputError):
        check_graph_name("é" * (MAX_GRAPH_NAME_BYTES // 2) + "x")


@pytest.mark.parametrize(
    "call",
    [
        "SELECT cwstore.ensure_graph_v1(%s)",
        "SELECT cwstore.begin_import_v1(%s)",
        "SELECT count(*) FROM cwstore.append_v1(%s, '[]'::json)",
    ],
)
def test_every_sql_door_refuses_a_name_past_the_limit(db_dsn: str, call: str) -> None:
    name = "n" * (MAX_GRAPH_NAME_BYTES + 1)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(call, (name,))
        n = conn.execute(
            "SELECT count(*) FROM cwstore.graphs WHERE length(name) > %s",
            (MAX_GRAPH_NAME_BYTES,),
        ).fetchone()
    assert err.value.sqlstate == "CW400"
    assert err.value.diag.message_primary is not None
    assert len(err.value.diag.message_primary) < 300  # the name is not quoted whole
    assert n == (0,)


def test_messages_quote_a_long_name_cut(db_dsn: str) -> None:
    name = "m" * 100_000
    with psycopg.connect(db_dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT * FROM cwstore.frontier_at(%s)", (name,))
    diag: Any = err.value.diag
    assert err.value.sqlstate == "CW404"
    assert len(diag.message_primary) < 300
