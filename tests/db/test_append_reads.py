"""An append reads the node rows its batch names, not the graph's: what it costs must not
grow with the graph, whatever plan PostgreSQL keeps for its statements (append_v1 plans
them generically, so a plan made when the table was small is kept as it grows).

Counted, not timed: the rows of ``cwstore.nodes`` the append's transaction read
(``pg_stat_get_xact_tuples_returned`` and ``..._fetched``). A lookup of the batch's ids
by index reads a few; the plan this guards against read every node of the graph up to
its length (a hash join over the graph, in ``_refuse_changed``)."""

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


def _append_reads(conn: psycopg.Connection[Any], graph: str, nodes: list[dict[str, Any]]) -> int:
    """Rows of cwstore.nodes read by one append_v1 of ``nodes``, in a transaction of its
    own (committed)."""
    with conn.transaction():
        before = conn.execute(_READ).fetchone()
        conn.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
            (graph, prepare_batch(nodes).json),
        )
        after = conn.execute(_READ).fetchone()
    assert before is not None and after is not None
    return int(after[0]) - int(before[0])


@pytest.mark.parametrize("retry", [False, True], ids=["new node", "retry of held nodes"])
def test_an_append_onto_a_long_graph_reads_a_few_node_rows(db_dsn: str, retry: bool) -> None:
    tag = "retry" if retry else "new"
    short, long_ = f"reads-short-{tag}", f"reads-long-{tag}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        # The session's plans are made while the table is small, as in a new database.
        first = chain(2, tag=short)
        _append_reads(conn, short, batch_of(first))
        _append_reads(conn, short, batch_of(chain(1, tag=short + "2", parent=first[-1]["id"])))
        nodes = chain(LONG, tag=long_)
        with cwstore.connect_sync(db_dsn) as store:
            store.import_state(long_, document(nodes))
        held = batch_of(nodes[-2:])
        new = batch_of(chain(1, tag=long_ + "+", parent=nodes[-1]["id"]))
        reads = _append_reads(conn, long_, held if retry else held + new)
        length = conn.execute(
            "SELECT length FROM cwstore.graphs WHERE name = %s", (long_,)
        ).fetchone()
    assert length == (LONG if retry else LONG + 1,)
    assert reads < 50, f"an append onto a {LONG}-node graph read {reads} node rows"
