"""Live appends and saves (SPEC sections 4, 5 and 7), against a real PostgreSQL.

Every test runs twice, through the ``store`` fixture of ``tests/contract/conftest.py``:
once on :class:`cwstore.AsyncStore` (asyncpg) and once on the sync :class:`cwstore.Store`
(psycopg, each call run in a thread), so one async test body serves both clients.

"Nothing written" is checked on the database itself (nodes and frontier declarations of
the graph), not only through the store.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from support.documents import GraphBuilder
from support.nodes import T0, node

import cwstore
from cwstore import (
    ChainConflictError,
    ConflictError,
    DivergedError,
    LengthConflictError,
    ValidationError,
    Vocabulary,
    _jsontext,
    compute_id,
    fold_frontier,
)
from cwstore.document import sort_parents

EMPTY_STATE: dict[str, Any] = {"version": 1, "nodes": [], "frontier": []}
MISSING = "cw_" + "a" * 24


# --- helpers ---------------------------------------------------------------------------


def new_graph(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def semantic(
    stype: str, skey: str, content: Any, parents: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    return node(
        "semantic",
        {"type": stype, "key": skey, "content": content},
        parents,
        key=f"semantic:{stype}:{skey}",
    )


def db_state(dsn: str, graph: str) -> tuple[int, list[tuple[int, str]], int]:
    """(graphs.length, [(seq, id)], number of frontier declarations) as stored."""
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT graph_id, length FROM cwstore.graphs WHERE name = %s", (graph,)
        ).fetchone()
        if row is None:
            return 0, [], 0
        gid, length = row
        nodes = c.execute(
            "SELECT seq, id FROM cwstore.nodes WHERE graph_id = %s ORDER BY seq", (gid,)
        ).fetchall()
        decls = c.execute(
            "SELECT count(*) FROM cwstore.frontier_declarations WHERE graph_id = %s", (gid,)
        ).fetchone()
        return int(length), [(int(s), str(i)) for s, i in nodes], int(decls[0]) if decls else 0


async def snapshot(dsn: str, graph: str) -> tuple[int, list[tuple[int, str]], int]:
    return await asyncio.to_thread(db_state, dsn, graph)


async def seeded(store: Any, graph: str) -> list[dict[str, Any]]:
    """Two committed nodes (a parentless system node and a goal under it)."""
    sys_node = node("system", "You are a test agent.")
    goal = node("goal", {"text": "seed"}, [sys_node["id"]])
    await store.append(graph, [sys_node, goal])
    return [sys_node, goal]


def violation(err: ValidationError, code: str) -> cwstore.Violation:
    found = [v for v in err.violations if v.code == code]
    assert found, f"no {code!r} violation in {err.violations!r}"
    return found[0]


# --- append: what comes back ----------------------------------------------------------


async def test_append_returns_stored_nodes_with_ids_and_sequences(store: Any) -> None:
    g = new_graph()
    sys_node = node("system", "contract", with_id=False)
    first = await store.append(g, [sys_node])
    assert [n.sequence for n in first] == [1]
    sys_id = first[0].id
    assert sys_id == compute_id("system", [], "contract")

    goal = node("goal", {"text": "plan", "b": 1, "a": [1, 2.5, None]}, [sys_id], with_id=False)
    later = node("inference", "thinking", with_id=False)
    # Parents given unsorted and repeated: stored unique and sorted, as the runtime does.
    res_key = node("resource", {"content": "v1"}, [], key="src/app.py", with_id=False)
    goal_id = compute_id("goal", [sys_id], goal["payload"])
    res_id = compute_id("resource", [], {"content": "v1"}, "src/app.py")
    answer = {
        "kind": "answer",
        "parents": [res_id, goal_id, res_id],
        "payload": "done",
        "createdAt": "2026-12-02T08:43:05.000+02:00",
    }
    out = await store.append(g, [goal, later, res_key, answer])
    assert [n.sequence for n in out] == [2, 3, 4, 5]
    assert [n.kind for n in out] == ["goal", "inference", "resource", "answer"]
    assert out[0].id == goal_id
    assert out[2].id == res_id and out[2].resource_key == "src/app.py"
    assert list(out[3].parents) == sorted({res_id, goal_id})
    assert out[3].created_at == "2026-12-02T08:43:05.000+02:00"
    assert out[0].payload == goal["payload"]
    assert all(isinstance(n, cwstore.CausalNode) for n in out)

    stored = await store.replay(g)
    assert [n.sequence for n in stored.nodes] == [1, 2, 3, 4, 5]
    assert [n.id for n in stored.nodes] == [sys_id] + [n.id for n in out]
    for n in stored.nodes:  # every id recomputes from the stored content
        assert n.id == compute_id(n.kind, list(n.parents), n.payload, n.resource_key)
    assert await store.length(g) == 5


async def test_given_ids_are_verified(store: Any, db_dsn: str) -> None:
    g = new_graph()
    await seeded(store, g)
    before = await snapshot(db_dsn, g)
    good = node("goal", {"text": "ok"})
    wrong = node("goal", {"text": "tampered"})
    wrong["id"] = compute_id("goal", [], {"text": "original"})
    with pytest.raises(ValidationError) as info:
        await store.append(g, [good, wrong])
    v = violation(info.value, "identity")
    assert v.index == 1
    assert await snapshot(db_dsn, g) == before

    # A correct id given explicitly is accepted as is.
    out = await store.append(g, [good])
    assert out[0].id == good["id"] and out[0].sequence == 3


# --- idempotency ------------------------------------------------------------------------


async def test_retry_of_the_same_batch_writes_nothing(store: Any, db_dsn: str) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    batch = [node("inference", "step 1", [goal["id"]]), node("inference", "step 2", [goal["id"]])]
    first = await store.append(g, batch, frontier=None)
    assert [n.sequence for n in first] == [3, 4]
    before = await snapshot(db_dsn, g)

    again = await store.append(g, batch)
    assert [(n.id, n.sequence, n.created_at) for n in again] == [
        (n.id, n.sequence, n.created_at) for n in first
    ]
    assert await snapshot(db_dsn, g) == before

    # The same content with another createdAt is the same node: the stored one comes
    # back (its createdAt) and nothing is written.
    later = [dict(n, createdAt="2027-01-01T00:00:00.000Z") for n in batch]
    for n in later:
        del n["id"]
    third = await store.append(g, later)
    assert [(n.id, n.sequence, n.created_at) for n in third] == [
        (n.id, n.sequence, T0) for n in first
    ]
    assert await snapshot(db_dsn, g) == before

    # A batch mixing a stored node and a new one writes only the new one.
    fresh = node("inference", "step 3", [goal["id"]])
    mixed = await store.append(g, [batch[0], fresh])
    assert [n.sequence for n in mixed] == [3, 5]
    length, rows, _ = await snapshot(db_dsn, g)
    assert length == 5 and [i for _, i in rows].count(batch[0]["id"]) == 1


async def test_retry_returns_the_stored_payload_text(store: Any) -> None:
    g = new_graph()
    first = await store.append(g, [node("tool_result", {"b": 1, "a": {"y": 2, "x": 3}})])
    # Same identity (keys are hashed sorted), another member order: the stored node
    # comes back as stored, member order included.
    again = await store.append(g, [node("tool_result", {"a": {"x": 3, "y": 2}, "b": 1})])
    assert again[0].id == first[0].id and again[0].sequence == 1
    assert _jsontext.dumps(again[0].payload) == '{"b":1,"a":{"y":2,"x":3}}'
    assert await store.length(g) == 1


async def test_a_given_sequence_is_ignored(store: Any) -> None:
    g = new_graph()
    await seeded(store, g)
    n = node("goal", "numbered")
    n["sequence"] = 99
    out = await store.append(g, [n])
    assert out[0].sequence == 3
    # Nodes read from one graph append to another (CausalNode objects, sequences and all).
    copy = new_graph("copy")
    source = await store.replay(g)
    out2 = await store.append(copy, list(source.nodes), frontier=list(source.frontier))
    assert [(n.id, n.sequence) for n in out2] == [(n.id, n.sequence) for n in source.nodes]
    assert (await store.replay(copy)).to_obj() == source.to_obj()


async def test_same_node_twice_in_one_batch_is_stored_once(store: Any, db_dsn: str) -> None:
    g = new_graph()
    n1 = node("goal", "twice")
    out = await store.append(g, [n1, n1, node("inference", "after", [n1["id"]])])
    assert [n.sequence for n in out] == [1, 1, 2]
    length, rows, _ = await snapshot(db_dsn, g)
    assert length == 2 and [i for _, i in rows] == [n1["id"], out[2].id]


# --- optimistic concurrency --------------------------------------------------------------


async def test_stale_expected_length_is_refused(store: Any, db_dsn: str) -> None:
    g = new_graph()
    await seeded(store, g)
    before = await snapshot(db_dsn, g)
    with pytest.raises(LengthConflictError) as info:
        await store.append(g, [node("goal", "late")], expected_length=1)
    err = info.value
    assert isinstance(err, ConflictError)
    assert err.expected_length == 1 and err.actual_length == 2
    assert await snapshot(db_dsn, g) == before
    with pytest.raises(LengthConflictError) as info2:
        await store.append(g, [node("goal", "early")], expected_length=7)
    assert (info2.value.expected_length, info2.value.actual_length) == (7, 2)

    out = await store.append(g, [node("goal", "on time")], expected_length=2)
    assert out[0].sequence == 3


async def test_expected_length_zero_on_a_new_graph(store: Any) -> None:
    g = new_graph()
    out = await store.append(g, [node("goal", "first")], expected_length=0)
    assert out[0].sequence == 1
    with pytest.raises(LengthConflictError):
        await store.append(g, [node("goal", "second")], expected_length=0)


async def test_retry_after_lost_reply_with_stale_expected_length(store: Any, db_dsn: str) -> None:
    g = new_graph()
    await seeded(store, g)
    batch = [node("goal", "turn"), node("inference", "reply", [node("goal", "turn")["id"]])]
    first = await store.append(g, batch, expected_length=2)
    await store.append(g, [node("goal", "someone else")])  # the graph moves on
    before = await snapshot(db_dsn, g)
    again = await store.append(g, batch, expected_length=2)
    assert [(n.id, n.sequence) for n in again] == [(n.id, n.sequence) for n in first]
    assert await snapshot(db_dsn, g) == before

    # Part new, part stored, with a stale length: a conflict, nothing written.
    with pytest.raises(LengthConflictError):
        await store.append(g, [batch[0], node("goal", "new")], expected_length=2)
    assert await snapshot(db_dsn, g) == before


async def test_retry_with_its_frontier_after_others_wrote_changes_nothing(
    store: Any, db_dsn: str
) -> None:
    """A lost reply: writer A's batch (with its frontier) was applied, writer B then
    appended and declared its own frontier; A's retry with its stale expected_length
    must return the stored nodes and write nothing, not even A's old frontier."""
    g = new_graph()
    _, goal = await seeded(store, g)
    a_batch = [node("inference", "A's step", [goal["id"]])]
    await store.append(g, a_batch, expected_length=2, frontier=[a_batch[0]["id"]])
    b_batch = [node("inference", "B's step", [a_batch[0]["id"]])]
    await store.append(g, b_batch, expected_length=3, frontier=[b_batch[0]["id"]])
    before = await snapshot(db_dsn, g)
    assert await store.frontier(g) == [b_batch[0]["id"]]

    again = await store.append(g, a_batch, expected_length=2, frontier=[a_batch[0]["id"]])
    assert [n.sequence for n in again] == [3]
    assert await store.frontier(g) == [b_batch[0]["id"]], "a stale retry moved the frontier"
    assert await snapshot(db_dsn, g) == before


