"""Schema and import/export: the contract every client keeps (SPEC sections 1, 4, 6, 8).

Run once per client (``store`` is parametrized, see ``conftest.py``). What a runtime
wrote comes back byte for byte: field order, payload member order, frontier order,
U+0000, astral characters, 1e21, 2**53-1, deep nesting. Prefixes as of a sequence or a
time are the runtime's documents too. A document that breaks any safeguard of SPEC
section 6 is refused with that code and nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from support import EXAMPLE_FILE
from support.documents import GraphBuilder, generate_session, odd_values, reseal

from cwstore import (
    AgentState,
    GraphExistsError,
    InputError,
    UnknownGraphError,
    ValidationError,
    Vocabulary,
    _jsontext,
)
from cwstore.document import fold_frontier, validate

EXAMPLE_PATH = EXAMPLE_FILE
"""A document the runtime wrote (one turn, 16 nodes), as it wrote it (indented)."""

EXAMPLE_TEXT = EXAMPLE_PATH.read_text(encoding="utf-8")

Stored = Callable[[str], tuple[int | None, int]]


def example() -> dict[str, Any]:
    """A fresh parsed copy of the runtime's example document (member order kept)."""
    return _jsontext.loads(EXAMPLE_TEXT)  # type: ignore[no-any-return]


def compact(doc: Any) -> str:
    """The document as the runtime's ``JSON.stringify`` writes it."""
    return _jsontext.dumps(doc)


def prefix_doc(doc: dict[str, Any], s: int) -> dict[str, Any]:
    """The first ``s`` nodes with the frontier SPEC section 8 gives: the declared one at
    the document's end, else the fold of section 4 over the prefix."""
    nodes = doc["nodes"][:s]
    frontier = doc["frontier"] if s == len(doc["nodes"]) else fold_frontier(nodes)
    return {"version": 1, "nodes": nodes, "frontier": list(frontier)}


# --- the documents ------------------------------------------------------------------


def odd_state() -> dict[str, Any]:
    """Every odd value of :func:`support.documents.odd_values` in every payload position
    (inside arguments and results, as a resource payload, as semantic content, and as
    the whole payload), plus null, a long string and backslashes next to U+0000."""
    b = GraphBuilder()
    b.system("odd payloads")
    b.goal("store every odd value exactly")
    values = [
        *odd_values(),
        None,
        "x" * 300_000,
        "literal \\u0000 then a real \u0000 after a backslash \\\u0000 end",
        {"z": {"y": [1, {"B": None, "a": "\u0000"}]}, "A": 1.5, "a": -0.0001},
    ]
    for i, value in enumerate(values):
        call = b.tool_call("write_file", {"file_path": f"odd/{i}.json", "content": value})
        res = b.tool_result("write_file", {"ok": True, "echo": value}, parents=[call["id"]])
        b.resource(f"odd/{i}.json", value, parents=[res["id"]])
        if len(_jsontext.dumps(value)) <= 100_000:  # the runtime's limit for content
            b.semantic("memory", f"odd.{i}", value, parents=[res["id"]])
        b.inference(value)
    # resource keys are exported through PostgreSQL's to_json: escapes must match JS
    for key in ('src/"quoted"\\back\tslash\u0001\u001f\u007f.ts', "src/\u00e9\U0001f600\u2028.ts"):
        for version in (1, 2):
            b.resource(key, {"version": version})
    b.answer("all odd values stored")
    return b.state()


def rejoined_state() -> dict[str, Any]:
    """A runtime-faithful document whose declared frontier is not the fold's: the same
    tool call appended again (existing content) moves the runtime's frontier."""
    b = GraphBuilder()
    b.system("contract")
    goal = b.goal("read a file twice")
    call = b.tool_call("read_file", {"file_path": "a.txt"}, parents=[goal["id"]])
    b.tool_result("read_file", {"content": "A"}, parents=[call["id"]])
    again = b.tool_call("read_file", {"file_path": "a.txt"}, parents=[goal["id"]])
    assert again["id"] == call["id"] and len(b) == 4
    doc = b.state()
    assert doc["frontier"] != fold_frontier(doc["nodes"])
    return doc


