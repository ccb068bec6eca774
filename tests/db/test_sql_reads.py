"""The SQL read side (``sql/schema/70_read_api.sql``) from plain SQL.

Every read function is called through psycopg exactly as a psql user would call it and
compared with an independent Python fold written here (SPEC 4 for the frontier, SPEC 5
for resource chains and semantic memory, SPEC 8 for as-of-time), not with a Python
store. Graphs: the runtime's example turn, a generated runtime-like graph (turns,
branches, long-lived heads, declared frontiers, out-of-order createdAt, U+0000 and
unsorted members in payloads) and a small hand-made branching graph. The example
queries of ``docs/sql.md`` run here too.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import EXAMPLE_FILE
from support.walks import depths

# The runtime's own example document, copied into the repository byte for byte.
EXAMPLE = EXAMPLE_FILE

Conn = psycopg.Connection[Any]


# ---------------------------------------------------------------------------------
# a graph as the test knows it, and the independent fold
# ---------------------------------------------------------------------------------


def compact(value: Any) -> str:
    """The JSON text sent for a value, hence the exact payload_text stored."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Node:
    seq: int
    id: str
    kind: str
    parents: list[str]
    payload: Any
    created_at: str
    resource_key: str | None = None

    def doc(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "parents": self.parents,
            "payload": self.payload,
            "createdAt": self.created_at,
        }
        if self.resource_key is not None:
            d["resourceKey"] = self.resource_key
        return d

    @property
    def payload_text(self) -> str:
        return compact(self.payload)

    @property
    def time(self) -> datetime:
        return datetime.fromisoformat(self.created_at.replace("Z", "+00:00"))


@dataclass
class Graph:
    """Nodes in sequence order, and the append batches that wrote them."""

    name: str
    nodes: list[Node] = field(default_factory=list)
    # (number of nodes in the batch, declared frontier or None)
    batches: list[tuple[int, list[str] | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_id: dict[str, Node] = {}

    def add(self, node: Node) -> None:
        assert node.seq == len(self.nodes) + 1
        self.nodes.append(node)
        self.by_id[node.id] = node

    def declarations(self) -> dict[int, list[str]]:
        """Declared frontiers by the graph length they were declared at (last wins)."""
        out: dict[int, list[str]] = {}
        length = 0
        for count, frontier in self.batches:
            length += count
            if frontier is not None:
                out[length] = list(frontier)
        return out

    def load(self, conn: Conn) -> None:
        done = 0
        for count, frontier in self.batches:
            batch = [n.doc() for n in self.nodes[done : done + count]]
            rows = conn.execute(
                "SELECT seq, id, written FROM cwstore.append_v1(%s, %s::json, %s, %s::json)",
                (self.name, compact(batch), done, None if frontier is None else compact(frontier)),
            ).fetchall()
            assert [(r[0], r[1], r[2]) for r in rows] == [
                (n.seq, n.id, True) for n in self.nodes[done : done + count]
            ]
            done += count
        assert done == len(self.nodes)

    def load_direct(self, conn: Conn) -> None:
        """Load through the import path (rows straight into cwstore.nodes, then
        declare_frontier_v1), which takes payloads holding \\u0000."""
        graph_id = conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (self.name,)).fetchone()
        assert graph_id is not None
        done = 0
        for count, frontier in self.batches:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,"
                    " created_at_text, resource_key) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            graph_id[0],
                            n.seq,
                            n.id,
                            n.kind,
                            n.parents,
                            n.payload_text,
                            n.created_at,
                            n.resource_key,
                        )
                        for n in self.nodes[done : done + count]
                    ],
                )
                if frontier is not None:
                    cur.execute(
                        "SELECT cwstore.declare_frontier_v1(%s, %s)", (graph_id[0], frontier)
                    )
            done += count


def leaves_frontier_alone(node: Node) -> bool:
    """SPEC 4: semantic nodes and parentless system nodes do not move the frontier."""
    return node.kind == "semantic" or (node.kind == "system" and not node.parents)


def fold_step(frontier: list[str], node: Node) -> list[str]:
    if leaves_frontier_alone(node):
        return frontier
    parents = set(node.parents)
    return [h for h in frontier if h not in parents] + [node.id]


def fold_frontiers(graph: Graph) -> list[list[str]]:
    """The frontier after every prefix 0..n: the fold, reset by each declaration."""
    declared = graph.declarations()
    frontier = list(declared.get(0, []))
    out = [frontier]
    for node in graph.nodes:
        frontier = fold_step(frontier, node)
        if node.seq in declared:
            frontier = list(declared[node.seq])
        out.append(frontier)
    return out


