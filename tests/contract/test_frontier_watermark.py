"""Behind the watermark: a graph's frontier history (``frontier_spans``) trails its
nodes by fewer than ``cwstore.derive_lag()`` of them, and no read can tell.

A graph is written one node at a time, with branches, semantic nodes, parentless system
nodes and a frontier declared half-way. At every sequence, the frontier that
``frontier_at`` and ``export_v1`` give is SPEC 4's fold of the prefix (from the declared
frontier on, the fold from it): while the watermark trails the graph, and again after
``cwstore.derive_v1`` has brought it to the graph's length; and with many frontiers
declared (some past the watermark when read, some at one length, some in batches). The
current frontier is read
from the graph's row, not from the spans; the row's frontier and watermark are kept by
cwstore alone.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from support.documents import GraphBuilder, generate_session

import cwstore

DECLARED_AT = 100
LENGTH = 190


def _session() -> tuple[list[dict[str, Any]], list[str]]:
    """LENGTH nodes of every habit that moves the frontier differently, and the frontier
    declared after node DECLARED_AT (two heads, one of them an old one)."""
    b = GraphBuilder()
    b.system("contract")
    for i in range(1, LENGTH):
        step = i % 8
        if step == 0:
            b.goal(f"task {i}")
        elif step == 1:
            b.inference(f"thinking {i}")
        elif step == 2:
            b.tool_call("search", {"q": i})
        elif step == 3:
            b.tool_result("search", [i])
        elif step == 4:
            b.resource(f"file:{i % 3}", {"v": i})
        elif step == 5:
            b.semantic("fact", f"k{i % 4}", i)
        elif step == 6:
            b.append("inference", f"aside {i}", advance=False)  # a second head
        else:
            b.append("system", f"note {i}", parents=[])  # leaves the frontier alone
    nodes = b.nodes
    assert len(nodes) == LENGTH
    declared = [nodes[3]["id"], nodes[DECLARED_AT - 1]["id"]]
    return nodes, declared


def _expected(nodes: list[dict[str, Any]], declared: list[str], s: int) -> list[str]:
    if s < DECLARED_AT:
        return cwstore.fold_frontier(nodes[:s])
    return cwstore.fold_frontier(nodes[DECLARED_AT:s], start=declared)


def _frontiers(conn: psycopg.Connection[Any], graph: str) -> list[list[str]]:
    """The frontier after every node 0..length, by frontier_at and by export_v1."""
    by_read = [
        [
            r[0]
            for r in conn.execute(
                "SELECT id FROM cwstore.frontier_at(%s, %s) ORDER BY position", (graph, s)
            )
        ]
        for s in range(LENGTH + 1)
    ]
    by_export = [
        list(row[0])
        if (
            row := conn.execute(
                "SELECT frontier FROM cwstore.export_v1(%s, %s)", (graph, s)
            ).fetchone()
        )
        else []
        for s in range(LENGTH + 1)
    ]
    assert by_read == by_export
    return by_read


def _row(conn: psycopg.Connection[Any], graph: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT length, derived_length FROM cwstore.graphs WHERE name = %s", (graph,)
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def test_every_read_of_the_frontier_answers_across_the_watermark(
    store: Any, graph: str, db_dsn: str
) -> None:
    nodes, declared = _session()
    for i, node in enumerate(nodes, start=1):
        if i == DECLARED_AT:
            await store.append(graph, [node], frontier=declared)
        else:
            await store.append(graph, [node])
    expected = [_expected(nodes, declared, s) for s in range(LENGTH + 1)]
    assert len({len(f) for f in expected}) > 1  # the frontier grows and shrinks

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        lag = int(conn.execute("SELECT cwstore.derive_lag()").fetchone()[0])  # type: ignore[index]
        length, watermark = _row(conn, graph)
        assert length == LENGTH
        # Written every derive_lag() nodes (the declaration too, when its run was):
        # trailing, not behind.
        assert watermark == lag * (LENGTH // lag)
        assert 0 < length - watermark < lag
        assert _frontiers(conn, graph) == expected

        assert conn.execute("SELECT cwstore.derive_v1(%s)", (graph,)).fetchone() == (LENGTH,)
        assert _row(conn, graph) == (LENGTH, LENGTH)
        assert _frontiers(conn, graph) == expected
    assert await store.frontier(graph) == expected[-1]


# Where frontiers are declared in the second test: after node n (the append that
# writes n declares it), heads by position in the session; (n, None) declares again at
# n through declare_frontier_v1, with the heads after it.
DECLARATIONS: dict[int, list[list[int]]] = {
    9: [[2, 8]],
    12: [[]],  # no heads at all
    40: [[39], [3, 39]],  # twice at one length: the last one is the frontier there
    41: [[40]],  # what the fold gives anyway
    75: [[10, 20, 30, 74]],
    100: [[99]],
    101: [[1]],
    130: [[129, 128, 60]],  # in an order of its own
    161: [[160]],
}
BATCHES = {20: 3, 50: 5, 125: 6}  # nodes from n on appended together (n..n+k-1)
READ_AT = (15, 45, 76, 101, 127, 131, 170, LENGTH)


def _declared_fold(nodes: list[dict[str, Any]], s: int) -> list[str]:
    """SPEC 4's fold of the first s nodes, from the last frontier declared by then."""
    at = max((n for n in DECLARATIONS if n <= s), default=0)
    if at == 0:
        return cwstore.fold_frontier(nodes[:s])
    heads = [nodes[i - 1]["id"] for i in DECLARATIONS[at][-1]]
    return cwstore.fold_frontier(nodes[at:s], start=heads)


