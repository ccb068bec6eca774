"""An append reads the node rows its batch names, not the graph's: what it costs must not
grow with the graph, whatever plan PostgreSQL keeps for its statements (append_v1 plans
them generically, so a plan made when the table was small is kept as it grows).

Counted, not timed: the rows of ``cwstore.nodes`` the append's transaction read
(``pg_stat_get_xact_tuples_returned`` and ``..._fetched``). A lookup of the batch's ids
by index reads a few; the plans this guards against read every node of the graph (a
hash join over the graph in ``_refuse_changed``; a scan of the graph's nodes for the
ids in ``_refuse_stale``, which refuses a stale expected length)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import cwstore
from cwstore._store_base import prepare_batch
from tests.support.reliability import batch_of, chain, document

LONG = 3000

_READ = (
    "SELECT pg_stat_get_xact_tuples_returned('cwstore.nodes'::regclass)"
    " + pg_stat_get_xact_tuples_fetched('cwstore.nodes'::regclass)"
)


def _append_reads(
    conn: psycopg.Connection[Any],
    graph: str,
    nodes: list[dict[str, Any]],
    expected: int | None = None,
) -> tuple[int, str | None]:
    """Rows of cwstore.nodes read by one append_v1 of ``nodes`` (with ``expected`` as its
    expected_length), in a transaction of its own, and the SQLSTATE it was refused with
    (``None``: it was not)."""
    refused = None
    with conn.transaction():
        before = conn.execute(_READ).fetchone()
        try:
            with conn.transaction():
                conn.execute(
                    "SELECT count(*) FROM cwstore.append_v1(%s, %s::json, %s)",
                    (graph, prepare_batch(nodes).json, expected),
                )
        except psycopg.Error as e:
            refused = e.sqlstate
        after = conn.execute(_READ).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0]), refused


@pytest.mark.parametrize("case", ["new node", "retry of held nodes", "stale expected length"])
def test_an_append_onto_a_long_graph_reads_a_few_node_rows(empty_db_dsn: str, case: str) -> None:
    # A new database, migrated here (not cloned from the tests' template): tables never
    # analyzed or vacuumed, and the session's plans made while they are small.
    db_dsn = empty_db_dsn
    cwstore.connect_sync(db_dsn, migrate_schema=True).close()
    tag = case.replace(" ", "-")
    short, long_ = f"reads-short-{tag}", f"reads-long-{tag}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        first = chain(2, tag=short)
        _append_reads(conn, short, batch_of(first))
        _append_reads(conn, short, batch_of(chain(1, tag=short + "2", parent=first[-1]["id"])))
        _append_reads(conn, short, batch_of(chain(1, tag=short + "3", parent=first[-1]["id"])), 1)
        nodes = chain(LONG, tag=long_)
        with cwstore.connect_sync(db_dsn) as store:
            store.import_state(long_, document(nodes))
        held = batch_of(nodes[-2:])
        new = batch_of(chain(1, tag=long_ + "+", parent=nodes[-1]["id"]))
        if case == "new node":
            reads, refused = _append_reads(conn, long_, held + new)
        elif case == "retry of held nodes":
            reads, refused = _append_reads(conn, long_, held)
        else:
            reads, refused = _append_reads(conn, long_, new, LONG - 1)
        length = conn.execute(
            "SELECT length FROM cwstore.graphs WHERE name = %s", (long_,)
        ).fetchone()
    assert refused == ("CW409" if case == "stale expected length" else None)
    assert length == (LONG + 1 if case == "new node" else LONG,)
    assert reads < 50, f"an append onto a {LONG}-node graph read {reads} node rows"