def key_chains(graph: Graph) -> dict[str, list[Node]]:
    chains: dict[str, list[Node]] = {}
    for node in graph.nodes:
        if node.resource_key is not None:
            chains.setdefault(node.resource_key, []).append(node)
    return chains


def heads_at(graph: Graph, s: int) -> list[tuple[str, int, int, str, str]]:
    """(key, version, seq, id, kind) of every key's head in the prefix 1..s."""
    out = []
    for key, chain in key_chains(graph).items():
        seqs = [n.seq for n in chain]
        i = bisect.bisect_right(seqs, s)
        if i:
            head = chain[i - 1]
            out.append((key, i, head.seq, head.id, head.kind))
    return sorted(out)


def semantic_at(graph: Graph, s: int) -> list[tuple[Any, ...]]:
    """(type, key, content, content_text, version, seq, id), by type then key."""
    out = []
    for key, version, seq, _id, kind in heads_at(graph, s):
        node = graph.nodes[seq - 1]
        if key.startswith("semantic:") and kind == "semantic":
            p = node.payload
            out.append(
                (
                    p["type"],
                    p["key"],
                    jsonb_view(p["content"]),
                    compact(p["content"]),
                    version,
                    seq,
                    node.id,
                )
            )
    return sorted(out, key=lambda r: (r[0], r[1]))