def _frontier_reads(conn: psycopg.Connection[Any], graph: str, length: int) -> list[list[str]]:
    return [
        [
            r[0]
            for r in conn.execute(
                "SELECT id FROM cwstore.frontier_at(%s, %s) ORDER BY position", (graph, s)
            )
        ]
        for s in range(length + 1)
    ]


async def test_frontiers_declared_past_the_watermark_answer_where_declared(
    store: Any, graph: str, db_dsn: str
) -> None:
    nodes, _ = _session()
    expected = [_declared_fold(nodes, s) for s in range(LENGTH + 1)]
    i, tails = 1, 0
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        while i <= LENGTH:
            batch = nodes[i - 1 : i - 1 + BATCHES.get(i, 1)]
            last = i + len(batch) - 1
            declared = DECLARATIONS.get(last, [])
            frontier = [nodes[h - 1]["id"] for h in declared[0]] if declared else None
            await store.append(graph, batch, frontier=frontier)
            for again in declared[1:]:
                row = conn.execute("SELECT cwstore.graph_id_of(%s)", (graph,)).fetchone()
                assert row is not None
                conn.execute(
                    "SELECT cwstore.declare_frontier_v1(%s, %s)",
                    (row[0], [nodes[h - 1]["id"] for h in again]),
                )
            i = last + 1
            if last in READ_AT:
                assert _frontier_reads(conn, graph, last) == expected[: last + 1], last
                _, watermark = _row(conn, graph)
                tails += any(watermark < n <= last for n in DECLARATIONS)
        assert tails >= 4  # reads that folded from a declaration past the watermark
        length, watermark = _row(conn, graph)
        assert length == LENGTH and 0 < length - watermark < cwstore_lag(conn)
        assert _frontiers(conn, graph) == expected
        conn.execute("SELECT cwstore.derive_v1(%s)", (graph,))
        assert _frontiers(conn, graph) == expected


def _declarations(conn: psycopg.Connection[Any], graph: str) -> list[tuple[int, list[str]]]:
    return [
        (int(r[0]), list(r[1]))
        for r in conn.execute(
            "SELECT d.seq, d.heads FROM cwstore.frontier_declarations d"
            " JOIN cwstore.graphs g USING (graph_id) WHERE g.name = %s"
            " ORDER BY d.declaration_id",
            (graph,),
        )
    ]