def branched_state() -> dict[str, Any]:
    """Two open branches, with the frontier declared in the other order."""
    b = GraphBuilder()
    b.system("contract")
    goal = b.goal("two branches")
    b.tool_call("read_file", {"file_path": "a.txt"}, parents=[goal["id"]])
    b.tool_call("read_file", {"file_path": "b.txt"}, parents=[goal["id"]])
    doc = b.state()
    assert len(doc["frontier"]) == 2
    doc["frontier"].reverse()
    return doc


def _declared(frontier: Callable[[dict[str, Any]], list[str]]) -> Callable[[], dict[str, Any]]:
    """A generated session whose declared frontier is replaced (checked only for
    references, SPEC section 4)."""

    def make() -> dict[str, Any]:
        doc = generate_session(12, 4)
        doc["frontier"] = frontier(doc)
        return doc

    return make


def foreign_times_state() -> dict[str, Any]:
    """createdAt in other zones, lower-case ``t``/``z``, no fraction, many digits: valid
    RFC 3339 that must come back byte for byte (and be compared as instants)."""
    b = GraphBuilder()
    times = [
        "2026-12-02T14:38:31.376Z",
        "2026-12-02T20:08:31.380+05:30",
        "2026-12-02t14:38:31.390z",
        "2026-12-02T09:38:31.4-05:00",
        "2026-12-02T14:38:31.4000004Z",
        "2026-12-02T14:38:32Z",
        "2026-12-02T14:38:32.5-00:00",
    ]
    b.append("system", "contract", [], advance=False, created_at=times[0])
    for i, at in enumerate(times[1:]):
        b.append("goal" if i == 0 else "inference", f"step {i}", created_at=at)
    return b.state()


GENERATED: dict[str, Callable[[], dict[str, Any]]] = {
    "session-1": lambda: generate_session(1, 6),
    "session-2-odd": lambda: generate_session(2, 10, odd_payloads=True),
    "session-3-linear": lambda: generate_session(3, 8, branches=False),
    "session-4-odd-few-keys": lambda: generate_session(
        4, 12, odd_payloads=True, keys=2, semantic_keys=2
    ),
    "odd-payloads": odd_state,
    "declared-frontier-differs": rejoined_state,
    "declared-frontier-order": branched_state,
    "declared-frontier-empty": _declared(lambda d: []),
    "declared-frontier-old-heads": _declared(
        lambda d: [d["nodes"][1]["id"], d["nodes"][0]["id"], *d["frontier"]]
    ),
    "foreign-timestamps": foreign_times_state,
}
STATES: dict[str, Callable[[], dict[str, Any]]] = {"runtime-example": example, **GENERATED}


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def test_the_documents_exercise_what_they_claim() -> None:
    """Guard for the corpus itself: branches, resource versions, superseded semantic
    keys, verifications, protocol errors and every odd payload appear in it."""
    docs = [f() for f in STATES.values()]
    for doc in docs:
        assert validate(doc) == []
    nodes = [n for doc in docs for n in doc["nodes"]]
    kinds = {n["kind"] for n in nodes}
    assert {"verification", "protocol_error", "inference", "resource", "semantic"} <= kinds
    assert any(
        max(len(fold_frontier(d["nodes"][:s])) for s in range(len(d["nodes"]) + 1)) >= 2
        for d in docs
    ), "no branch"
    for prefix in ("semantic:", ""):
        versions: dict[str, int] = {}
        for doc in docs:
            for n in doc["nodes"]:
                key = n.get("resourceKey")
                if key and key.startswith(prefix) and (prefix or not key.startswith("semantic:")):
                    versions[f"{id(doc)}{key}"] = versions.get(f"{id(doc)}{key}", 0) + 1
        assert max(versions.values()) >= 3, f"no key {prefix or 'resource'} with 3 versions"
    text = "".join(compact(d) for d in docs)
    for needle in (
        "\\u0000",
        "\U0001f600",
        "\U0010ffff",
        "1e+21",
        "9007199254740991",
        "-9007199254740991",
        '"apiKeyRef"',
        '"api_key_ref"',
        '"Zeta"',
    ):
        assert needle in text, needle
    assert max(_depth(n["payload"]) for n in nodes) >= 40