def jsonb_view(value: Any) -> Any:
    """A value as it comes back from jsonb: U+0000 shown as U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [jsonb_view(v) for v in value]
    if isinstance(value, dict):
        return {jsonb_view(k): jsonb_view(v) for k, v in value.items()}
    return value


def bfs(graph: Graph, start: str, up: bool) -> dict[str, int]:
    """Minimal depth of every ancestor (up) or descendant of start."""
    return depths({node.id: node.parents for node in graph.nodes}, start, up)


def seq_at_time(graph: Graph, t: datetime) -> int:
    return max((n.seq for n in graph.nodes if n.time <= t), default=0)


def projection(graph: Graph, s: int, frontier: list[str]) -> dict[str, Any]:
    """What cwstore.projection_v1(graph, s) returns, parsed (payloads embedded)."""
    nodes = graph.nodes[:s]

    def latest(kind: str) -> dict[str, Any] | None:
        found = [n for n in nodes if n.kind == kind]
        if not found:
            return None
        n = found[-1]
        return {"seq": n.seq, "id": n.id, "payload": json.loads(n.payload_text)}

    heads = heads_at(graph, s)
    return {
        "length": s,
        "frontier": [
            {
                "id": h,
                "kind": graph.by_id[h].kind,
                "seq": graph.by_id[h].seq,
                "payload": json.loads(graph.by_id[h].payload_text),
            }
            for h in frontier
        ],
        "resources": [
            {
                "key": key,
                "version": version,
                "seq": seq,
                "id": nid,
                "kind": kind,
                "payload": json.loads(graph.nodes[seq - 1].payload_text),
            }
            for key, version, seq, nid, kind in heads
            if not (key.startswith("semantic:") and kind == "semantic")
        ],
        "semantic": [
            {
                "key": f"semantic:{t}:{k}",
                "version": v,
                "seq": sq,
                "id": i,
                "payload": json.loads(graph.nodes[sq - 1].payload_text),
            }
            for t, k, _c, _ct, v, sq, i in semantic_at(graph, s)
        ],
        "latest_goal": latest("goal"),
        "latest_answer": latest("answer"),
        "counts": dict(Counter(n.kind for n in nodes)),
    }


# ---------------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------------


def example_graph(name: str = "example") -> Graph:
    doc = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    graph = Graph(name)
    for n in doc["nodes"]:
        graph.add(
            Node(
                n["sequence"],
                n["id"],
                n["kind"],
                n["parents"],
                n["payload"],
                n["createdAt"],
                n.get("resourceKey"),
            )
        )
    graph.batches = [(len(graph.nodes), doc["frontier"])]
    return graph


class Builder:
    """Builds a runtime-like graph: ids in the cw_ format (not content hashes; the
    database checks the shape only), parents sorted, resource chains linked."""

    def __init__(self, name: str, seed: int, start: datetime | None = None) -> None:
        self.graph = Graph(name)
        self.rng = random.Random(seed)
        self.time = start or datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
        self.frontier: list[str] = []
        self.key_heads: dict[str, str] = {}
        self.pending = 0

    def add(self, kind: str, parents: list[str], payload: Any, key: str | None = None) -> str:
        seq = len(self.graph.nodes) + 1
        nid = "cw_" + hashlib.sha256(f"{self.graph.name}:{seq}".encode()).hexdigest()[:24]
        ps = set(parents)
        if key is not None and key in self.key_heads:
            ps.add(self.key_heads[key])
        self.time += timedelta(milliseconds=self.rng.randint(0, 4))
        when = self.time
        if self.rng.random() < 0.02:  # a writer whose clock lags: createdAt out of order
            when -= timedelta(milliseconds=self.rng.randint(1, 30))
        node = Node(
            seq,
            nid,
            kind,
            sorted(ps),
            payload,
            when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            key,
        )
        self.graph.add(node)
        self.frontier = fold_step(self.frontier, node)
        if key is not None:
            self.key_heads[key] = nid
        self.pending += 1
        return nid

    def commit(self, frontier: list[str] | None = None) -> None:
        if frontier is not None:
            self.frontier = list(frontier)
        self.graph.batches.append((self.pending, frontier))
        self.pending = 0


def runtime_like(
    name: str,
    turns: int,
    seed: int = 7,
    turns_per_batch: int = 1,
    files: int = 40,
    memories: int = 25,
    nul: str = "",
    forever: bool = True,
) -> Graph:
    """Turns of goal, tool calls and results, resource versions, semantic memory,
    verifications, an answer. nul: a string put in some payloads (U+0000 for graphs
    loaded with load_direct). forever: start with a head no goal ever consumes, so one
    frontier span stays open for the whole graph."""
    b = Builder(name, seed)
    rng = b.rng
    system = b.add("system", [], "You are a StateWeave agent.\nTools: read_file, write_file")
    b.add("protocol_error", [system], {"error": "unsupported action", "raw": "???"})
    forever_id = b.graph.nodes[-1].id if forever else None
    if not forever:
        b.commit([])  # an empty frontier declared after the first batch
    types = ["memory", "preference", "wisdom", "artifact"]
    for turn in range(turns):
        context = [h for h in b.frontier if h == forever_id or rng.random() < 0.9]
        context = [h for h in context if h != forever_id]
        goal = b.add("goal", [*context, system], f"task {turn}: make the build green")
        head = goal
        for step in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.15:  # work branches: a second call from the same head stays open
                b.add(
                    "tool_call", [head], {"name": "bash_command", "args": {"cmd": "ls"}, "n": step}
                )
            call = b.add(
                "tool_call",
                [head, system],
                {
                    "name": "write_file",
                    "args": {"file_path": f"src/m{step}.ts", "content": "x\n"},
                    "raw": f"TOOL_CALL {step}",
                },
            )
            result = b.add(
                "tool_result",
                [call],
                {"tool": "write_file", "result": {"ok": True, "bytes": rng.randint(1, 9999)}},
            )
            head = result
            if rng.random() < 0.7:
                key = f"src/m{rng.randrange(files)}.ts"
                head = b.add(
                    "resource",
                    [result],
                    {
                        "path": key,
                        "operation": "write_file",
                        "bytes": 3,
                        "succeeded": True,
                        "note": nul + "\\",
                    },
                    key,
                )
            if rng.random() < 0.35:
                t, k = rng.choice(types), f"k{rng.randrange(memories)}"
                content: Any = rng.choice(
                    [
                        f"fact {turn}.{step}",
                        {"z": 1, "a": nul + "inside", "m": [1.5, None, True], "q": "\\u0000"},
                        ["é", "漢字", {"b": 2, "a": 1}],
                    ]
                )
                b.add(
                    "semantic",
                    [head],
                    {"type": t, "key": k, "content": content},
                    f"semantic:{t}:{k}",
                )
            if rng.random() < 0.2:
                head = b.add("verification", [head], {"method": "post_mutation_read"})
            if rng.random() < 0.1:
                head = b.add("inference", [head], {"text": "thinking\u2026"})
        b.add("answer", [head, goal], {"text": f"done {turn}"})
        if (turn + 1) % turns_per_batch == 0 or turn == turns - 1:
            r = rng.random()
            rest = [h for h in reversed(b.frontier) if h != forever_id]
            if r < 0.1 and len(rest) > 1:  # a declared frontier that differs: a head
                # dropped, the others reordered
                b.commit([*rest[:-1]] + ([forever_id] if forever_id else []))
            elif r < 0.3:
                b.commit(list(b.frontier))  # the same frontier, declared
            else:
                b.commit()
    return b.graph


def branching_graph(name: str = "branching") -> Graph:
    """Hand-made: branches, a frontier declared in the middle (with nodes, then again
    with none), goals whose work branched and goals whose work did not."""
    b = Builder(name, seed=1)
    s = b.add("system", [], "contract")
    g1 = b.add("goal", [s], "goal one: no branching")
    c1 = b.add("tool_call", [g1], {"name": "read_file"})
    r1 = b.add("tool_result", [c1], {"ok": True})
    a1 = b.add("answer", [r1], "answer one")
    b.commit()  # seq 1..5, frontier [a1]
    g2 = b.add("goal", [a1, s], "goal two: branches")
    x = b.add("tool_call", [g2], {"name": "x"})
    y = b.add("tool_call", [g2], {"name": "y"})  # frontier [x, y]
    z = b.add("inference", [g2], {"text": "z"})  # frontier [x, y, z]
    b.add("semantic", [x], {"type": "memory", "key": "k", "content": 1}, "semantic:memory:k")
    b.commit([z, x])  # seq 6..10, declared (reordered, y dropped)
    xr = b.add("tool_result", [x], {"ok": True})  # frontier [z, xr]
    b.commit([y, xr, z])  # seq 11, declared: y back, order changed
    b.commit([xr, y])  # no nodes, only a frontier, still at seq 11
    a2 = b.add("answer", [xr, y], "answer two")  # frontier [a2]
    b.commit()
    g3 = b.add("goal", [a2, s], "goal three: no branching")
    a3 = b.add("answer", [g3], "answer three")
    b.add("semantic", [a3], {"type": "memory", "key": "k", "content": 2}, "semantic:memory:k")
    b.commit()
    g4 = b.add("goal", [a3, s], "goal four: branches at its end")
    b.add("tool_call", [g4], {"name": "p"})
    b.add("tool_call", [g4], {"name": "q"})
    b.commit()
    return b.graph


# ---------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conn(db_dsn: str) -> Iterator[Conn]:
    with psycopg.connect(db_dsn, autocommit=True) as c:
        yield c


@pytest.fixture(scope="module")
def graphs(conn: Conn) -> dict[str, Graph]:
    loaded = {
        "example": example_graph(),
        "generated": runtime_like("generated", turns=120, seed=11),
        "batched": runtime_like("batched", turns=100, seed=5, turns_per_batch=7, forever=False),
        "branching": branching_graph(),
    }
    for g in loaded.values():
        g.load(conn)
    # This one goes through the import path (rows straight into cwstore.nodes).
    loaded["nul"] = runtime_like("nul", turns=40, seed=3, turns_per_batch=3, nul="\x00")
    loaded["nul"].load_direct(conn)
    return loaded


ALL = ["example", "generated", "batched", "branching", "nul"]


def rows(conn: Conn, query: str, *args: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, args).fetchall()


def projected(conn: Conn, graph: str, *s: int) -> Any:
    """cwstore.projection_v1(graph[, s]), parsed."""
    at = ", %s" if s else ""
    return json.loads(rows(conn, f"SELECT cwstore.projection_v1(%s{at})", graph, *s)[0][0])


# ---------------------------------------------------------------------------------
# frontier
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_frontier_at_every_sequence(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    expected = fold_frontiers(graph)
    n = len(graph.nodes)
    for s in range(n + 3):
        got = rows(conn, "SELECT position, seq, id, kind FROM cwstore.frontier_at(%s, %s)", name, s)
        want = expected[min(s, n)]
        assert got == [
            (i, graph.by_id[h].seq, h, graph.by_id[h].kind) for i, h in enumerate(want)
        ], (name, s)
    now = rows(conn, "SELECT id FROM cwstore.frontier_at(%s)", name)
    assert [r[0] for r in now] == expected[n]
    assert rows(conn, "SELECT id FROM cwstore.frontier_at(%s, NULL)", name) == now


def test_example_frontier_matches_document(conn: Conn) -> None:
    doc = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert [r[0] for r in rows(conn, "SELECT id FROM cwstore.frontier_at('example')")] == doc[
        "frontier"
    ]


def test_branching_frontier_around_declarations(conn: Conn, graphs: dict[str, Graph]) -> None:
    g = graphs["branching"]
    ids = {i: n.id for i, n in enumerate(g.nodes, start=1)}

    def at(s: int) -> list[int]:
        return [r[0] for r in rows(conn, "SELECT seq FROM cwstore.frontier_at('branching', %s)", s)]

    assert at(0) == [] and at(1) == []  # the contract leaves the frontier alone
    assert at(5) == [5]
    assert at(8) == [7, 8]  # two heads: work branched
    assert at(9) == [7, 8, 9]  # three heads, before the declaration
    assert at(10) == [9, 7]  # declared after seq 10: reordered, 8 dropped
    assert at(11) == [11, 8]  # declared twice at seq 11; the later declaration wins
    assert at(12) == [12]
    assert ids[12] == rows(conn, "SELECT id FROM cwstore.frontier_at('branching', 12)")[0][0]
    assert at(18) == [17, 18]
    decl = rows(
        conn,
        "SELECT seq, heads FROM cwstore.frontier_declarations d "
        "JOIN cwstore.graphs g USING (graph_id) WHERE g.name = 'branching' "
        "ORDER BY declaration_id",
    )
    assert decl == [
        (10, [ids[9], ids[7]]),
        (11, [ids[8], ids[11], ids[9]]),
        (11, [ids[11], ids[8]]),
    ]


def test_graphs_do_not_leak_into_each_other(conn: Conn, graphs: dict[str, Graph]) -> None:
    # Spans of every graph live in one GiST index; graph_id is a box coordinate.
    for name, g in graphs.items():
        mine = {n.seq for n in g.nodes}
        for s in (1, 5, len(g.nodes) // 2):
            got = {r[0] for r in rows(conn, "SELECT seq FROM cwstore.frontier_at(%s, %s)", name, s)}
            assert got <= mine


# ---------------------------------------------------------------------------------
# resource heads and semantic memory
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_heads_at_every_sequence(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    n = len(graph.nodes)
    for s in range(n + 2):
        got = rows(
            conn, "SELECT key, version, seq, id, kind FROM cwstore.heads_at(%s, %s)", name, s
        )
        assert got == heads_at(graph, min(s, n)), (name, s)
    assert rows(conn, "SELECT * FROM cwstore.heads_at(%s)", name) == heads_at(graph, n)


@pytest.mark.parametrize("name", ALL)
def test_semantic_at_every_sequence(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    n = len(graph.nodes)
    for s in range(n + 2):
        got = rows(
            conn,
            "SELECT type, key, content, content_text, version, seq, id "
            "FROM cwstore.semantic_at(%s, %s)",
            name,
            s,
        )
        assert got == semantic_at(graph, min(s, n)), (name, s)
    assert rows(conn, "SELECT * FROM cwstore.semantic_at(%s)", name) == semantic_at(graph, n)


def test_semantic_content_text_is_exact(conn: Conn, graphs: dict[str, Graph]) -> None:
    texts = {
        r[0]
        for r in rows(
            conn,
            "SELECT content_text FROM cwstore.graphs g, "
            "generate_series(0, g.length) s, "
            "cwstore.semantic_at(g.name, s) WHERE g.name = 'nul'",
        )
    }
    assert '{"z":1,"a":"\\u0000inside","m":[1.5,null,true],"q":"\\\\u0000"}' in texts


def test_json_member_text(conn: Conn) -> None:
    rng = random.Random(4)
    alphabet = ["\\", "\x00", "u", "0", '"', "a", "é", "\n", "/", "\\u0000"]
    for _ in range(300):
        value: Any = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.3:
            value = {"x": value, "y": [value, 1.25]}
        spaced = rng.random() < 0.5
        ascii_only = rng.random() < 0.5
        seps = (", ", ": ") if spaced else (",", ":")
        doc = {"type": "memory", "content": value, "key": "k"}
        text = json.dumps(doc, ensure_ascii=ascii_only, separators=seps)
        want = json.dumps(value, ensure_ascii=ascii_only, separators=seps)
        got = rows(conn, "SELECT cwstore._json_member_text(%s, 'content')", text)
        assert got == [(want,)], text
    assert rows(conn, "SELECT cwstore._json_member_text('{\"a\":1}', 'content')") == [(None,)]


def test_append_takes_nul(conn: Conn) -> None:
    node = Node(1, "cw_" + "b" * 24, "system", [], "a\x00b", "2026-12-02T08:43:04.123Z")
    conn.execute(
        "SELECT * FROM cwstore.append_v1('nul-append', %s::json)", (compact([node.doc()]),)
    )
    assert rows(conn, "SELECT payload_text FROM cwstore.node_view WHERE graph = 'nul-append'") == [
        ('"a\\u0000b"',)
    ]


@pytest.mark.parametrize("name", ALL)
def test_key_history(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    for key, chain in key_chains(graph).items():
        got = rows(
            conn,
            "SELECT version, seq, id, kind, created_at, payload, payload_text "
            "FROM cwstore.key_history(%s, %s)",
            name,
            key,
        )
        assert got == [
            (i, n.seq, n.id, n.kind, n.time, jsonb_view(n.payload), n.payload_text)
            for i, n in enumerate(chain, start=1)
        ]
    assert rows(conn, "SELECT * FROM cwstore.key_history(%s, 'no/such/key')", name) == []


def test_key_heads_first_seq(conn: Conn, graphs: dict[str, Graph]) -> None:
    # heads_at at s skips keys whose first_seq is after s: first_seq must be exact (the
    # first closed version's, or the head's for a key of one version).
    bad = rows(
        conn,
        "SELECT g.name, h.key, h.first_seq, min(v.node_seq) "
        "FROM cwstore.key_heads h JOIN cwstore.graphs g USING (graph_id) "
        "LEFT JOIN cwstore.key_versions v USING (graph_id, key) "
        "GROUP BY 1, 2, 3, h.head_seq HAVING h.first_seq <> least(min(v.node_seq), h.head_seq)",
    )
    assert bad == []
    assert rows(conn, "SELECT count(*) FROM cwstore.key_heads")[0][0] > 0


# ---------------------------------------------------------------------------------
# walks
# ---------------------------------------------------------------------------------


def sample(graph: Graph, k: int) -> list[Node]:
    if len(graph.nodes) <= k:
        return graph.nodes
    return random.Random(3).sample(graph.nodes, k)


@pytest.mark.parametrize("name", ALL)
def test_ancestors_and_descendants(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    for node in sample(graph, 40):
        for fn, up in (("ancestors", True), ("descendants", False)):
            want = bfs(graph, node.id, up)
            got = rows(
                conn, f"SELECT seq, id, kind, depth FROM cwstore.{fn}(%s, %s)", name, node.id
            )
            assert got == sorted(
                ((graph.by_id[i].seq, i, graph.by_id[i].kind, d) for i, d in want.items()),
                key=lambda r: (r[3], r[0]),
            )
            for limit in (0, 1, 2):
                got_limited = rows(
                    conn, f"SELECT id, depth FROM cwstore.{fn}(%s, %s, %s)", name, node.id, limit
                )
                assert sorted(got_limited) == sorted((i, d) for i, d in want.items() if d <= limit)


@pytest.mark.parametrize("name", ALL)
def test_path(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    rng = random.Random(9)
    pairs = [(rng.choice(graph.nodes), rng.choice(graph.nodes)) for _ in range(60)]
    pairs += [(graph.nodes[0], graph.nodes[-1]), (graph.nodes[-1], graph.nodes[-1])]
    for a, b in pairs:
        got = rows(
            conn, "SELECT step, seq, id, kind FROM cwstore.path(%s, %s, %s)", name, a.id, b.id
        )
        if a.id == b.id:
            assert got == [(0, a.seq, a.id, a.kind)]
            continue
        depth = bfs(graph, a.id, up=False).get(b.id)
        if depth is None:
            assert got == [], (a.seq, b.seq)
            continue
        assert len(got) == depth + 1
        assert [r[0] for r in got] == list(range(depth + 1))
        assert got[0][2] == a.id and got[-1][2] == b.id
        for (_, _, parent, _), (_, _, child, kind) in itertools.pairwise(got):
            assert parent in graph.by_id[child].parents
            assert graph.by_id[child].kind == kind


def test_path_prefers_small_sequences(conn: Conn, graphs: dict[str, Graph]) -> None:
    # In the example, the tool call at 3 reaches the answer at 14 through 4, 6 or 11:
    # three shortest paths; the one through the smallest sequence numbers is returned.
    got = rows(
        conn,
        "SELECT seq FROM cwstore.path('example', "
        "'cw_36000fe4bd9c6c766008d43c', 'cw_6d0d15b277b2afce06bbec28')",
    )
    assert [r[0] for r in got] == [3, 4, 14]
    # From a descendant to its ancestor there is no causal path.
    assert (
        rows(
            conn,
            "SELECT * FROM cwstore.path('example', "
            "'cw_6d0d15b277b2afce06bbec28', 'cw_36000fe4bd9c6c766008d43c')",
        )
        == []
    )


# ---------------------------------------------------------------------------------
# time, projection, views
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_seq_at_time(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    times = sorted({n.time for n in graph.nodes})
    probes = {times[0] - timedelta(days=1), times[-1] + timedelta(days=1)}
    for t in times if len(times) < 500 else random.Random(2).sample(times, 500):
        probes |= {t, t - timedelta(microseconds=1), t + timedelta(microseconds=500)}
    for t in sorted(probes):
        assert rows(conn, "SELECT cwstore.seq_at_time(%s, %s)", name, t) == [
            (seq_at_time(graph, t),)
        ], t
    assert rows(conn, "SELECT cwstore.seq_at_time(%s, NULL)", name) == [(len(graph.nodes),)]


def test_out_of_order_created_at_is_covered(graphs: dict[str, Graph]) -> None:
    # The generated graphs must exercise "last node whose createdAt <= T" (max seq),
    # which differs from "last node in time order" only when createdAt goes backwards.
    nodes = graphs["generated"].nodes
    assert any(b.time < a.time for a, b in itertools.pairwise(nodes))


@pytest.mark.parametrize("name", ALL)
def test_projection_every_sequence(conn: Conn, graphs: dict[str, Graph], name: str) -> None:
    graph = graphs[name]
    frontiers = fold_frontiers(graph)
    n = len(graph.nodes)
    step = 1 if n < 400 else 3
    for s in [*range(0, n + 2, step), n]:
        got = projected(conn, name, s)
        assert got == projection(graph, min(s, n), frontiers[min(s, n)]), (name, s)
    now = projected(conn, name)
    assert now == projection(graph, n, frontiers[n])


def test_projection_payload_texts_are_exact(conn: Conn, graphs: dict[str, Graph]) -> None:
    text = rows(conn, "SELECT cwstore.projection_v1('example')")[0][0]
    got = json.loads(text)
    g = graphs["example"]
    for item in got["resources"] + got["frontier"] + got["semantic"]:
        assert f'"id":"{item["id"]}"' in text
        assert g.by_id[item["id"]].payload_text in text  # embedded byte for byte
        assert item["payload"] == g.by_id[item["id"]].payload
    assert got["latest_answer"]["seq"] == 14 and got["latest_goal"]["seq"] == 2
    assert got["counts"] == {
        "system": 1,
        "goal": 1,
        "tool_call": 3,
        "tool_result": 3,
        "resource": 2,
        "semantic": 3,
        "verification": 2,
        "answer": 1,
    }


def test_views(conn: Conn, graphs: dict[str, Graph]) -> None:
    for name, g in graphs.items():
        got = rows(
            conn,
            "SELECT seq, id, kind, parents, payload, payload_text, created_at, "
            "created_at_text, resource_key FROM cwstore.node_view "
            "WHERE graph = %s ORDER BY seq",
            name,
        )
        assert got == [
            (
                n.seq,
                n.id,
                n.kind,
                n.parents,
                jsonb_view(n.payload),
                n.payload_text,
                n.time,
                n.created_at,
                n.resource_key,
            )
            for n in g.nodes
        ]
        edges = rows(
            conn,
            "SELECT child_seq, child_id, position, parent_seq, parent_id "
            "FROM cwstore.edge_view WHERE graph = %s "
            "ORDER BY child_seq, position",
            name,
        )
        assert edges == [
            (n.seq, n.id, i, g.by_id[p].seq, p) for n in g.nodes for i, p in enumerate(n.parents)
        ]
    recorded = rows(conn, "SELECT bool_and(recorded_at IS NOT NULL) FROM cwstore.node_view")
    assert recorded == [(True,)]


# ---------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM cwstore.frontier_at('nope')",
        "SELECT * FROM cwstore.heads_at('nope', 3)",
        "SELECT * FROM cwstore.semantic_at('nope')",
        "SELECT cwstore.projection_v1('nope')",
        "SELECT cwstore.seq_at_time('nope', now())",
        "SELECT * FROM cwstore.key_history('nope', 'k')",
        "SELECT * FROM cwstore.ancestors('nope', 'cw_000000000000000000000000')",
    ],
)
def test_unknown_graph_is_cw404(conn: Conn, graphs: dict[str, Graph], call: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(call)
    assert info.value.diag.sqlstate == "CW404"
    assert json.loads(info.value.diag.message_detail or "") == {"graph": "nope"}


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM cwstore.ancestors('example', 'cw_000000000000000000000000')",
        "SELECT * FROM cwstore.descendants('example', 'cw_000000000000000000000000')",
        "SELECT * FROM cwstore.path('example', 'cw_d7de9a401b11c5e1d558eaae', 'nope')",
    ],
)
def test_unknown_node_is_cw404(conn: Conn, graphs: dict[str, Graph], call: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(call)
    assert info.value.diag.sqlstate == "CW404"
    assert json.loads(info.value.diag.message_detail or "")["graph"] == "example"


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM cwstore.frontier_at('example', -1)",
        "SELECT * FROM cwstore.heads_at('example', -1)",
        "SELECT cwstore.projection_v1('example', -5)",
        "SELECT * FROM cwstore.ancestors('example', 'cw_6d0d15b277b2afce06bbec28', -1)",
    ],
)
def test_negative_arguments_are_refused(conn: Conn, graphs: dict[str, Graph], call: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(call)
    assert info.value.diag.sqlstate == "22023"


def test_empty_graph(conn: Conn) -> None:
    conn.execute("SELECT cwstore.ensure_graph_v1('empty')")
    assert rows(conn, "SELECT * FROM cwstore.frontier_at('empty')") == []
    assert rows(conn, "SELECT * FROM cwstore.heads_at('empty', 0)") == []
    assert rows(conn, "SELECT cwstore.seq_at_time('empty', now())") == [(0,)]
    assert projected(conn, "empty") == {
        "length": 0,
        "frontier": [],
        "resources": [],
        "semantic": [],
        "latest_goal": None,
        "latest_answer": None,
        "counts": {},
    }


def test_reads_see_one_snapshot_while_a_writer_appends(
    conn: Conn, graphs: dict[str, Graph], db_dsn: str
) -> None:
    # A read inside a REPEATABLE READ transaction keeps its state while another session
    # appends; a new statement outside it sees the append.
    g = Builder("live", seed=2)
    s = g.add("system", [], "c")
    g.add("goal", [s], "one")
    g.commit()
    g.graph.load(conn)
    with psycopg.connect(db_dsn) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        before = reader.execute("SELECT cwstore.projection_v1('live')").fetchone()
        nxt = g.graph.nodes[-1].id
        conn.execute(
            "SELECT * FROM cwstore.append_v1('live', %s::json)",
            (
                compact(
                    [
                        Node(
                            3, "cw_" + "a" * 24, "answer", [nxt], "two", "2026-12-03T00:00:00.000Z"
                        ).doc()
                    ]
                ),
            ),
        )
        again = reader.execute("SELECT cwstore.projection_v1('live')").fetchone()
        assert before == again and before is not None and json.loads(before[0])["length"] == 2
        reader.execute("COMMIT")
    assert rows(conn, "SELECT cwstore.projection_v1('live')::jsonb -> 'length'") == [(3,)]


# ---------------------------------------------------------------------------------
# the example queries of docs/sql.md
# ---------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def docs_query(title: str) -> str:
    """The first ```sql block after the heading containing title."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("### " + title)
    block = text.index("```sql", start) + len("```sql")
    return text[block : text.index("```", block)].strip().rstrip(";")


