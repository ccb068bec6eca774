"""Fuzzing import and append with mutated documents and batches (hypothesis).

Each example starts from a real document (the runtime's own turn, or a generated
session with odd payloads) and applies one mutation: a wrong JSON type in a field, a
field dropped or added, broken / missing / duplicated / reordered parents, a tampered
payload (the id no longer matches), odd Unicode (U+0000, astral, RTL, combining marks,
lone surrogates), huge numbers (2**53+1, ``1e400`` as text), ``NaN`` tokens, nesting
2,000 levels deep, 1 MB strings, duplicated or swapped nodes, odd timestamps, broken
semantic payloads. Half the time the ids are recomputed afterwards
(:func:`support.documents.reseal`), so that only the mutated rule is broken and much of
what is generated is valid.

The property, for both clients: the input is either accepted, and then
``export_json`` gives back exactly the JSON the runtime would write for it; or refused
with :class:`cwstore.ValidationError` whose every violation carries one of the codes
of SPEC section 6 (an append may also lose a resource-chain compare-and-set:
:class:`cwstore.ChainConflictError`, SPEC section 7), and then the graph holds nothing
new. Never another exception. For import, the store accepts exactly what the public
validator :func:`cwstore.validate` accepts.

One database for the module, a fresh graph name per example. Examples are derandomized
so CI sees the same inputs every run.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from support.documents import example_turn, generate_session, reseal
from support.reliability import SPEC_CODES

import cwstore
from cwstore import ChainConflictError, ValidationError, _jsontext, fold_frontier
from cwstore.document import NODE_FIELDS, parse_document, sort_parents

EXAMPLES = 100

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

BASES: list[dict[str, Any]] = [example_turn(), generate_session(7, 2, odd_payloads=True)]

RAW = "\u0001raw\u0001"  # marks a string to be written into the JSON text as a bare token

ODD_STRINGS = [
    "\u0000",
    "a\u0000b",
    "\\u0000",  # a backslash and "u0000", not U+0000
    "\U0001f600",
    "\U0001f9d1\u200d\U0001f4bb",
    "\U00010348\U0001d4b3",
    "\u05d0\u05d1\u05d2 \u202eevil\u202c",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "e\u0301",
    "A\u030a\u0301\u0327",
    "\u2028\u2029",
    "\ufeff",
    "\uffff",
    '"\\/',
    "\x01\x1f\x7f\t\n",
    "\ud800",  # lone surrogates: refused (unrepresentable)
    "x\udfff",
    "",
]

NUMBER_TOKENS = [
    "9007199254740993",  # 2**53+1
    "-9007199254740993",
    "9007199254740992",  # 2**53: an exact double, JavaScript writes it back the same
    "1e400",
    "-1e400",
    "1E400",
    "123456789012345678901234567890",
    "100000000000000000000",  # 1e20, written by JSON.stringify as is
    "1e21",
    "1E2",
    "1.0",
    "-0",
    "-0.0",
    "5e-324",
    "1.7976931348623157e308",
    "0.1",
    "NaN",
    "Infinity",
    "-Infinity",
]

NUMBER_VALUES: list[Any] = [
    2**53 + 1,
    -(2**53 + 1),
    2**53,
    10**21,
    1e21,
    float("nan"),
    float("inf"),
    -0.0,
    5e-324,
    _jsontext.BadNumber("NaN"),
    _jsontext.BadNumber("-Infinity"),
]

TIMESTAMPS = [
    "2026-12-02T08:43:04.123Z",
    "2026-12-02t08:43:04.123z",
    "2026-12-02T08:43:04Z",
    "2026-12-02T08:43:04.123456789Z",
    "2026-12-02T08:43:04.123+05:30",
    "2026-12-02T08:43:04.123-15:59",
    "2026-12-02T08:43:04.123+23:59",
    "2026-12-02T08:43:04.123-20:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999Z",
    "2026-02-29T00:00:00Z",
    "2024-02-29T00:00:00Z",
    "2026-12-02T24:00:00Z",
    "2026-12-02T08:43:60Z",
    "2026-12-02 08:43:04Z",
    "2026-12-02T08:43:04",
    "2026-12-02T08:43:04+0100",
    "Wed, 02 Dec 2026 08:43:04 GMT",
    "2026-12-02T08:43:04.123Z\u0000",
    "",
]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(ODD_STRINGS)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _nested(depth: int, leaf: Any, as_object: bool) -> Any:
    value = leaf
    for i in range(depth - 1):
        value = {f"k{i % 7}": value} if as_object else [value]
    return value


# --- mutations: each edits a list of nodes (and maybe the document) in place ----------


class Case:
    """A mutated input: the document (or batch), how to send it, and what was done."""

    def __init__(self, doc: dict[str, Any], batch_prefix: list[Any] | None = None) -> None:
        self.doc = doc
        self.is_batch = batch_prefix is not None
        self.batch_prefix = batch_prefix or []
        self.text_only = False  # holds bare tokens: must be sent as JSON text
        self.reseal = True
        self.keep_order: set[int] = set()
        self.done: list[str] = []


def _node_index(data: st.DataObject, nodes: list[Any], *, min_index: int = 0) -> int | None:
    if len(nodes) <= min_index:
        return None
    return data.draw(st.integers(min_index, len(nodes) - 1), label="node")


def _payload_slot(data: st.DataObject, node: dict[str, Any], value: Any, as_key: bool) -> None:
    """Put ``value`` into the node's payload (as a member value, an element, or the
    whole payload), or a string ``value`` as a member key."""
    payload = node.get("payload")
    if as_key and isinstance(value, str):
        if isinstance(payload, dict):
            payload[value] = "odd key"
        else:
            node["payload"] = {value: payload}
        return
    where = data.draw(st.sampled_from(["member", "element", "whole"]), label="slot")
    if where == "member" and isinstance(payload, dict):
        key = data.draw(st.sampled_from([*list(payload), "added"]), label="member")
        payload[key] = value
    elif where == "element":
        node["payload"] = [payload, value]
    else:
        node["payload"] = value


def m_wrong_type(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    doc = case.doc
    if not case.is_batch and data.draw(st.booleans(), label="top-level"):
        field = data.draw(st.sampled_from(["version", "nodes", "frontier"]), label="field")
        doc[field] = data.draw(JSON_VALUES, label="value")
        case.done.append(f"top-level {field} = {doc[field]!r:.60}")
        return
    i = _node_index(data, nodes)
    if i is None:
        return
    field = data.draw(
        st.sampled_from(["id", "kind", "parents", "createdAt", "sequence", "resourceKey"]),
        label="field",
    )
    value = data.draw(JSON_VALUES, label="value")
    if data.draw(st.booleans(), label="whole node"):
        nodes[i] = value
        case.done.append(f"node {i} = {value!r:.60}")
    else:
        nodes[i][field] = value
        case.done.append(f"node {i}.{field} = {value!r:.60}")


def m_drop_or_add_field(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    doc = case.doc
    add = data.draw(st.booleans(), label="add")
    if not case.is_batch and data.draw(st.integers(0, 3), label="top") == 0:
        if add:
            doc["extra"] = 1
        else:
            doc.pop(data.draw(st.sampled_from(["version", "nodes", "frontier"])), None)
        case.done.append(f"top-level field {'added' if add else 'dropped'}")
        return
    i = _node_index(data, nodes)
    if i is None:
        return
    if add:
        name = data.draw(st.sampled_from(["extra", "Kind", "resource_key", "seq", ""]))
        nodes[i][name] = data.draw(JSON_VALUES)
    else:
        name = data.draw(st.sampled_from(list(NODE_FIELDS)))
        nodes[i].pop(name, None)
    case.done.append(f"node {i}: field {name!r} {'added' if add else 'dropped'}")


def m_parents(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    i = _node_index(data, nodes, min_index=1)
    if i is None:
        return
    node = nodes[i]
    parents = list(node["parents"])
    op = data.draw(
        st.sampled_from(
            ["drop", "missing", "duplicate", "reverse", "later", "self", "not a string", "all"]
        ),
        label="op",
    )
    if op == "drop" and parents:
        parents.pop(data.draw(st.integers(0, len(parents) - 1)))
    elif op == "missing":
        parents.append("cw_" + "0" * 24)
    elif op == "duplicate" and parents:
        parents.append(parents[0])
    elif op == "reverse":
        parents.reverse()
        case.keep_order.add(i)
    elif op == "later" and i + 1 < len(nodes) and isinstance(nodes[i + 1], dict):
        parents.append(nodes[i + 1]["id"])
    elif op == "self":
        parents.append(node["id"])
    elif op == "not a string":
        parents.append(data.draw(st.sampled_from([1, None, ["x"], {"id": "x"}])))
    elif op == "all":
        parents = [n["id"] for n in nodes[:i] if isinstance(n, dict)]
    node["parents"] = parents
    if op in ("duplicate", "self", "not a string", "later"):
        case.keep_order.add(i)
    case.done.append(f"node {i}: parents {op}")


def m_tamper_payload(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    i = _node_index(data, nodes)
    if i is None:
        return
    node = nodes[i]
    payload = node["payload"]
    if isinstance(payload, dict) and payload and data.draw(st.booleans()):
        key = next(iter(payload))
        payload[key] = data.draw(JSON_VALUES)
    else:
        node["payload"] = [payload, "tampered"]
    case.reseal = False
    case.done.append(f"node {i}: payload tampered")


def m_odd_unicode(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    s = data.draw(st.sampled_from(ODD_STRINGS), label="string")
    target = data.draw(
        st.sampled_from(
            [
                "payload",
                "payload key",
                "kind",
                "createdAt",
                "resourceKey",
                "id",
                "parent",
                "frontier",
            ]
        ),
        label="target",
    )
    i = _node_index(data, nodes)
    if i is None:
        return
    if target == "payload":
        _payload_slot(data, nodes[i], s, as_key=False)
    elif target == "payload key":
        _payload_slot(data, nodes[i], s + "key", as_key=True)
    elif target == "frontier" and not case.is_batch and isinstance(case.doc.get("frontier"), list):
        case.doc["frontier"] = [*case.doc["frontier"], s]
    elif target == "resourceKey":
        nodes[i]["resourceKey"] = "res/" + s
    elif target == "parent" and isinstance(nodes[i].get("parents"), list):
        nodes[i]["parents"] = [*nodes[i]["parents"], "cw_" + s]
    else:
        nodes[i][target] = str(nodes[i].get(target, "")) + s
    case.done.append(f"node {i}: {s!r} in {target}")


def m_numbers(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    i = _node_index(data, nodes)
    if i is None:
        return
    if not case.is_batch and data.draw(st.booleans(), label="as text"):
        token = data.draw(st.sampled_from(NUMBER_TOKENS), label="token")
        value: Any = RAW + token + RAW
        case.text_only = True
    else:
        value = data.draw(st.sampled_from(NUMBER_VALUES), label="value")
    where = data.draw(st.sampled_from(["payload", "payload", "sequence", "version"]))
    if where == "payload":
        _payload_slot(data, nodes[i], value, as_key=False)
    elif where == "sequence":
        nodes[i]["sequence"] = value
    elif not case.is_batch:
        case.doc["version"] = value
    case.done.append(f"node {i}: number {value!r} in {where}")


def m_big(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    i = _node_index(data, nodes)
    if i is None:
        return
    what = data.draw(st.sampled_from(["deep list", "deep object", "1 MB string", "1 MB key"]))
    if what == "deep list":
        _payload_slot(data, nodes[i], _nested(2000, "bottom", False), as_key=False)
    elif what == "deep object":
        _payload_slot(data, nodes[i], _nested(2000, [1, "\u0000"], True), as_key=False)
    elif what == "1 MB string":
        _payload_slot(data, nodes[i], "\u00e9\U0001f600" + "x" * 1_000_000, as_key=False)
    else:
        _payload_slot(data, nodes[i], "k" * 1_000_000, as_key=True)
    case.done.append(f"node {i}: {what}")


def m_nodes(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    if len(nodes) < 2:
        return
    op = data.draw(st.sampled_from(["duplicate", "swap", "sequence", "drop"]), label="op")
    i = data.draw(st.integers(0, len(nodes) - 2), label="node")
    if op == "duplicate":
        twin = copy.deepcopy(nodes[i])
        if isinstance(twin, dict) and "sequence" in twin:
            twin["sequence"] = len(nodes) + 1
        nodes.append(twin)
        case.reseal = False
    elif op == "swap":
        nodes[i], nodes[i + 1] = nodes[i + 1], nodes[i]
    elif op == "sequence" and isinstance(nodes[i], dict):
        nodes[i]["sequence"] = data.draw(st.sampled_from([0, -1, i + 2, 10**6, 1.5, "1"]))
    else:
        del nodes[i]
    case.done.append(f"nodes: {op} at {i}")


def m_semantic(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    semantic = [i for i, n in enumerate(nodes) if isinstance(n, dict) and n["kind"] == "semantic"]
    if not semantic:
        return
    i = data.draw(st.sampled_from(semantic), label="node")
    node = nodes[i]
    op = data.draw(
        st.sampled_from(
            ["type", "key", "resourceKey", "content > 100k", "content = 100k", "extra", "shape"]
        )
    )
    payload = node["payload"]
    if op == "type":
        payload["type"] = data.draw(st.sampled_from(["Memory", "9x", "a" * 49, "", 3, "new-type"]))
    elif op == "key":
        payload["key"] = data.draw(st.sampled_from(["UPPER", "", "k" * 121, "a b", "ok.key/1"]))
    elif op == "resourceKey":
        node["resourceKey"] = data.draw(st.sampled_from(["semantic:memory:other", "x", None]))
    elif op == "content > 100k":
        payload["content"] = "c" * 100_001
    elif op == "content = 100k":
        payload["content"] = "c" * 99_998  # 100,000 characters of JSON with its quotes
    elif op == "extra":
        payload["extra"] = 1
    else:
        node["payload"] = data.draw(st.sampled_from([[], "text", None, {"type": "memory"}]))
    case.done.append(f"node {i}: semantic {op}")


def m_created_at(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    i = _node_index(data, nodes)
    if i is None:
        return
    nodes[i]["createdAt"] = data.draw(st.sampled_from(TIMESTAMPS), label="createdAt")
    case.done.append(f"node {i}: createdAt {nodes[i]['createdAt']!r}")


def m_frontier(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    frontier = case.doc.get("frontier")
    if case.is_batch or not isinstance(frontier, list):
        return
    op = data.draw(st.sampled_from(["missing", "twice", "empty", "all", "reversed", "number"]))
    ids = [n["id"] for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)]
    if op == "missing":
        frontier.append("cw_" + "f" * 24)
    elif op == "twice" and frontier:
        frontier.append(frontier[0])
    elif op == "empty":
        frontier.clear()
    elif op == "all":
        frontier[:] = ids
    elif op == "reversed":
        frontier[:] = ids[::-1][:3]
    else:
        frontier.append(1)
    case.done.append(f"frontier {op}")


MUTATIONS: dict[str, Callable[[st.DataObject, Case, list[Any]], None]] = {
    "wrong_type": m_wrong_type,
    "field": m_drop_or_add_field,
    "parents": m_parents,
    "tamper": m_tamper_payload,
    "unicode": m_odd_unicode,
    "numbers": m_numbers,
    "big": m_big,
    "nodes": m_nodes,
    "semantic": m_semantic,
    "created_at": m_created_at,
    "frontier": m_frontier,
}


def _mutate(data: st.DataObject, case: Case, nodes: list[Any]) -> None:
    for _ in range(data.draw(st.integers(1, 2), label="mutations")):
        name = data.draw(st.sampled_from(sorted(MUTATIONS)), label="mutation")
        MUTATIONS[name](data, case, nodes)
    # Mostly resealed, so that only the mutated rule breaks and much of it imports.
    case.reseal = case.reseal and data.draw(st.integers(0, 3), label="reseal") > 0


def _reseal(doc: dict[str, Any], keep_order: set[int], done: list[str]) -> dict[str, str]:
    """:func:`support.documents.reseal`, tolerating what that helper cannot hash."""
    try:
        renamed = reseal(doc, keep_parent_order=keep_order)
    except UnicodeEncodeError:
        # reseal cannot hash a kind or parent holding a lone surrogate (a limitation
        # of the test helper); send the input as it stands.
        done.append("not resealed (lone surrogate)")
        return {}
    done.append("resealed")
    return renamed


def _as_text(value: Any) -> str:
    """JSON text of ``value`` with every RAW-marked string written as its bare token."""
    text = _jsontext.dumps(value)
    for token in NUMBER_TOKENS:
        text = text.replace(_jsontext.dumps(RAW + token + RAW), token)
    return text


def _import_input(case: Case, as_text: bool) -> tuple[Any, Any]:
    """``(what to send, its parsed form)``. Text holding bare tokens is resealed after
    parsing (the ids must hash the parsed values), the new ids patched into the text."""
    if not (as_text or case.text_only):
        if case.reseal:
            _reseal(case.doc, case.keep_order, case.done)
        return case.doc, case.doc
    text = _as_text(case.doc)
    parsed = parse_document(text)
    if case.reseal and isinstance(parsed, dict) and _reseal(parsed, case.keep_order, case.done):
        # Carry the new ids and parent lists over to the marked document, write it again.
        doc = case.doc
        for mine, got in zip(doc.get("nodes") or [], parsed.get("nodes") or [], strict=False):
            if isinstance(mine, dict) and isinstance(got, dict):
                mine.update({f: got[f] for f in ("id", "parents") if f in got})
        if isinstance(parsed.get("frontier"), list):
            doc["frontier"] = parsed["frontier"]
        text = _as_text(doc)
        parsed = parse_document(text)
    return text, parsed


def _runtime_text(nodes: list[dict[str, Any]], frontier: Any) -> str:
    """The JSON the runtime writes for these nodes: fields in its order, compact."""
    ordered = [{k: n[k] for k in NODE_FIELDS if k in n} for n in nodes]
    return _jsontext.dumps({"version": 1, "nodes": ordered, "frontier": frontier})


# --- the clients, one database for the module --------------------------------------------


class Clients:
    """Both clients with one blocking call interface (the async one on its own loop)."""

    def __init__(self, dsn: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.astore = self.loop.run_until_complete(
            cwstore.connect(dsn, min_size=1, max_size=2, migrate_schema=False)
        )
        self.sstore = cwstore.connect_sync(dsn, min_size=1, max_size=2, migrate_schema=False)
        self.admin = psycopg.connect(dsn, autocommit=True)

    def call(self, client: str, name: str, *args: Any, **kwargs: Any) -> Any:
        if client == "async":
            return self.loop.run_until_complete(getattr(self.astore, name)(*args, **kwargs))
        return getattr(self.sstore, name)(*args, **kwargs)

    def stored(self, graph: str) -> tuple[int | None, int]:
        """(graph length or None if absent, nodes stored for the graph)."""
        row = self.admin.execute(
            "SELECT g.length, (SELECT count(*) FROM cwstore.nodes n WHERE n.graph_id = g.graph_id)"
            " FROM cwstore.graphs g WHERE g.name = %s",
            (graph,),
        ).fetchone()
        return (None, 0) if row is None else (int(row[0]), int(row[1]))

    def close(self) -> None:
        self.loop.run_until_complete(self.astore.close())
        self.loop.close()
        self.sstore.close()
        self.admin.close()


@pytest.fixture(scope="module")
def clients(db_dsn: str) -> Iterator[Clients]:
    c = Clients(db_dsn)
    try:
        yield c
    finally:
        c.close()


# --- the properties -----------------------------------------------------------------------


def _event(text: str) -> None:
    """Count outcomes (``--hypothesis-show-statistics``); the sweeps run outside hypothesis."""
    if currently_in_test_context():
        event(text)


def _check_refusal(exc: ValidationError, done: list[str]) -> None:
    assert exc.violations, f"a ValidationError without violations ({done})"
    for v in exc.violations:
        assert v.code in SPEC_CODES, f"code {v.code!r} is not a SPEC section 6 code ({done})"
        assert isinstance(v.path, str) and v.path.startswith("$"), v
        assert v.message, v


def check_import(clients: Clients, client: str, sent: Any, parsed: Any, done: list[str]) -> None:
    """Accepted and exported exactly as the runtime writes it, or refused with SPEC
    codes and no trace; and the store agrees with :func:`cwstore.validate`."""
    graph = f"fz-{uuid.uuid4().hex}"
    try:
        count = clients.call(client, "import_state", graph, sent)
    except ValidationError as exc:
        _event(f"import refused: {sorted({v.code for v in exc.violations})}")
        _check_refusal(exc, done)
        assert clients.stored(graph) in ((None, 0), (0, 0)), f"a refused import left nodes {done}"
        verdict = cwstore.validate(parsed)
        assert verdict, (
            f"cwstore.validate accepts this document but the {client} import refused it: "
            f"{[str(v) for v in exc.violations]} ({done})"
        )
        assert {v.code for v in exc.violations} == {v.code for v in verdict}, done
        return
    _event("import accepted")
    verdict = cwstore.validate(parsed)
    assert not verdict, f"imported although cwstore.validate refuses it: {verdict} ({done})"
    assert count == len(parsed["nodes"])
    exported = clients.call(client, "export_json", graph)
    assert exported == _runtime_text(parsed["nodes"], parsed["frontier"]), (
        f"export differs from the input ({done})"
    )
    assert clients.stored(graph) == (count, count)


def check_append(
    clients: Clients,
    client: str,
    prefix: list[dict[str, Any]],
    batch: list[Any],
    frontier: list[Any] | None,
    done: list[str],
) -> None:
    """The stored prefix plus the batch: accepted (export = prefix + the new nodes as
    sent, numbered on, frontier declared or folded), or refused with no trace."""
    graph = f"fz-{uuid.uuid4().hex}"
    k = len(prefix)
    if prefix:
        doc = {"version": 1, "nodes": prefix, "frontier": fold_frontier(prefix)}
        assert clients.call(client, "import_state", graph, doc) == k
    try:
        out = clients.call(client, "append", graph, batch, frontier=frontier)
    except (ValidationError, ChainConflictError) as exc:
        _event(f"append refused: {type(exc).__name__}")
        if isinstance(exc, ValidationError):
            _check_refusal(exc, done)
        # Nothing new: the stored prefix only (append creates a graph on first use, in
        # its own transaction, so a refused first append leaves no graph or an empty one).
        assert clients.stored(graph) in ([(k, k)] if k else [(None, 0), (0, 0)]), done
        return
    _event("append accepted")
    assert len(out) == len(batch), done
    first: dict[str, dict[str, Any]] = {}
    for sent_node, got in zip(batch, out, strict=True):
        assert got.id == sent_node.get("id", got.id), done
        if got.sequence > k and got.id not in first:
            n = {f: sent_node[f] for f in NODE_FIELDS if f in sent_node}
            n["id"] = got.id
            n["parents"] = sort_parents(sent_node["parents"])
            n["createdAt"] = got.created_at
            n["sequence"] = got.sequence
            first[got.id] = n
    new = sorted(first.values(), key=lambda n: n["sequence"])
    assert [n["sequence"] for n in new] == list(range(k + 1, k + 1 + len(new))), done
    stored = prefix + new
    expected_frontier = frontier if frontier is not None else fold_frontier(stored)
    exported = clients.call(client, "export_json", graph)
    assert exported == _runtime_text(stored, expected_frontier), f"export differs ({done})"
    assert clients.stored(graph) == (len(stored), len(stored)), done


@FUZZ_SETTINGS
@given(data=st.data())
def test_import_accepts_exactly_or_refuses_cleanly(clients: Clients, data: st.DataObject) -> None:
    client = data.draw(st.sampled_from(["async", "sync"]), label="client")
    base = data.draw(st.sampled_from(range(len(BASES))), label="base")
    case = Case(copy.deepcopy(BASES[base]))
    _mutate(data, case, case.doc["nodes"])
    sent, parsed = _import_input(case, data.draw(st.booleans(), label="as text"))
    check_import(clients, client, sent, parsed, case.done)


@FUZZ_SETTINGS
@given(data=st.data())
def test_append_accepts_exactly_or_refuses_cleanly(clients: Clients, data: st.DataObject) -> None:
    client = data.draw(st.sampled_from(["async", "sync"]), label="client")
    base = copy.deepcopy(BASES[data.draw(st.sampled_from(range(len(BASES))), label="base")])
    nodes = base["nodes"]
    k = data.draw(st.integers(0, len(nodes) - 1), label="stored prefix")
    prefix, batch = nodes[:k], copy.deepcopy(nodes[k:])
    if data.draw(st.booleans(), label="drop sequences"):
        for n in batch:
            n.pop("sequence", None)
    case = Case({"nodes": batch}, batch_prefix=copy.deepcopy(prefix))
    _mutate(data, case, batch)
    if case.reseal:
        # The batch's parents may be stored nodes: reseal them together (the stored
        # prefix is valid, so its ids do not change).
        _reseal(
            {"nodes": case.batch_prefix + batch},
            {i + k for i in case.keep_order},
            case.done,
        )
    if data.draw(st.booleans(), label="drop ids"):
        for n in batch:
            if isinstance(n, dict):
                n.pop("id", None)
        case.done.append("ids dropped (the store computes them)")
    frontier: list[Any] | None = None
    if data.draw(st.booleans(), label="declare frontier"):
        ids = [n.get("id") for n in batch if isinstance(n, dict) and "id" in n]
        choices: list[list[Any]] = [
            ids[-1:],
            ids[:2],
            [*ids[-1:], *ids[-1:]],
            ["cw_" + "e" * 24],
            [],
        ]
        frontier = data.draw(st.sampled_from(choices), label="frontier")
    check_append(clients, client, prefix, batch, frontier, case.done)


# --- sweeps: every curated odd value in every slot, once, deterministically ----------------

TARGETS = ["payload", "payload key", "kind", "createdAt", "resourceKey", "id", "parent"]


def _put(node: dict[str, Any], target: str, value: Any) -> None:
    if target == "payload":
        node["payload"] = {"odd": value, "then": [value]}
    elif target == "payload key":
        node["payload"] = {f"{value}": 1, "z": {f"k{value}": value}}
    elif target == "parent":
        node["parents"] = [*node["parents"], f"cw_{value}"]
    elif target == "resourceKey":
        node["resourceKey"] = f"res/{value}"
    elif target in ("kind", "id"):
        node[target] = f"{node[target]}{value}"
    else:
        node[target] = value


def _import_sweep() -> Iterator[tuple[str, Case, bool]]:
    """``(description, case, as_text)`` for every curated value in every slot."""

    def fresh(reseal_: bool = True) -> Case:
        case = Case(copy.deepcopy(BASES[0]))
        case.reseal = reseal_
        return case

    for s in ODD_STRINGS:
        for target in [*TARGETS, "frontier"]:
            case = fresh()
            if target == "frontier":
                case.doc["frontier"].append(f"cw_{s}")
            else:
                _put(case.doc["nodes"][2], target, s)
            yield f"{s!r} in {target}", case, False
    for ts in TIMESTAMPS:
        case = fresh()
        case.doc["nodes"][3]["createdAt"] = ts
        yield f"createdAt {ts!r}", case, False
    for token in NUMBER_TOKENS:
        case = fresh()
        case.doc["nodes"][2]["payload"] = {"n": RAW + token + RAW, "list": [RAW + token + RAW]}
        case.text_only = True
        yield f"number token {token} in a payload", case, True
        case = fresh()
        case.doc["nodes"][2]["sequence"] = RAW + token + RAW
        case.text_only = True
        yield f"number token {token} as a sequence", case, True
    for value in NUMBER_VALUES:
        case = fresh()
        case.doc["nodes"][2]["payload"] = {"n": value}
        yield f"number {value!r} in a payload", case, False
    for depth in (2000, _jsontext.MAX_DEPTH):
        for as_object in (False, True):
            case = fresh()
            case.doc["nodes"][2]["payload"] = _nested(depth, "\u0000", as_object)
            yield f"{'objects' if as_object else 'lists'} nested {depth} deep", case, False
    case = fresh()
    case.doc["nodes"][2]["payload"] = {"s": "\U0001f600" + "\u00e9" * 1_000_000}
    yield "a 1 MB string", case, True
    for field in ["id", "kind", "parents", "payload", "createdAt", "sequence", "resourceKey"]:
        for value in [None, True, 7, 1.5, "s", [], {}, ["x"]]:
            case = fresh(reseal_=field != "payload")
            case.doc["nodes"][5][field] = copy.deepcopy(value)
            yield f"node field {field} = {value!r}", case, False
    for field in ["version", "nodes", "frontier"]:
        for value in [None, True, 2, "1", [], {}]:
            case = fresh()
            case.doc[field] = copy.deepcopy(value)
            yield f"document field {field} = {value!r}", case, False
    sem = next(i for i, n in enumerate(BASES[0]["nodes"]) if n["kind"] == "semantic")
    edits: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("content of 100,001 characters", lambda p: p.update(content="c" * 100_001)),
        ("content of exactly 100,000 characters of JSON", lambda p: p.update(content="c" * 99_998)),
        ("type with a capital", lambda p: p.update(type="Memory")),
        ("key with a space", lambda p: p.update(key="a b")),
        ("extra member", lambda p: p.update(extra=1)),
    ]
    for name, edit in edits:
        case = fresh()
        edit(case.doc["nodes"][sem]["payload"])
        yield f"semantic {name}", case, False


def test_import_sweep(clients: Clients) -> None:
    """Every curated value in every slot, once (clients alternate); all failures listed."""
    failures: list[str] = []
    for n, (what, case, as_text) in enumerate(_import_sweep()):
        client = ("async", "sync")[n % 2]
        try:
            sent, parsed = _import_input(case, as_text)
            check_import(clients, client, sent, parsed, [what, *case.done])
        except Exception as exc:
            failures.append(f"{client} import, {what}: {type(exc).__name__}: {exc}"[:400])
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)


def test_append_sweep(clients: Clients) -> None:
    """Odd values in the slots of an appended node, with the id left to the store (it
    computes it) or resealed by the test; clients alternate; all failures listed."""
    failures: list[str] = []
    base = BASES[0]["nodes"]
    cases: list[tuple[str, Any, str]] = [
        *[(f"{s!r} in {t}", s, t) for s in ODD_STRINGS for t in TARGETS if t != "id"],
        *[(f"createdAt {ts!r}", ts, "createdAt") for ts in TIMESTAMPS],
        *[(f"number {v!r} in a payload", v, "payload") for v in NUMBER_VALUES],
    ]
    for i, (what, value, target) in enumerate(cases):
        for with_id in (False, True):
            client = ("async", "sync")[(i + with_id) % 2]
            prefix = copy.deepcopy(base[:4])
            batch = copy.deepcopy(base[4:8])
            for node in batch:
                node.pop("sequence")
            _put(batch[1], target, value)
            done = [what, "id resealed" if with_id else "no id"]
            try:
                if with_id:
                    _reseal({"nodes": prefix + batch}, set(), done)
                else:
                    batch[1].pop("id", None)
                check_append(clients, client, prefix, batch, None, done)
            except Exception as exc:
                failures.append(
                    f"{client} append, {', '.join(done)}: {type(exc).__name__}: {exc}"[:400]
                )
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