async def test_a_frontier_the_appends_own_fold_gives_is_not_recorded(
    store: Any, graph: str, db_dsn: str
) -> None:
    """Every append declares the frontier that the fold of its nodes gives anyway (in
    batches too): where its heads are nodes the append wrote (as a LangGraph put names
    its checkpoint) it is not recorded, elsewhere it is, and every read at every
    sequence answers the fold, across the watermark and after derive_v1. The same heads
    in another order are recorded, and are the frontier from there on."""
    nodes, _ = _session()
    swapped_at = 118  # several heads there, declared in the other order
    recorded: list[tuple[int, list[str]]] = []
    expected: list[list[str]] = [[]]
    i = 1
    while i <= LENGTH:
        batch = nodes[i - 1 : i - 1 + BATCHES.get(i, 1)]
        last = i + len(batch) - 1
        before = expected[-1]
        expected += [cwstore.fold_frontier(batch[:k], start=before) for k in range(1, len(batch))]
        frontier = cwstore.fold_frontier(batch, start=before)
        if last == swapped_at:
            assert len(frontier) > 1
            frontier = frontier[::-1]
        if last == swapped_at or not set(frontier) <= {n["id"] for n in batch}:
            recorded.append((last, frontier))
        await store.append(graph, batch, frontier=frontier)
        expected.append(frontier)
        i = last + 1
    assert LENGTH - len(recorded) > 10  # appends whose declaration was not recorded
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert _declarations(conn, graph) == recorded
        length, watermark = _row(conn, graph)
        assert length == LENGTH and 0 < length - watermark < cwstore_lag(conn)
        assert _frontiers(conn, graph) == expected
        conn.execute("SELECT cwstore.derive_v1(%s)", (graph,))
        assert _frontiers(conn, graph) == expected

        first = nodes[0]["id"]
        child = {"kind": "inference", "parents": expected[-1], "payload": "apart"}
        await store.append(graph, [child], frontier=[first])
        assert _declarations(conn, graph)[len(recorded) :] == [(LENGTH + 1, [first])]
        assert await store.frontier(graph) == [first]


