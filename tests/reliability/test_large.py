"""Large inputs: the largest payload (4 MiB) and one past it, a 200,000-node import with
bounded memory, and clear refusals at the limits (nesting deeper than
:data:`cwstore._jsontext.MAX_DEPTH`, semantic content over 100,000 characters of JSON).

Memory is the peak resident set size growth of a new process making the import
(:mod:`support.peak_rss` says how and why a new one). The bounds are stated against the
document's JSON text size; docs/reliability.md records what was measured.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest
from support.nodes import T0
from support.peak_rss import PeakRSS, import_in_child
from support.reliability import CLIENTS, Client, assert_graph, chain, document

import cwstore
from cwstore import _jsontext, compute_id, fold_frontier
from cwstore._store_base import IMPORT_CHUNK_ROWS
from cwstore.document import MAX_PAYLOAD_BYTES, SEMANTIC_CONTENT_MAX

BIG_NODES = 200_000
# Peak RSS growth of the process while import_state runs, as a multiple of the
# document's JSON text size (UTF-8 bytes). Measured on PostgreSQL 15 and 18 (see
# docs/reliability.md): 0.7-0.8x for the 200,000-node chain (41 MB as JSON) given as
# parsed objects, whose rows stream to COPY; about 11x for the single-node document of
# 14.8 MB given as text, whose 9.5 million characters include emoji, so Python holds
# each copy of the string at 4 bytes per character (the parsed value, the identity
# text, the COPY text: about 3.5 copies of 38 MB).
IMPORT_FROM_OBJECTS_BOUND = 2.0
IMPORT_FROM_TEXT_BOUND = 16.0
# Peak private memory growth of the server's backend while it writes one node at the
# payload limit, as a multiple of the payload, by door and payload shape (PostgreSQL 15,
# benchmarks/RESULTS.md). append_v1: 200,000 objects {"a":1} take 15x, one long string
# 9x; import_rows_v1 (a writer's import): 14x and 13x.
BACKEND_BOUNDS = {
    ("append_v1", "small_objects"): 20.0,
    ("append_v1", "one_string"): 12.0,
    ("import_rows_v1", "small_objects"): 15.0,
    ("import_rows_v1", "one_string"): 15.0,
}


# --- the largest payload --------------------------------------------------------------------


def _largest_node(extra: int = 0) -> dict[str, Any]:
    """A tool_result whose payload is as large as MAX_PAYLOAD_BYTES allows (a little
    under it), or ``extra`` units of its blob more."""
    unit = 'héllo wörld 😀 \u0000 "quoted" \\ \u202eRTL\u202c e\u0301 \t\n'
    payload: dict[str, Any] = {
        "blob": "",
        "numbers": [*range(50_000), 0.1, 1e21, 5e-324, -(2**53 - 1)],
        "nested": {"z": 1, "a": [None, True, {"": ""}]},
    }
    rest = len(_jsontext.dumps(payload).encode())
    per = len(_jsontext.dumps(unit).encode()) - 2
    payload["blob"] = unit * ((MAX_PAYLOAD_BYTES - rest) // per + extra)
    return {
        "id": compute_id("tool_result", [], payload),
        "kind": "tool_result",
        "parents": [],
        "payload": payload,
        "createdAt": T0,
        "sequence": 1,
    }


@pytest.mark.parametrize("client", CLIENTS)
async def test_the_largest_payload_round_trips_exactly(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    node = _largest_node()
    text = _jsontext.dumps(document([node]))
    size = len(text.encode())
    assert len(_jsontext.dumps(node["payload"]).encode()) > MAX_PAYLOAD_BYTES - 100
    assert len(_jsontext.dumps(node["payload"]).encode()) <= MAX_PAYLOAD_BYTES
    graph = f"largest-{uuid.uuid4().hex[:8]}"
    mem = import_in_child(client, db_dsn, graph, text, "text")
    assert mem.count == 1
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        assert mem.growth < IMPORT_FROM_TEXT_BOUND * size, (
            f"importing {size:,} bytes of JSON text grew the peak RSS by "
            f"{mem.growth:,} bytes ({mem.method})"
        )
        assert await store.call("export_json", graph) == text

        # The same node appended live comes back byte for byte too.
        graph2 = f"largest-append-{uuid.uuid4().hex[:8]}"
        out = await store.call(
            "append", graph2, [{k: v for k, v in node.items() if k != "sequence"}]
        )
        assert [(n.id, n.sequence) for n in out] == [(node["id"], 1)]
        assert await store.call("export_json", graph2) == text
    finally:
        await store.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_payload_past_the_limit_is_refused_by_import_and_append(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    node = _largest_node(extra=1)
    assert len(_jsontext.dumps(node["payload"]).encode()) > MAX_PAYLOAD_BYTES
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        graph = f"too-large-{uuid.uuid4().hex[:8]}"
        with pytest.raises(cwstore.ValidationError) as imported:
            await store.call("import_state", graph, _jsontext.dumps(document([node])))
        with pytest.raises(cwstore.ValidationError) as appended:
            await store.call("append", graph, [{k: v for k, v in node.items() if k != "sequence"}])
        assert (
            await aconn.fetchval(
                "SELECT count(*) FROM cwstore.graphs WHERE name = $1 AND length > 0", graph
            )
            == 0
        )
    finally:
        await store.close()
    assert [v.code for v in imported.value.violations] == ["too_large"]
    assert [(v.code, v.path) for v in appended.value.violations] == [("too_large", "$[0].payload")]


def _backend_status(pid: int) -> dict[str, int] | None:
    """VmHWM and RssShmem (bytes) of a server process on this machine, or None."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out if len(out) == 2 else None