async def test_exact_retry_with_frontier_writes_nothing(store: Any, db_dsn: str) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    batch = [node("inference", "step", [goal["id"]])]
    await store.append(g, batch, expected_length=2, frontier=[batch[0]["id"], goal["id"]])
    before = await snapshot(db_dsn, g)
    again = await store.append(g, batch, expected_length=2, frontier=[batch[0]["id"], goal["id"]])
    assert [n.sequence for n in again] == [3]
    assert await snapshot(db_dsn, g) == before


# --- atomicity ---------------------------------------------------------------------------


def _bad_second(kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def make(goal: dict[str, Any]) -> dict[str, Any]:
        if kind == "missing_parent":
            return node("inference", "orphan", [MISSING])
        if kind == "kind":
            return node("thought", "unknown kind", [goal["id"]])
        if kind == "chain":
            # links to nothing although the key already has a head (see the test)
            return node("resource", {"v": 2}, [goal["id"]], key="doc.md")
        raise AssertionError(kind)

    return make


@pytest.mark.parametrize("problem", ["missing_parent", "kind", "chain"])
async def test_a_batch_commits_whole_or_not_at_all(store: Any, db_dsn: str, problem: str) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    await store.append(g, [node("resource", {"v": 1}, [goal["id"]], key="doc.md")])
    before = await snapshot(db_dsn, g)
    good = node("inference", "fine", [goal["id"]])
    bad = _bad_second(problem)(goal)
    expected_error = ChainConflictError if problem == "chain" else ValidationError
    with pytest.raises(expected_error):
        await store.append(g, [good, bad], frontier=[good["id"]])
    assert await snapshot(db_dsn, g) == before
    state = await store.replay(g)
    assert good["id"] not in {n.id for n in state.nodes}


async def test_batch_with_unknown_frontier_id_writes_no_node(store: Any, db_dsn: str) -> None:
    g = new_graph()
    await seeded(store, g)
    before = await snapshot(db_dsn, g)
    n1 = node("goal", "x")
    with pytest.raises(ValidationError) as info:
        await store.append(g, [n1], frontier=[n1["id"], MISSING])
    assert "frontier_reference" in info.value.codes
    assert await snapshot(db_dsn, g) == before
    with pytest.raises(ValidationError) as info2:
        await store.append(g, [n1], frontier=[n1["id"], n1["id"]])
    assert "frontier_reference" in info2.value.codes
    assert await snapshot(db_dsn, g) == before


# --- the frontier --------------------------------------------------------------------------


async def test_declared_frontier_is_authoritative(store: Any) -> None:
    g = new_graph()
    sys_node, goal = await seeded(store, g)
    a = node("tool_call", {"name": "a"}, [goal["id"]])
    b = node("tool_call", {"name": "b"}, [goal["id"]])
    c = node("inference", "c", [a["id"]])
    # Declared in an order that is not the join order, and leaving c out.
    await store.append(g, [a, b, c], frontier=[b["id"], sys_node["id"], a["id"]])
    assert await store.frontier(g) == [b["id"], sys_node["id"], a["id"]]
    state = await store.replay(g)
    assert list(state.frontier) == [b["id"], sys_node["id"], a["id"]]
    assert (await store.replay(g, as_of=5)).frontier == state.frontier
    # The frontier before the batch is still there, as of 2 (the fold: the goal).
    assert list((await store.replay(g, as_of=2)).frontier) == [goal["id"]]

    # An empty frontier is a frontier too.
    d = node("answer", "d", [c["id"]])
    await store.append(g, [d], frontier=[])
    assert await store.frontier(g) == []
    # Re-declaring with a retried node (nothing new) moves the frontier only.
    await store.append(g, [d], frontier=[d["id"]])
    assert await store.frontier(g) == [d["id"]]
    assert await store.length(g) == 6


async def test_without_frontier_the_fold_applies(store: Any) -> None:
    g = new_graph()
    sys_node = node("system", "contract")
    goal = node("goal", "g", [sys_node["id"]])
    await store.append(g, [sys_node, goal])
    assert await store.frontier(g) == fold_frontier([sys_node, goal]) == [goal["id"]]

    # Declare a frontier, then fold from it.
    side = node("inference", "side branch", [sys_node["id"]])
    declared = [side["id"], goal["id"]]
    await store.append(g, [side], frontier=declared)
    declared_at = 3
    assert await store.frontier(g) == declared

    t1 = node("tool_call", {"name": "ls"}, [goal["id"]])
    r1 = node("tool_result", {"tool": "ls", "result": []}, [t1["id"]])
    mem = semantic("memory", "user.name", "Ada", [r1["id"]])
    sys2 = node("system", "second, parentless system node")
    ver = node("verification", {"method": "check"}, [r1["id"], side["id"]])
    res = node("resource", {"content": "x"}, [ver["id"]], key="notes.txt")
    branch = node("inference", "branch from sys", [sys_node["id"]])
    sys3 = node("system", "changed contract", [branch["id"]])
    mem2 = semantic("memory", "user.name", "Ada L.", [mem["id"]])
    ans = node("answer", "ok", [res["id"], sys3["id"]])
    batches = [[t1, r1], [mem], [sys2, ver], [res, branch], [sys3, mem2], [ans]]

    replayed_from = declared_at
    for batch in batches:
        await store.append(g, batch)
        state = await store.replay(g)
        expected = fold_frontier([n.to_obj() for n in state.nodes[declared_at:]], start=declared)
        assert await store.frontier(g) == expected
        assert list(state.frontier) == expected
        replayed_from += len(batch)
    # Frontiers as of every earlier sequence follow the fold too.
    full = await store.replay(g)
    for k in range(declared_at, len(full.nodes) + 1):
        want = fold_frontier([n.to_obj() for n in full.nodes[declared_at:k]], start=declared)
        assert list((await store.replay(g, as_of=k)).frontier) == want, k
    assert replayed_from == len(full.nodes)


async def test_fold_on_a_graph_that_never_declared(store: Any) -> None:
    g = new_graph()
    a = node("goal", "a")
    b = node("goal", "b")
    m = semantic("preference", "tone", "brief", [a["id"]])
    c = node("inference", "c", [a["id"], b["id"]])
    await store.append(g, [a, b, m])
    assert await store.frontier(g) == [a["id"], b["id"]]
    await store.append(g, [c])
    assert await store.frontier(g) == fold_frontier([a, b, m, c]) == [c["id"]]


async def test_stale_key_head_is_a_chain_conflict(store: Any, db_dsn: str) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    v1 = semantic("memory", "plan", "v1", [goal["id"]])
    v2 = semantic("memory", "plan", "v2", [v1["id"]])
    await store.append(g, [v1])
    await store.append(g, [v2])
    before = await snapshot(db_dsn, g)
    stale = semantic("memory", "plan", "v2 from a stale reader", [v1["id"]])
    with pytest.raises(ChainConflictError) as info:
        await store.append(g, [node("goal", "unrelated"), stale])
    err = info.value
    assert isinstance(err, ConflictError)
    assert err.key == "semantic:memory:plan"
    assert err.linked_head == v1["id"] and err.current_head == v2["id"]
    assert await snapshot(db_dsn, g) == before
    # A new version linking to nothing while the key has a head.
    with pytest.raises(ChainConflictError) as info2:
        await store.append(g, [node("resource", 1, [goal["id"]], key="semantic-free.txt")])
        await store.append(g, [node("resource", 2, [goal["id"]], key="semantic-free.txt")])
    assert info2.value.linked_head is None
    assert info2.value.key == "semantic-free.txt"


async def test_two_versions_of_a_key_in_one_batch(store: Any, db_dsn: str) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    v1 = node("resource", {"v": 1}, [goal["id"]], key="a.txt")
    v2 = node("resource", {"v": 2}, [v1["id"]], key="a.txt")
    out = await store.append(g, [v1, v2])
    assert [n.sequence for n in out] == [3, 4]
    before = await snapshot(db_dsn, g)
    w1 = node("resource", {"w": 1}, [goal["id"]], key="b.txt")
    w2 = node("resource", {"w": 2}, [goal["id"]], key="b.txt")  # does not link to w1
    with pytest.raises(ValidationError) as info:
        await store.append(g, [w1, w2])
    assert violation(info.value, "resource_chain").index == 1
    assert await snapshot(db_dsn, g) == before


async def test_an_empty_batch_is_refused(store: Any, db_dsn: str) -> None:
    g = new_graph()
    with pytest.raises(ValidationError) as info:
        await store.append(g, [])
    assert info.value.codes == ["shape"]
    assert await snapshot(db_dsn, g) == (0, [], 0)


# --- import safeguards on appended nodes -------------------------------------------------------


def _bad_node(case: str, goal_id: str) -> tuple[str, dict[str, Any] | list[dict[str, Any]]]:
    """(expected code, the bad node or a two-node tail) for each safeguard."""
    if case == "kind":
        return "kind", node("memo", "x", [goal_id])
    if case == "semantic_payload_shape":
        return "semantic_payload", node(
            "semantic", {"type": "memory", "key": "k"}, [goal_id], key="semantic:memory:k"
        )
    if case == "semantic_payload_key":
        return "semantic_payload", node(
            "semantic",
            {"type": "memory", "key": "k", "content": 1},
            [goal_id],
            key="semantic:memory:other",
        )
    if case == "semantic_payload_no_key":
        return "semantic_payload", node(
            "semantic", {"type": "memory", "key": "k", "content": 1}, [goal_id]
        )
    if case == "semantic_type_malformed":
        return "semantic_type", semantic("Not A Type", "k", 1, [goal_id])
    if case == "missing_parent":
        return "missing_parent", node("inference", "x", [goal_id, MISSING])
    if case == "parent_later_in_batch":
        later = node("inference", "later", [goal_id])
        early = node("inference", "early", [later["id"]])
        return "parent_order", [early, later]
    if case == "self_parent":
        n = node("inference", "self", [goal_id])
        n["parents"] = sort_parents([goal_id, n["id"]])
        return "parent_order", n
    if case == "nan":
        return "unrepresentable", node(
            "tool_result", {"result": math.nan}, [goal_id], with_id=False
        )
    if case == "infinity":
        return "unrepresentable", node(
            "tool_result", {"result": [math.inf]}, [goal_id], with_id=False
        )
    if case == "big_int":
        return "unrepresentable", node("tool_result", {"n": 2**53 + 1}, [goal_id], with_id=False)
    if case == "lone_surrogate":
        return "unrepresentable", node("tool_result", {"s": "a\ud800b"}, [goal_id], with_id=False)
    if case == "lone_surrogate_key":
        return "unrepresentable", node("tool_result", {"\udc00": 1}, [goal_id], with_id=False)
    if case == "nul_in_resource_key":
        return "unrepresentable", node("resource", 1, [goal_id], key="a\u0000b")
    if case == "created_at_text":
        return "created_at", node("inference", "x", [goal_id], created_at="yesterday")
    if case == "created_at_no_zone":
        return "created_at", node("inference", "x", [goal_id], created_at="2026-12-02T08:43:04.123")
    if case == "created_at_impossible":
        return "created_at", node("inference", "x", [goal_id], created_at="2026-13-45T08:43:04Z")
    if case == "identity":
        n = node("inference", "x", [goal_id])
        n["payload"] = "y"
        return "identity", n
    raise AssertionError(case)


IMPORT_CASES = [
    "kind",
    "semantic_payload_shape",
    "semantic_payload_key",
    "semantic_payload_no_key",
    "semantic_type_malformed",
    "missing_parent",
    "parent_later_in_batch",
    "self_parent",
    "nan",
    "infinity",
    "big_int",
    "lone_surrogate",
    "lone_surrogate_key",
    "nul_in_resource_key",
    "created_at_text",
    "created_at_no_zone",
    "created_at_impossible",
    "identity",
]


@pytest.mark.parametrize("case", IMPORT_CASES)
async def test_appended_nodes_meet_the_import_safeguards(
    store: Any, db_dsn: str, case: str
) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    before = await snapshot(db_dsn, g)
    code, bad = _bad_node(case, goal["id"])
    good = node("inference", f"good before {case}", [goal["id"]])
    batch = [good, *(bad if isinstance(bad, list) else [bad])]
    with pytest.raises(ValidationError) as info:
        await store.append(g, batch)
    v = violation(info.value, code)
    assert v.index == 1, v
    assert await snapshot(db_dsn, g) == before


async def test_fixed_vocabulary_graph_refuses_other_semantic_types(store: Any, db_dsn: str) -> None:
    g = new_graph("vocab")
    assert await store.import_state(g, EMPTY_STATE, vocabulary=Vocabulary.builtin()) == 0
    goal = node("goal", "remember things")
    await store.append(g, [goal])
    before = await snapshot(db_dsn, g)
    ok = semantic("memory", "a", 1, [goal["id"]])
    custom = semantic("customtype", "b", 2, [goal["id"]])
    with pytest.raises(ValidationError) as info:
        await store.append(g, [ok, custom])
    v = violation(info.value, "semantic_type")
    assert v.index == 1 and v.node_id == custom["id"]
    assert await snapshot(db_dsn, g) == before
    out = await store.append(g, [ok])
    assert out[0].sequence == 2

    # The same custom type is fine in a dynamic graph (the default).
    dyn = new_graph("dynamic")
    assert (await store.append(dyn, [semantic("customtype", "b", 2)]))[0].sequence == 1


async def test_missing_parent_names_the_node(store: Any) -> None:
    g = new_graph()
    _, goal = await seeded(store, g)
    good = node("inference", "good", [goal["id"]])
    orphan = node("inference", "orphan", [MISSING])
    with pytest.raises(ValidationError) as info:
        await store.append(g, [good, orphan])
    v = violation(info.value, "missing_parent")
    assert v.index == 1 and v.node_id == orphan["id"]
    assert "parents" in v.path


# --- save ------------------------------------------------------------------------------------


def _session() -> GraphBuilder:
    b = GraphBuilder()
    b.system("You are a test agent.")
    b.goal("write the report")
    call = b.tool_call("read_file", {"path": "a.txt"})
    b.tool_result("read_file", "hello", parents=[call["id"]])
    return b


async def test_save_appends_only_what_is_new(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = _session()
    written = await store.save(g, b.state())
    assert [n.sequence for n in written] == [1, 2, 3, 4]
    assert (await store.replay(g)).to_obj() == b.state()

    b.resource("report.md", {"content": "draft"})
    b.semantic("memory", "report.owner", "ada")
    b.answer("done")
    _, _, decls_before = await snapshot(db_dsn, g)
    written = await store.save(g, b.state(), expected_length=4)
    assert [n.sequence for n in written] == [5, 6, 7]
    assert [n.id for n in written] == [n["id"] for n in b.nodes[4:]]
    assert await store.frontier(g) == b.frontier
    assert (await store.replay(g)).to_obj() == b.state()
    assert (await store.export_json(g)) == cwstore.AgentState.from_obj(b.state()).to_json()
    # The state's frontier is the answer, which the fold of the new nodes made it:
    # declared, and not recorded (it changes no frontier).
    assert b.frontier == [b.nodes[-1]["id"]]
    _, _, decls_after = await snapshot(db_dsn, g)
    assert decls_after == decls_before

    # Saving the same state again writes nothing at all.
    before = await snapshot(db_dsn, g)
    assert await store.save(g, b.state()) == []
    assert await store.save(g, b.state(), expected_length=7) == []
    assert await snapshot(db_dsn, g) == before


async def test_save_of_same_nodes_with_a_new_frontier_moves_only_the_frontier(
    store: Any, db_dsn: str
) -> None:
    g = new_graph("save")
    b = _session()
    await store.save(g, b.state())
    state = b.state()
    state["frontier"] = [state["nodes"][1]["id"], state["nodes"][3]["id"]]
    assert await store.save(g, state) == []
    assert await store.frontier(g) == state["frontier"]
    length, rows, _ = await snapshot(db_dsn, g)
    assert length == 4 and len(rows) == 4


async def test_save_of_a_diverged_state_is_refused(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = _session()
    await store.save(g, b.state())
    before = await snapshot(db_dsn, g)

    # A different node at position 3 (same first two nodes), and longer.
    other = GraphBuilder()
    other.system("You are a test agent.")
    other.goal("write the report")
    other.tool_call("read_file", {"path": "b.txt"})
    other.tool_result("read_file", "bye")
    other.answer("done")
    with pytest.raises(DivergedError) as info:
        await store.save(g, other.state())
    assert isinstance(info.value, ConflictError)
    assert info.value.position == 3
    assert await snapshot(db_dsn, g) == before

    # A shorter state (a prefix of the stored one).
    short = b.state()
    short["nodes"] = short["nodes"][:2]
    short["frontier"] = [short["nodes"][1]["id"]]
    with pytest.raises(DivergedError) as info2:
        await store.save(g, short)
    assert isinstance(info2.value, ConflictError)
    assert info2.value.position == 3
    assert await snapshot(db_dsn, g) == before

    # An empty state against a non-empty graph.
    with pytest.raises(DivergedError) as info3:
        await store.save(g, EMPTY_STATE)
    assert info3.value.position == 1
    assert await snapshot(db_dsn, g) == before


async def test_save_with_stale_expected_length(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = _session()
    await store.save(g, b.state())
    b.answer("more")
    before = await snapshot(db_dsn, g)
    with pytest.raises(LengthConflictError) as info:
        await store.save(g, b.state(), expected_length=3)
    assert (info.value.expected_length, info.value.actual_length) == (3, 4)
    assert await snapshot(db_dsn, g) == before
    written = await store.save(g, b.state(), expected_length=4)
    assert [n.sequence for n in written] == [5]


async def test_save_refuses_an_invalid_state(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = _session()
    state = b.state()
    state["nodes"][2]["payload"] = {"name": "tampered"}
    with pytest.raises(ValidationError) as info:
        await store.save(g, state)
    assert "identity" in info.value.codes
    assert await snapshot(db_dsn, g) == (0, [], 0)


# --- save with a warm memory (the store has saved this graph before) --------------------


async def _warmed(store: Any, graph: str) -> GraphBuilder:
    """A graph saved twice by ``store`` (5 nodes), so its next save starts from what the
    store remembers of the graph instead of reading it."""
    b = _session()
    await store.save(graph, b.state())
    b.answer("first")
    assert [n.sequence for n in await store.save(graph, b.state())] == [5]
    return b


async def test_warm_save_names_a_bad_new_node_by_its_index_in_the_state(
    store: Any, db_dsn: str
) -> None:
    g = new_graph("save")
    b = await _warmed(store, g)
    b.inference("next")
    b.answer("second")
    before = await snapshot(db_dsn, g)

    tampered = b.state()
    tampered["nodes"][6]["payload"] = "tampered"
    with pytest.raises(ValidationError) as info:
        await store.save(g, tampered)
    v = violation(info.value, "identity")
    assert (v.index, v.node_id) == (6, tampered["nodes"][6]["id"])
    assert v.path.startswith("$.nodes[6]")

    renumbered = b.state()
    renumbered["nodes"][5]["sequence"] = 9
    with pytest.raises(ValidationError) as info:
        await store.save(g, renumbered)
    assert violation(info.value, "sequence").index == 5

    again = b.state()
    again["nodes"].append(dict(again["nodes"][1], sequence=8))
    with pytest.raises(ValidationError) as info:
        await store.save(g, again)
    v = violation(info.value, "duplicate_id")
    assert (v.index, v.node_id) == (7, again["nodes"][1]["id"])

    orphan = b.state()
    orphan["nodes"].append(dict(node("inference", "orphan", [MISSING]), sequence=8))
    with pytest.raises(ValidationError) as info:
        await store.save(g, orphan)
    assert violation(info.value, "missing_parent").index == 7

    unknown_head = b.state()
    unknown_head["frontier"] = [MISSING]
    with pytest.raises(ValidationError) as info:
        await store.save(g, unknown_head)
    assert "frontier_reference" in info.value.codes

    assert await snapshot(db_dsn, g) == before
    written = await store.save(g, b.state())
    assert [n.sequence for n in written] == [6, 7]
    assert (await store.replay(g)).to_obj() == b.state()


async def test_warm_save_still_refuses_a_state_whose_prefix_differs(
    store: Any, db_dsn: str
) -> None:
    g = new_graph("save")
    b = await _warmed(store, g)
    b.answer("second")
    before = await snapshot(db_dsn, g)

    # Another run of the session: the same first four nodes, then its own answer.
    other = _session()
    other.answer("another first")
    other.answer("another second")
    with pytest.raises(DivergedError) as info:
        await store.save(g, other.state())
    assert (info.value.position, info.value.stored_length) == (5, 5)

    # Only an early id differs (the prefix is compared by id, every one of them).
    early = b.state()
    early["nodes"][1]["id"] = MISSING
    with pytest.raises(DivergedError) as info:
        await store.save(g, early)
    assert info.value.position == 2

    # The same nodes in another order.
    swapped = b.state()
    nodes = swapped["nodes"]
    nodes[2], nodes[3] = dict(nodes[3], sequence=3), dict(nodes[2], sequence=4)
    with pytest.raises((DivergedError, ValidationError)):
        await store.save(g, swapped)

    assert await snapshot(db_dsn, g) == before
    assert [n.sequence for n in await store.save(g, b.state())] == [6]


async def test_warm_save_after_another_writer_appended(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = await _warmed(store, g)
    theirs = node("inference", "from another writer", [b.nodes[-1]["id"]])
    await store.append(g, [theirs])
    before = await snapshot(db_dsn, g)

    # The state does not hold the other writer's node: refused, nothing written.
    b.answer("mine")
    with pytest.raises(DivergedError) as info:
        await store.save(g, b.state())
    assert (info.value.position, info.value.stored_length) == (6, 6)
    with pytest.raises(LengthConflictError):
        await store.save(g, b.state(), expected_length=5)
    assert await snapshot(db_dsn, g) == before

    # A state read back from the store, with one more node, saves that node only.
    state = (await store.replay(g)).to_obj()
    mine = node("answer", "after theirs", [theirs["id"]])
    state["nodes"].append({**mine, "sequence": 7})
    state["frontier"] = [mine["id"]]
    assert [n.id for n in await store.save(g, state)] == [mine["id"]]
    # And the next turn, as an AgentState, from the memory of that save.
    nxt = node("inference", "and then", [mine["id"]])
    state["nodes"].append({**nxt, "sequence": 8})
    state["frontier"] = [nxt["id"]]
    written = await store.save(g, cwstore.AgentState.from_obj(state))
    assert [(n.sequence, n.id) for n in written] == [(8, nxt["id"])]
    assert await store.frontier(g) == [nxt["id"]]
    assert (await store.replay(g)).to_obj() == state


async def test_warm_save_after_another_writer_moved_a_key(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = _session()
    first = b.resource("report.md", {"content": "v1"})
    await store.save(g, b.state())
    b.answer("drafted")
    await store.save(g, b.state())
    theirs = node("resource", {"content": "their v2"}, [first["id"]], key="report.md")
    await store.append(g, [theirs])
    before = await snapshot(db_dsn, g)

    # The state's own next version of the key links to the head it knows: the stored
    # graph has moved on, so the state no longer extends it.
    b.resource("report.md", {"content": "my v2"})
    with pytest.raises(DivergedError) as info:
        await store.save(g, b.state())
    assert info.value.position == 7
    assert await snapshot(db_dsn, g) == before


async def test_warm_save_of_nodes_another_writer_already_wrote(store: Any, db_dsn: str) -> None:
    g = new_graph("save")
    b = await _warmed(store, g)
    answer = b.answer("second")
    await store.append(g, [answer])  # another writer stored the very same node

    # Nothing is written by this save; the state's own frontier is declared.
    state = b.state()
    state["frontier"] = [state["nodes"][1]["id"], answer["id"]]
    _, _, decls_before = await snapshot(db_dsn, g)
    assert await store.save(g, state) == []
    assert await store.frontier(g) == state["frontier"]
    length, rows, decls_after = await snapshot(db_dsn, g)
    assert (length, len(rows), decls_after) == (6, 6, decls_before + 1)
    # And the next turn saves from there.
    b.answer("third")
    assert [n.sequence for n in await store.save(g, b.state())] == [7]


async def test_a_save_with_nothing_new_sees_another_writers_nodes(store: Any, db_dsn: str) -> None:
    """The save of a state this store already saved reads only the graph's length and
    frontier (flat in the graph's size); when another writer appended meanwhile, the
    stored graph is longer than the state: DivergedError, and nothing written."""
    g = new_graph("save")
    b = _session()
    await store.save(g, b.state())
    assert await store.save(g, b.state()) == []  # remembered: the cheap way
    other = await cwstore.connect(db_dsn, migrate_schema=False, max_size=1)
    try:
        c = _session()
        c.answer("another writer's node")
        await other.append(g, [c.nodes[-1]])
    finally:
        await other.close()
    before = await snapshot(db_dsn, g)
    with pytest.raises(DivergedError) as info:
        await store.save(g, b.state())
    assert info.value.position == 5
    assert await snapshot(db_dsn, g) == before