# --- round trip -----------------------------------------------------------------------


async def test_example_round_trip_is_byte_exact(store: Any, graph: str) -> None:
    doc = example()
    assert await store.import_state(graph, doc) == 16
    out = await store.export_json(graph)
    assert out == compact(doc)
    with EXAMPLE_PATH.open(encoding="utf-8") as f:
        assert out == json.dumps(json.load(f), separators=(",", ":"), ensure_ascii=False)
    assert await store.length(graph) == 16
    assert await store.frontier(graph) == doc["frontier"]


@pytest.mark.parametrize("form", ["text", "bytes", "model"])
async def test_example_imports_from_every_input_form(store: Any, graph: str, form: str) -> None:
    given: Any = {
        "text": EXAMPLE_TEXT,
        "bytes": EXAMPLE_TEXT.encode("utf-8"),
        "model": AgentState.from_json(EXAMPLE_TEXT),
    }[form]
    assert await store.import_state(graph, given) == 16
    assert await store.export_json(graph) == compact(example())


@pytest.mark.parametrize("name", list(GENERATED))
async def test_generated_round_trip_is_byte_exact(store: Any, graph: str, name: str) -> None:
    doc = GENERATED[name]()
    expected = compact(doc)
    assert await store.import_state(graph, doc) == len(doc["nodes"])
    assert await store.export_json(graph) == expected
    assert await store.length(graph) == len(doc["nodes"])
    assert await store.frontier(graph) == doc["frontier"]
    # the export is what the runtime reads back: valid, and equal as parsed JSON too
    back = _jsontext.loads(await store.export_json(graph))
    assert validate(back) == []
    assert back == doc


@pytest.mark.parametrize("name", list(STATES))
async def test_replay_equals_the_input(store: Any, graph: str, name: str) -> None:
    doc = STATES[name]()
    await store.import_state(graph, doc)
    state = await store.replay(graph)
    assert isinstance(state, AgentState)
    assert validate(state) == []
    assert state.to_obj() == doc
    assert state.to_json() == compact(doc)


# --- as of a sequence or a time --------------------------------------------------------