def _limit_payload(shape: str) -> Any:
    if shape == "one_string":
        return {"s": "z" * (MAX_PAYLOAD_BYTES - 16)}
    return [{"a": 1}] * ((MAX_PAYLOAD_BYTES - 64) // len('{"a":1},'))


def _write_one(conn: psycopg.Connection[Any], door: str, graph: str, payload_text: str) -> int:
    """Write one node of this payload to a new graph through a door; how many it wrote."""
    node_id = compute_id("tool_result", [], _jsontext.loads(payload_text))
    if door == "append_v1":
        batch = (
            f'[{{"id":"{node_id}","kind":"tool_result","parents":[],'
            f'"payload":{payload_text},"createdAt":"{T0}"}}]'
        )
        row = conn.execute(
            "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)", (graph, batch)
        ).fetchone()
    else:
        with conn.transaction():
            row = conn.execute(
                "SELECT cwstore.import_rows_v1(cwstore.begin_import_v1(%s), '{1}', %s::text[],"
                " '{tool_result}', ARRAY['{}'], %s::text[], %s::text[], '{NULL}')",
                (graph, [node_id], [payload_text], [T0]),
            ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(("door", "shape"), sorted(BACKEND_BOUNDS))
def test_a_write_at_the_payload_limit_holds_its_payload_a_few_times(
    db_dsn: str, door: str, shape: str
) -> None:
    """The backend's peak private memory (VmHWM growth less the shared pages it touched)
    while append_v1 or import_rows_v1 writes one node at the 4 MiB limit, called as any
    client calls it, stays within a small multiple of the payload. Skipped where the
    server's processes cannot be read (another machine)."""
    text = _jsontext.dumps(_limit_payload(shape))
    size = len(text.encode())
    assert MAX_PAYLOAD_BYTES - 100 < size <= MAX_PAYLOAD_BYTES
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        assert _write_one(conn, door, f"memory-warm-{uuid.uuid4().hex[:8]}", '{"a":1}') == 1
        before = _backend_status(pid)
        if before is None:
            pytest.skip("the server's processes are not readable from here")
        assert _write_one(conn, door, f"memory-{uuid.uuid4().hex[:8]}", text) == 1
        after = _backend_status(pid)
    assert after is not None
    growth = (after["VmHWM"] - before["VmHWM"]) - (after["RssShmem"] - before["RssShmem"])
    bound = BACKEND_BOUNDS[(door, shape)]
    assert growth < bound * size, (
        f"{door} of one node with a {size:,}-byte payload ({shape}) grew the backend by "
        f"{growth:,} bytes, {growth / size:.1f}x (bound {bound}x)"
    )


# --- 200,000 nodes -----------------------------------------------------------------------


async def test_two_hundred_thousand_nodes_with_bounded_memory(
    db_dsn: str, aconn: asyncpg.Connection
) -> None:
    """A 200,000-node chain imported from a parsed document (the form the runtime hands
    over); the import streams it to COPY, so the process grows by about one text size
    (checking plus rows in flight), not by copies of the whole document."""
    doc = document(chain(BIG_NODES, tag="two-hundred-thousand"))
    text = _jsontext.dumps(doc)
    graph = f"big-{uuid.uuid4().hex[:8]}"
    mem = import_in_child("async", db_dsn, graph, text, "objects")
    assert mem.count == BIG_NODES
    store = await cwstore.connect(db_dsn, min_size=1, max_size=1, migrate_schema=False)
    try:
        assert mem.growth < IMPORT_FROM_OBJECTS_BOUND * len(text.encode()), (
            f"importing {BIG_NODES:,} nodes ({len(text.encode()):,} bytes as JSON) grew the peak "
            f"RSS by {mem.growth:,} bytes ({mem.method})"
        )
        assert (
            await aconn.fetchval("SELECT length FROM cwstore.graphs WHERE name = $1", graph)
            == BIG_NODES
        )
        assert await store.export_json(graph) == text
        assert await store.frontier(graph) == doc["frontier"]
    finally:
        await store.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_violation_past_the_first_chunks_writes_nothing(
    db_dsn: str, aconn: asyncpg.Connection, client: str
) -> None:
    """An import COPYs IMPORT_CHUNK_ROWS rows per statement while it checks the next
    ones: a violation found after earlier chunks went in still writes nothing, and is
    reported with its index and id."""
    count = 2 * IMPORT_CHUNK_ROWS + 5_000
    nodes = chain(count, tag="late-violation")
    bad = count - 100
    nodes[bad] = {**nodes[bad], "payload": {"changed": True}}  # its id no longer matches
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        graph = f"late-{uuid.uuid4().hex[:8]}"
        with pytest.raises(cwstore.ValidationError) as caught:
            await store.call("import_state", graph, document(nodes))
        assert [(v.code, v.index, v.node_id) for v in caught.value.violations] == [
            ("identity", bad, nodes[bad]["id"])
        ]
        await assert_graph(aconn, graph, [])
        assert (
            await aconn.fetchval(
                "SELECT count(*) FROM cwstore.nodes WHERE graph_id = cwstore.graph_key($1)", graph
            )
            == 0
        )
    finally:
        await store.close()


# --- refusals at the limits ------------------------------------------------------------------


def _nested(levels: int) -> Any:
    """``levels`` levels of arrays and objects, alternating, innermost ``[]``."""
    value: Any = []
    for i in range(levels - 1):
        value = [value] if i % 2 else {"k": value}
    return value


def _node(kind: str, payload: Any, key: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": compute_id(kind, [], payload, key),
        "kind": kind,
        "parents": [],
        "payload": payload,
        "createdAt": T0,
        "sequence": 1,
    }
    if key is not None:
        node["resourceKey"] = key
    return node


def _semantic(content: Any) -> dict[str, Any]:
    return _node(
        "semantic", {"type": "memory", "key": "big", "content": content}, "semantic:memory:big"
    )


async def _accepted_both_ways(store: Client, node: dict[str, Any]) -> None:
    """Imported (frontier declared) and appended (frontier folded): exact round trip."""
    text = _jsontext.dumps(document([node]))
    graph = f"limit-{uuid.uuid4().hex[:8]}"
    assert await store.call("import_state", graph, text) == 1
    assert await store.call("export_json", graph) == text
    graph = f"limit-{uuid.uuid4().hex[:8]}"
    await store.call("append", graph, [{k: v for k, v in node.items() if k != "sequence"}])
    folded = {**document([node]), "frontier": fold_frontier([node])}
    assert await store.call("export_json", graph) == _jsontext.dumps(folded)


async def _refused_both_ways(
    store: Client, aconn: asyncpg.Connection, node: dict[str, Any], code: str
) -> list[cwstore.Violation]:
    found: list[cwstore.Violation] = []
    for how in ("import_state", "append"):
        graph = f"limit-{uuid.uuid4().hex[:8]}"
        arg: Any = (
            _jsontext.dumps(document([node]))
            if how == "import_state"
            else [{k: v for k, v in node.items() if k != "sequence"}]
        )
        with pytest.raises(cwstore.ValidationError) as caught:
            await store.call(how, graph, arg)
        assert code in caught.value.codes, (how, caught.value.violations)
        found.extend(caught.value.violations)
        await assert_graph(aconn, graph, [])
    return found


@pytest.mark.parametrize("client", CLIENTS)
async def test_nesting_limit(db_dsn: str, aconn: asyncpg.Connection, client: str) -> None:
    """MAX_DEPTH levels import and append and come back exactly; one more is refused
    with ``unrepresentable``, naming the node and the JSON path."""
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        await _accepted_both_ways(store, _node("inference", _nested(_jsontext.MAX_DEPTH)))
        deep = _node("inference", _nested(_jsontext.MAX_DEPTH + 1))
        for v in await _refused_both_ways(store, aconn, deep, "unrepresentable"):
            assert v.code == "unrepresentable"
            assert v.index == 0 and v.node_id == deep["id"]
            assert v.path.startswith(("$.nodes[0].payload", "$[0].payload"))
            assert str(_jsontext.MAX_DEPTH) in v.message
    finally:
        await store.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_semantic_content_limit(db_dsn: str, aconn: asyncpg.Connection, client: str) -> None:
    """Semantic content is at most 100,000 characters of JSON, counted as JavaScript
    counts them (UTF-16 code units of ``JSON.stringify(content)``)."""
    assert SEMANTIC_CONTENT_MAX == 100_000
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        await _accepted_both_ways(store, _semantic("c" * (SEMANTIC_CONTENT_MAX - 2)))
        await _accepted_both_ways(store, _semantic("😀" * ((SEMANTIC_CONTENT_MAX - 2) // 2)))
        for content in ("c" * (SEMANTIC_CONTENT_MAX - 1), "😀" * (SEMANTIC_CONTENT_MAX // 2)):
            for v in await _refused_both_ways(store, aconn, _semantic(content), "semantic_payload"):
                assert v.code == "semantic_payload"
                assert v.path.endswith(".payload.content")
    finally:
        await store.close()


def test_peak_rss_measurement_sees_a_50_mb_allocation() -> None:
    """The measuring helper itself: 50 MB written inside the block show up, even where
    the process has freed more than that in a heap it still holds."""
    junk = [b"y" * 1000 + bytes([i % 256]) for i in range(120_000)]
    pinned = [b"z" * 2000 + bytes([i % 256]) for i in range(100)]
    del junk
    with PeakRSS().measure() as mem:
        blob = b"x" * 50_000_000
        del blob
    assert mem.growth >= 45_000_000, (mem.growth, mem.method)
    assert len(pinned) == 100