def test_docs_branched_goals(conn: Conn, graphs: dict[str, Graph]) -> None:
    query = docs_query("Goals whose work branched")
    for name in ALL:
        graph = graphs[name]
        frontiers = fold_frontiers(graph)
        goals = [n for n in graph.nodes if n.kind == "goal"]
        want = []
        for i, goal in enumerate(goals):
            end = goals[i + 1].seq if i + 1 < len(goals) else len(graph.nodes) + 1
            if any(len(frontiers[s]) >= 2 for s in range(goal.seq, end)):
                want.append((goal.seq, goal.id))
        got = rows(conn, query.replace("'demo'", f"'{name}'"))
        assert [(r[0], r[1]) for r in got] == want, name
    got = rows(conn, query.replace("'demo'", "'branching'"))
    assert [r[0] for r in got] == [6, 16]


def test_docs_tool_results_behind_an_answer(conn: Conn, graphs: dict[str, Graph]) -> None:
    query = docs_query("Which tool results did this answer depend on")
    got = rows(conn, query.replace("'demo'", "'example'"))
    assert [r[0] for r in got] == [4, 7, 12]


def test_docs_what_changed_a_key(conn: Conn, graphs: dict[str, Graph]) -> None:
    query = docs_query("What changed key")
    got = rows(conn, query.replace("'demo'", "'example'"))
    assert [(r[0], r[1]) for r in got] == [(1, 5), (2, 10)]


def test_docs_belief_at_a_sequence(conn: Conn, graphs: dict[str, Graph]) -> None:
    query = docs_query("What did the agent believe")
    query = query.replace("'demo'", "'branching'").replace("'config.port'", "'k'")
    assert [r[0] for r in rows(conn, query.replace("120", "9"))] == []
    assert [r[0] for r in rows(conn, query.replace("120", "13"))] == [1]
    assert [r[0] for r in rows(conn, query.replace("120", "16"))] == [2]