def cwstore_lag(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT cwstore.derive_lag()").fetchone()
    assert row is not None
    return int(row[0])


async def test_the_current_frontier_is_read_from_the_graphs_row(
    store: Any, graph: str, db_dsn: str
) -> None:
    """Not through frontier_spans: an index entry per node the graph ever held there was
    read by every current read until VACUUM came."""
    nodes, _ = _session()
    for node in nodes[:80]:
        await store.append(graph, [node])
    scans = (
        "SELECT coalesce(sum(pg_stat_get_xact_numscans(c.oid)), 0) FROM pg_class c"
        " WHERE c.oid = 'cwstore.frontier_spans'::regclass"
        "    OR c.oid IN (SELECT indexrelid FROM pg_index"
        "                  WHERE indrelid = 'cwstore.frontier_spans'::regclass)"
    )
    with psycopg.connect(db_dsn) as conn:
        before = conn.execute(scans).fetchone()
        heads = [r[0] for r in conn.execute("SELECT id FROM cwstore.frontier_at(%s)", (graph,))]
        after = conn.execute(scans).fetchone()
    assert heads == cwstore.fold_frontier(nodes[:80])
    assert before == after


@pytest.mark.parametrize(
    ("assignment", "allowed"),
    [
        ("frontier_seqs = '{}'", False),
        ("derived_length = 1", False),
        ("derived_length = length + 1", False),
        ("derived_length = length", True),
    ],
)
async def test_the_row_keeps_its_frontier_and_watermark(
    store: Any, graph: str, db_dsn: str, assignment: str, allowed: bool
) -> None:
    nodes, _ = _session()
    for node in nodes[:5]:
        await store.append(graph, [node])
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        before = conn.execute(
            "SELECT frontier_seqs FROM cwstore.graphs WHERE name = %s", (graph,)
        ).fetchone()
        statement = f"UPDATE cwstore.graphs SET {assignment} WHERE name = %s"
        if allowed:
            conn.execute(statement, (graph,))
            assert _row(conn, graph) == (5, 5)
            spans = conn.execute(
                "SELECT count(*) FROM cwstore.frontier_spans WHERE graph_id ="
                " (SELECT graph_id FROM cwstore.graphs WHERE name = %s)",
                (graph,),
            ).fetchone()
            assert spans is not None and spans[0] > 0
        else:
            with pytest.raises(psycopg.Error) as refused:
                conn.execute(statement, (graph,))
            assert refused.value.sqlstate == "CW403"
            assert _row(conn, graph) == (5, 0)
        after = conn.execute(
            "SELECT frontier_seqs FROM cwstore.graphs WHERE name = %s", (graph,)
        ).fetchone()
    assert before == after
    assert await store.frontier(graph) == cwstore.fold_frontier(nodes[:5])


def _counts_reads(conn: psycopg.Connection[Any], graph: str, length: int) -> list[tuple[Any, ...]]:
    """(counts by kind, latest goal's id, latest answer's id) after every node."""
    reads = []
    for s in range(length + 1):
        row = conn.execute("SELECT cwstore.projection_v1(%s, %s)", (graph, s)).fetchone()
        assert row is not None
        p = json.loads(row[0])
        reads.append(
            (
                p["counts"],
                p["latest_goal"] and p["latest_goal"]["id"],
                p["latest_answer"] and p["latest_answer"]["id"],
            )
        )
    return reads


def _counts_expected(nodes: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    expected = []
    for s in range(len(nodes) + 1):
        prefix = nodes[:s]
        counts: dict[str, int] = {}
        for n in prefix:
            counts[n["kind"]] = counts.get(n["kind"], 0) + 1
        latest = {n["kind"]: n["id"] for n in prefix}
        expected.append((counts, latest.get("goal"), latest.get("answer")))
    return expected


def _count_rows_expected(nodes: list[dict[str, Any]], watermark: int, block: int) -> set[Any]:
    """Per kind, its last node in each block of ``block`` sequences that ends at or before
    the watermark, with its running count."""
    rows: dict[tuple[str, int], tuple[str, int, int]] = {}
    running: dict[str, int] = {}
    for seq, n in enumerate(nodes[: watermark // block * block], start=1):
        running[n["kind"]] = running.get(n["kind"], 0) + 1
        rows[(n["kind"], (seq - 1) // block)] = (n["kind"], seq, running[n["kind"]])
    return set(rows.values())


async def test_counts_by_kind_answer_across_the_watermark(
    store: Any, graph: str, db_dsn: str
) -> None:
    """Counts by kind (and the latest goal and answer) as of every sequence, from
    kind_counts' rows per block behind the watermark and the nodes after it; the rows
    are exactly one per kind per block the watermark passed, whatever the appends'
    sizes."""
    nodes = generate_session(7, 14, keys=4, semantic_keys=4)["nodes"]
    sizes, i = [1, 5, 2, 40, 1, 1, 3], 0
    while i < len(nodes):
        size = sizes[i % len(sizes)]
        await store.append(graph, nodes[i : i + size])
        i += size
    expected = _counts_expected(nodes)
    assert len(expected[-1][0]) == 10  # every kind

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        block = int(conn.execute("SELECT cwstore.count_block()").fetchone()[0])  # type: ignore[index]
        assert len(nodes) > 4 * block
        gid = conn.execute("SELECT cwstore.graph_key(%s)", (graph,)).fetchone()
        rows = "SELECT kind, seq, n FROM cwstore.kind_counts WHERE graph_id = %s"
        for derive in (False, True):
            if derive:
                conn.execute("SELECT cwstore.derive_v1(%s)", (graph,))
            length, watermark = _row(conn, graph)
            assert (watermark < length) is not derive
            assert set(conn.execute(rows, gid).fetchall()) == _count_rows_expected(
                nodes, watermark, block
            )
            assert _counts_reads(conn, graph, length) == expected