@pytest.mark.parametrize("name", list(STATES))
async def test_every_prefix_exports_as_the_runtime_would_write_it(
    store: Any, graph: str, name: str
) -> None:
    doc = STATES[name]()
    await store.import_state(graph, doc)
    n = len(doc["nodes"])
    for s in range(n + 1):
        want = prefix_doc(doc, s)
        out = await store.export_json(graph, as_of=s)
        assert out == compact(want), f"as_of={s}"
        assert validate(_jsontext.loads(out)) == [], f"as_of={s}"
    assert await store.export_json(graph, as_of=n) == compact(doc)
    for s in (0, n // 2, n - 1, n):
        state = await store.replay(graph, as_of=s)
        assert state.to_json() == compact(prefix_doc(doc, s)), f"replay as_of={s}"


async def test_as_of_zero_is_the_empty_document(store: Any, graph: str) -> None:
    await store.import_state(graph, example())
    assert await store.export_json(graph, as_of=0) == '{"version":1,"nodes":[],"frontier":[]}'
    assert (await store.replay(graph, as_of=0)).to_obj() == {
        "version": 1,
        "nodes": [],
        "frontier": [],
    }


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize(
    ("moment", "count"),
    [
        (_t("2026-12-02T14:38:31.386Z"), 7),
        (_t("2026-12-02T14:38:31.376Z"), 1),
        (_t("2026-12-02T14:38:31.375999Z"), 0),
        (_t("2026-12-02T14:38:31.3869Z"), 7),
        (_t("2026-12-02T14:38:31.528Z"), 14),
        (_t("2026-12-02T14:38:31.529Z"), 16),
        (_t("2027-01-01T00:00:00Z"), 16),
        # the same instant as 14:38:31.386Z, in another zone
        (datetime(2026, 12, 2, 16, 38, 31, 386000, tzinfo=timezone(timedelta(hours=2))), 7),
    ],
)
async def test_example_as_of_a_time(store: Any, graph: str, moment: datetime, count: int) -> None:
    doc = example()
    await store.import_state(graph, doc)
    out = await store.export_json(graph, as_of=moment)
    assert out == compact(prefix_doc(doc, count))
    assert len(_jsontext.loads(out)["nodes"]) == count
    assert (await store.replay(graph, as_of=moment)).to_json() == out


async def test_generated_as_of_every_node_time(store: Any, graph: str) -> None:
    doc = generate_session(5, 5, odd_payloads=True)  # createdAt one millisecond apart
    await store.import_state(graph, doc)
    for s, node in enumerate(doc["nodes"], start=1):
        moment = _t(node["createdAt"])
        assert await store.export_json(graph, as_of=moment) == compact(prefix_doc(doc, s))
        between = moment + timedelta(microseconds=500)
        assert await store.export_json(graph, as_of=between) == compact(prefix_doc(doc, s))


@pytest.mark.parametrize(
    ("moment", "count"),
    [
        ("2026-12-02T14:38:31.375999Z", 0),
        ("2026-12-02T14:38:31.376Z", 1),
        ("2026-12-02T14:38:31.379999Z", 1),
        ("2026-12-02T14:38:31.380Z", 2),  # written as 20:08:31.380+05:30
        ("2026-12-02T14:38:31.390Z", 3),
        ("2026-12-02T14:38:31.399999Z", 3),  # node 4 is written as 09:38:31.4-05:00
        ("2026-12-02T14:38:31.400001Z", 5),
        ("2026-12-02T14:38:32Z", 6),
        ("2026-12-02T14:38:32.500Z", 7),
    ],
)
async def test_as_of_a_time_compares_instants(
    store: Any, graph: str, moment: str, count: int
) -> None:
    doc = foreign_times_state()
    await store.import_state(graph, doc)
    out = await store.export_json(graph, as_of=_t(moment))
    assert out == compact(prefix_doc(doc, count))


async def test_as_of_a_time_below_a_microsecond(store: Any, graph: str) -> None:
    """createdAt 14:38:31.4000004Z is later than T = 14:38:31.400000Z, so the prefix as
    of T stops before it (PostgreSQL keeps microseconds: the store must not round the
    node's time onto T)."""
    doc = foreign_times_state()
    assert doc["nodes"][4]["createdAt"] == "2026-12-02T14:38:31.4000004Z"
    await store.import_state(graph, doc)
    out = await store.export_json(graph, as_of=_t("2026-12-02T14:38:31.400000Z"))
    assert len(_jsontext.loads(out)["nodes"]) == 4
    assert out == compact(prefix_doc(doc, 4))


async def test_as_of_refusals(store: Any, graph: str) -> None:
    await store.import_state(graph, example())
    for bad in (17, 1000, -1, True, 1.5, "3"):
        with pytest.raises(InputError):
            await store.export_json(graph, as_of=bad)
        with pytest.raises(InputError):
            await store.replay(graph, as_of=bad)
    with pytest.raises(InputError):
        await store.export_json(graph, as_of=datetime(2026, 12, 2, 14, 38, 31))  # no zone


async def test_unknown_graph(store: Any, graph: str, stored: Stored) -> None:
    for call in (
        store.export_json(graph),
        store.export_json(graph, as_of=0),
        store.export_json(graph, as_of=datetime.now(UTC)),
        store.replay(graph),
        store.length(graph),
        store.frontier(graph),
    ):
        with pytest.raises(UnknownGraphError) as info:
            await call
        assert info.value.graph == graph
    assert stored(graph) == (None, 0)  # reading does not create the graph


# --- import safeguards ------------------------------------------------------------------

Break = Callable[[dict[str, Any]], Any]
MISSING = "cw_" + "0" * 24


def _edit(fn: Callable[[dict[str, Any]], Any], **reseal_args: Any) -> Break:
    """Apply ``fn`` to the document, then recompute ids (unless told not to) so that
    only the broken rule is broken."""

    def run(doc: dict[str, Any]) -> dict[str, Any]:
        fn(doc)
        if reseal_args.get("reseal", True):
            reseal(
                doc,
                keep_ids=reseal_args.get("keep_ids", ()),
                keep_parent_order=reseal_args.get("keep_parent_order", ()),
            )
        return doc

    return run


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def fn(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return fn


def _parents(i: int, make: Callable[[dict[str, Any], list[str]], list[str]]) -> Any:
    def fn(doc: dict[str, Any]) -> None:
        doc["nodes"][i]["parents"] = make(doc, list(doc["nodes"][i]["parents"]))

    return fn


def _delete(i: int, field: str) -> Callable[[dict[str, Any]], None]:
    def fn(doc: dict[str, Any]) -> None:
        del doc["nodes"][i][field]

    return fn


def _nan_text(doc: dict[str, Any]) -> str:
    doc["nodes"][13]["payload"] = {"score": "@@NAN@@"}
    return compact(doc).replace('"@@NAN@@"', "NaN")


def _semantic_type(doc: dict[str, Any]) -> None:
    node = doc["nodes"][15]
    node["payload"]["type"] = "Preference"
    node["resourceKey"] = "semantic:Preference:code-style"


def _duplicate(doc: dict[str, Any]) -> None:
    copy_ = copy.deepcopy(doc["nodes"][1])
    copy_["sequence"] = 17
    doc["nodes"].append(copy_)


def _renumber(doc: dict[str, Any]) -> None:
    for n in doc["nodes"]:
        n["sequence"] -= 1


def _chain(doc: dict[str, Any]) -> None:
    head = doc["nodes"][4]["id"]  # version 1 of src/config.js
    assert head in doc["nodes"][9]["parents"]
    doc["nodes"][9]["parents"].remove(head)


def _self_parent(doc: dict[str, Any]) -> None:
    node = doc["nodes"][3]
    node["parents"] = sorted([*node["parents"], node["id"]])


# (case, break, the codes the violations must have, index of the node that breaks it)
SAFEGUARDS: list[tuple[str, Break, set[str], int | None]] = [
    ("version-2", _edit(_set(("version",), 2)), {"version"}, None),
    ("version-string", _edit(_set(("version",), "1")), {"version"}, None),
    ("kind", _edit(_set(("nodes", 13, "kind"), "final")), {"kind"}, 13),
    (
        "semantic-resource-key",
        _edit(_set(("nodes", 7, "resourceKey"), "semantic:memory:other")),
        {"semantic_payload"},
        7,
    ),
    (
        "semantic-extra-field",
        _edit(_set(("nodes", 15, "payload", "extra"), 1)),
        {"semantic_payload"},
        15,
    ),
    (
        "semantic-key-malformed",
        _edit(
            lambda d: (
                _set(("nodes", 15, "payload", "key"), "Code Style")(d),
                _set(("nodes", 15, "resourceKey"), "semantic:preference:Code Style")(d),
            )
        ),
        {"semantic_payload"},
        15,
    ),
    ("semantic-type", _edit(_semantic_type), {"semantic_type"}, 15),
    ("duplicate-id", _edit(_duplicate, reseal=False), {"duplicate_id"}, 16),
    ("missing-parent", _edit(_parents(8, lambda d, p: [*p, MISSING])), {"missing_parent"}, 8),
    (
        "parent-unsorted",
        _edit(_parents(5, lambda d, p: p[::-1]), keep_parent_order=[5]),
        {"parent_order"},
        5,
    ),
    (
        "parent-later",
        _edit(_parents(14, lambda d, p: [*p, d["nodes"][15]["id"]])),
        {"parent_order"},
        14,
    ),
    ("parent-repeated", _edit(_parents(3, lambda d, p: [p[0], p[0]])), {"parent_order"}, 3),
    ("parent-self", _edit(_self_parent, keep_ids=[3]), {"parent_order", "identity"}, 3),
    (
        "identity-payload",
        _edit(_set(("nodes", 13, "payload"), "changed"), reseal=False),
        {"identity"},
        13,
    ),
    (
        "identity-malformed-id",
        _edit(_set(("nodes", 15, "id"), "node-16"), reseal=False),
        {"identity"},
        15,
    ),
    ("sequence-one-off", _edit(_set(("nodes", 3, "sequence"), 5), reseal=False), {"sequence"}, 3),
    ("sequence-from-zero", _edit(_renumber, reseal=False), {"sequence"}, 0),
    (
        "created-at-no-zone",
        _edit(_set(("nodes", 2, "createdAt"), "2026-12-02T14:38:31.383"), reseal=False),
        {"created_at"},
        2,
    ),
    (
        "created-at-space",
        _edit(_set(("nodes", 2, "createdAt"), "2026-12-02 14:38:31.383Z"), reseal=False),
        {"created_at"},
        2,
    ),
    (
        "created-at-month-13",
        _edit(_set(("nodes", 2, "createdAt"), "2026-13-02T14:38:31.383Z"), reseal=False),
        {"created_at"},
        2,
    ),
    ("resource-chain", _edit(_chain), {"resource_chain"}, 9),
    (
        "frontier-missing",
        _edit(_set(("frontier",), [MISSING]), reseal=False),
        {"frontier_reference"},
        None,
    ),
    (
        "frontier-twice",
        _edit(lambda d: _set(("frontier",), d["frontier"] * 2)(d), reseal=False),
        {"frontier_reference"},
        None,
    ),
    ("unrepresentable-nan", _nan_text, {"unrepresentable"}, 13),
    (
        "unrepresentable-infinity",
        _edit(_set(("nodes", 13, "payload"), {"x": [float("inf")]}), reseal=False),
        {"unrepresentable"},
        13,
    ),
    (
        "unrepresentable-lone-surrogate",
        _edit(_set(("nodes", 2, "payload", "args", "content"), "a\ud800b"), reseal=False),
        {"unrepresentable"},
        2,
    ),
    (
        "unrepresentable-big-integer",
        _edit(_set(("nodes", 3, "payload", "result", "bytes"), 2**53 + 1), reseal=False),
        {"unrepresentable"},
        3,
    ),
    ("shape-unknown-field", _edit(_set(("nodes", 4, "extra"), 1), reseal=False), {"shape"}, 4),
    ("shape-missing-field", _edit(_delete(13, "createdAt"), reseal=False), {"shape"}, 13),
    (
        "shape-null-resource-key",
        _edit(_set(("nodes", 2, "resourceKey"), None), reseal=False),
        {"shape"},
        2,
    ),
    (
        "shape-parents-not-a-list",
        _edit(_set(("nodes", 1, "parents"), "cw_d7de9a401b11c5e1d558eaae"), reseal=False),
        {"shape"},
        1,
    ),
    ("shape-top-level-field", _edit(_set(("extra",), True), reseal=False), {"shape"}, None),
    (
        "shape-nodes-not-a-list",
        _edit(lambda d: (_set(("nodes",), {})(d), _set(("frontier",), [])(d)), reseal=False),
        {"shape"},
        None,
    ),
]
SAFEGUARD_CODES = {
    "version", "kind", "semantic_payload", "semantic_type", "duplicate_id", "missing_parent",
    "parent_order", "identity", "sequence", "created_at", "resource_chain",
    "frontier_reference", "unrepresentable", "shape",
}  # fmt: skip


def test_every_code_of_spec_section_6_has_a_case() -> None:
    assert set().union(*(codes for _, _, codes, _ in SAFEGUARDS)) == SAFEGUARD_CODES


@pytest.mark.parametrize(
    ("brk", "codes", "index"),
    [pytest.param(b, c, i, id=name) for name, b, c, i in SAFEGUARDS],
)
async def test_safeguard_refuses_and_writes_nothing(
    store: Any,
    graph: str,
    stored: Stored,
    brk: Break,
    codes: set[str],
    index: int | None,
) -> None:
    broken = brk(example())
    with pytest.raises(ValidationError) as info:
        await store.import_state(graph, broken)
    found = info.value.codes
    assert set(found) == codes, info.value.violations
    first = sorted(codes)[0]
    assert any(v.code == first and v.index == index for v in info.value.violations), (
        info.value.violations
    )
    assert stored(graph) in ((None, 0), (0, 0))


async def test_every_violation_is_reported(store: Any, graph: str, stored: Stored) -> None:
    doc = example()
    doc["version"] = 3
    doc["nodes"][2]["createdAt"] = "yesterday"
    doc["nodes"][13]["kind"] = "final"
    doc["nodes"][4]["extra"] = 1
    doc["frontier"] = [MISSING]
    with pytest.raises(ValidationError) as info:
        await store.import_state(graph, doc)
    assert {"version", "created_at", "kind", "shape", "frontier_reference"} <= set(info.value.codes)
    assert stored(graph) in ((None, 0), (0, 0))


async def test_import_refused_by_a_violation_leaves_an_empty_graph_empty(
    store: Any, graph: str, stored: Stored
) -> None:
    await store.import_state(graph, {"version": 1, "nodes": [], "frontier": []})
    broken = example()
    broken["nodes"][13]["payload"] = "changed"
    with pytest.raises(ValidationError):
        await store.import_state(graph, broken)
    assert stored(graph) == (0, 0)
    assert await store.export_json(graph) == '{"version":1,"nodes":[],"frontier":[]}'


# --- existing graphs --------------------------------------------------------------------


async def test_import_into_a_non_empty_graph_is_refused(
    store: Any, graph: str, stored: Stored
) -> None:
    doc = example()
    await store.import_state(graph, doc)
    for again in (doc, generate_session(6, 2)):
        with pytest.raises(GraphExistsError) as info:
            await store.import_state(graph, again)
        assert (info.value.graph, info.value.length) == (graph, 16)
    assert stored(graph) == (16, 16)
    assert await store.export_json(graph) == compact(doc)


async def test_racing_imports_into_one_new_graph(store: Any, graph: str, stored: Stored) -> None:
    """Two imports of different documents into the same new graph at once: one wins
    whole, the other is refused with GraphExistsError, nothing is mixed."""
    docs = [example(), generate_session(13, 6)]
    for _ in range(3):
        name = f"{graph}-{_}"
        results = await asyncio.gather(
            *(store.import_state(name, d) for d in docs), return_exceptions=True
        )
        won = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1, results
        assert isinstance(lost[0], GraphExistsError), lost[0]
        winner = docs[won[0]]
        assert await store.export_json(name) == compact(winner)
        assert stored(name) == (len(winner["nodes"]),) * 2


async def test_large_session_round_trip(store: Any, graph: str) -> None:
    doc = generate_session(11, 150, odd_payloads=True)
    n = len(doc["nodes"])
    assert n > 1500
    assert await store.import_state(graph, doc) == n
    assert await store.export_json(graph) == compact(doc)
    for s in (1, n // 3, n - 1):
        assert await store.export_json(graph, as_of=s) == compact(prefix_doc(doc, s))


async def test_import_into_an_existing_empty_graph(store: Any, graph: str, stored: Stored) -> None:
    assert await store.import_state(graph, {"version": 1, "nodes": [], "frontier": []}) == 0
    assert stored(graph) == (0, 0)
    assert await store.export_json(graph) == '{"version":1,"nodes":[],"frontier":[]}'
    doc = example()
    assert await store.import_state(graph, doc) == 16
    assert await store.export_json(graph) == compact(doc)
    assert stored(graph) == (16, 16)


async def test_import_into_a_graph_created_by_sql(
    store: Any, graph: str, stored: Stored, conn: Any
) -> None:
    conn.execute("SELECT cwstore.ensure_graph_v1(%s)", (graph,))
    assert stored(graph) == (0, 0)
    doc = generate_session(7, 3)
    assert await store.import_state(graph, doc) == len(doc["nodes"])
    assert await store.export_json(graph) == compact(doc)


# --- vocabulary ---------------------------------------------------------------------------

CUSTOM = Vocabulary.from_node_types(
    [
        {"name": "decision", "description": "a choice made and why"},
        {"name": "memory", "description": "a fact worth keeping"},
    ]
)


def _decisions() -> dict[str, Any]:
    doc = generate_session(8, 4, semantic_types=("decision", "memory"))
    assert any(n["kind"] == "semantic" and n["payload"]["type"] == "decision" for n in doc["nodes"])
    return doc


def _semantic_indexes(doc: dict[str, Any], outside: set[str]) -> set[int]:
    return {
        i
        for i, n in enumerate(doc["nodes"])
        if n["kind"] == "semantic" and n["payload"]["type"] in outside
    }


async def test_builtin_vocabulary_accepts_the_runtime_types(store: Any, graph: str) -> None:
    doc = example()
    await store.import_state(graph, doc, vocabulary=Vocabulary.builtin())
    assert await store.export_json(graph) == compact(doc)
    info = {g.name: g for g in await store.graphs()}[graph]
    assert info.vocabulary == ("memory", "preference", "wisdom", "artifact")


async def test_builtin_vocabulary_refuses_an_unknown_type(
    store: Any, graph: str, stored: Stored
) -> None:
    doc = _decisions()
    with pytest.raises(ValidationError) as info:
        await store.import_state(graph, doc, vocabulary=Vocabulary.builtin())
    assert set(info.value.codes) == {"semantic_type"}
    assert {v.index for v in info.value.violations} == _semantic_indexes(doc, {"decision"})
    assert stored(graph) in ((None, 0), (0, 0))


async def test_custom_vocabulary(store: Any, graph: str, stored: Stored) -> None:
    doc = _decisions()
    await store.import_state(graph, doc, vocabulary=CUSTOM)
    assert await store.export_json(graph) == compact(doc)
    info = {g.name: g for g in await store.graphs()}[graph]
    assert info.vocabulary == ("decision", "memory")

    other = f"{graph}-example"
    runtime = example()  # memory, artifact, preference: the last two are not in CUSTOM
    with pytest.raises(ValidationError) as refused:
        await store.import_state(other, runtime, vocabulary=CUSTOM)
    assert set(refused.value.codes) == {"semantic_type"}
    assert {v.index for v in refused.value.violations} == {14, 15}
    assert stored(other) in ((None, 0), (0, 0))


async def test_dynamic_vocabulary_is_the_default(store: Any, graph: str) -> None:
    await store.import_state(graph, _decisions())
    info = {g.name: g for g in await store.graphs()}[graph]
    assert info.vocabulary is None


# --- graphs ---------------------------------------------------------------------------------


async def test_graphs_lists_every_graph_with_its_length(store: Any, graph: str) -> None:
    session = generate_session(9, 3)
    wanted = {
        f"{graph}-a": example(),
        f"{graph}-b": session,
        f"{graph}-empty": {"version": 1, "nodes": [], "frontier": []},
    }
    for name, doc in wanted.items():
        await store.import_state(name, doc)
    listed = await store.graphs()
    lengths = {g.name: g.length for g in listed}
    assert {name: lengths.get(name) for name in wanted} == {
        f"{graph}-a": 16,
        f"{graph}-b": len(session["nodes"]),
        f"{graph}-empty": 0,
    }
    for g in listed:
        if g.name in wanted:
            assert g.vocabulary is None
            assert g.created_at.tzinfo is not None


async def test_tail_reads_an_imported_graph_in_order(store: Any, graph: str) -> None:
    doc = example()
    await store.import_state(graph, doc)
    seen: list[dict[str, Any]] = []
    async with contextlib.aclosing(store.tail(graph, after=3)) as nodes:
        async for n in nodes:
            seen.append(n.to_obj())
            if len(seen) == 13:
                break
    assert seen == doc["nodes"][3:]
