"""Every import safeguard of SPEC section 6, one broken thing at a time.

Each test starts from a valid document (a generated multi-turn session, or the
runtime's own example turn), breaks exactly one thing, and asserts that exactly the
expected code is reported, at the right node index, with the right id and JSON path.
Where a break changes a node's content hash, :func:`support.documents.reseal` recomputes
the ids (the broken node's and its descendants') and patches parents and frontier, so
the identity safeguard stays quiet and only the intended code fires.

The second half checks JSON fidelity: U+0000, deep nesting, long strings, non-ASCII,
the largest safe integers, and that ``AgentState.from_json(text).to_json()`` is the
compact form of the runtime's text, byte for byte (against Node's ``JSON.stringify``).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from support import EXAMPLE_FILE
from support.documents import (
    EXAMPLE_FRONTIER,
    GraphBuilder,
    example_turn,
    generate_session,
    reseal,
)

from cwstore import _jsontext
from cwstore.document import (
    AgentState,
    Vocabulary,
    fold_frontier,
    parse_document,
    sort_parents,
    validate,
)
from cwstore.errors import InputError, Violation
from cwstore.identity import compute_id

Doc = dict[str, Any]

SEED, TURNS = 12, 5
"""A generated session with everything the tests need (checked by test_session_has...)."""

MISSING = "cw_000000000000000000000000"
PROBE = "@@PROBE@@"
# The runtime's own example document, copied into the repository byte for byte.
NODE = shutil.which("node")

# -- helpers ---------------------------------------------------------------------------


def session(**kwargs: Any) -> Doc:
    return generate_session(SEED, TURNS, odd_payloads=True, **kwargs)


@pytest.fixture
def doc() -> Doc:
    d = session()
    assert validate(d) == []
    return d


@pytest.fixture
def example() -> Doc:
    d = example_turn()
    assert validate(d) == []
    return d


def found(d: Any, vocabulary: Vocabulary | None = None) -> list[tuple[str, int | None]]:
    return [(v.code, v.index) for v in validate(d, vocabulary)]


def only(
    d: Any,
    code: str,
    index: int | None,
    *,
    node_id: str | None,
    path: str,
    vocabulary: Vocabulary | None = None,
) -> Violation:
    """Assert that validation reports exactly one violation, and return it."""
    violations = validate(d, vocabulary)
    assert [(v.code, v.index) for v in violations] == [(code, index)], violations
    v = violations[0]
    assert v.node_id == node_id
    assert v.path == path
    assert v.message.strip()
    return v


def nid(d: Doc, i: int) -> str:
    value = d["nodes"][i]["id"]
    assert isinstance(value, str)
    return value


def np_(i: int) -> str:
    return f"$.nodes[{i}]"


def first(d: Doc, pred: Callable[[int, dict[str, Any]], bool]) -> int:
    for i, node in enumerate(d["nodes"]):
        if pred(i, node):
            return i
    raise AssertionError("no node matches")


def referenced(d: Doc) -> set[str]:
    return {p for n in d["nodes"] for p in n["parents"]}


def leaves(d: Doc) -> list[int]:
    """Nodes nobody lists as a parent and the frontier does not name."""
    used = referenced(d) | set(d["frontier"])
    return [i for i, n in enumerate(d["nodes"]) if n["id"] not in used]


def has_children(d: Doc, i: int) -> bool:
    return nid(d, i) in referenced(d)


def descendants(d: Doc, i: int) -> set[int]:
    ids = {nid(d, i)}
    out: set[int] = set()
    for j in range(i + 1, len(d["nodes"])):
        if ids.intersection(d["nodes"][j]["parents"]):
            ids.add(nid(d, j))
            out.add(j)
    return out


def chains(d: Doc, semantic: bool) -> list[list[int]]:
    """Resource chains (node indices in order), longest first."""
    by_key: dict[str, list[int]] = {}
    for i, n in enumerate(d["nodes"]):
        key = n.get("resourceKey")
        if key is not None and key.startswith("semantic:") == semantic:
            by_key.setdefault(key, []).append(i)
    return sorted(by_key.values(), key=len, reverse=True)


def with_probe(d: Doc, i: int, replacement: str, *, as_key: bool = False) -> Doc:
    """Put a placeholder into node i's ``payload.args``, reseal, then swap the
    placeholder's JSON text for ``replacement`` and parse the text again."""
    args = d["nodes"][i]["payload"]["args"]
    if as_key:
        args[PROBE] = 1
    else:
        args["probe"] = PROBE
    reseal(d)
    assert validate(d) == []
    text = _jsontext.dumps(d)
    assert text.count(f'"{PROBE}"') == 1
    parsed = parse_document(text.replace(f'"{PROBE}"', replacement))
    assert isinstance(parsed, dict)
    return parsed


def tool_call_with_children(d: Doc) -> int:
    return first(d, lambda i, n: n["kind"] == "tool_call" and has_children(d, i))


def node_stdout(script: str, stdin: str) -> str:
    assert NODE is not None
    run = subprocess.run(
        [NODE, "-e", script],
        input=stdin.encode("utf-8"),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode("utf-8", "replace")
    return run.stdout.decode("utf-8")


needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (needs `node`)")


# -- the starting points -----------------------------------------------------------------


def test_session_has_what_the_tests_need(doc: Doc) -> None:
    kinds = Counter(n["kind"] for n in doc["nodes"])
    assert len(doc["nodes"]) > 40
    assert kinds["protocol_error"] >= 2 and kinds["verification"] >= 1
    assert kinds["system"] >= 2 and kinds["inference"] >= 2
    assert len(chains(doc, semantic=True)[0]) >= 3
    assert len(chains(doc, semantic=False)[0]) >= 3
    assert len(doc["frontier"]) >= 2
    assert len(leaves(doc)) >= 2
    assert max(len(n["parents"]) for n in doc["nodes"]) >= 5
    assert doc["frontier"] == fold_frontier(doc["nodes"])
    assert validate(doc, Vocabulary.builtin()) == []


def test_example_turn_is_the_runtime_document(example: Doc) -> None:
    # Ids below were computed by the runtime (Node), not by cwstore.
    assert [n["id"] for n in example["nodes"]][:2] == [
        "cw_d7de9a401b11c5e1d558eaae",
        "cw_df1217f1ab624dacff8e14c6",
    ]
    assert example["frontier"] == list(EXAMPLE_FRONTIER)
    assert fold_frontier(example["nodes"]) == list(EXAMPLE_FRONTIER)
    assert example == json.loads(EXAMPLE_FILE.read_text(encoding="utf-8"))


# -- version -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [2, 0, -1, "1", True, None, 1.5, [1], {"v": 1}])
def test_version(doc: Doc, bad: Any) -> None:
    doc["version"] = bad
    only(doc, "version", None, node_id=None, path="$.version")


def test_version_one_as_float_is_accepted(doc: Doc) -> None:
    # JSON.parse("1.0") === 1: the runtime's `version !== 1` accepts it.
    text = _jsontext.dumps(doc).replace('{"version":1,', '{"version":1.0,', 1)
    assert validate(parse_document(text)) == []


def test_version_missing_is_shape(doc: Doc) -> None:
    del doc["version"]
    only(doc, "shape", None, node_id=None, path="$")


# -- kind --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["thought", "Goal", "", "goal ", "tool-call", 7, None, ["goal"]])
def test_kind(doc: Doc, bad: Any) -> None:
    i = first(doc, lambda i, n: n["kind"] == "goal" and i > 5)
    assert has_children(doc, i)
    doc["nodes"][i]["kind"] = bad
    only(doc, "kind", i, node_id=nid(doc, i), path=f"{np_(i)}.kind")


# -- semantic_payload ------------------------------------------------------------------------


def _latest_superseding_semantic(d: Doc) -> int:
    """The newest version of the longest semantic chain (it supersedes older ones)."""
    chain = chains(d, semantic=True)[0]
    assert len(chain) >= 2
    return chain[-1]


def _edit_payload_text(d: Doc, i: int) -> None:
    d["nodes"][i]["payload"] = "just text"


def _drop_content(d: Doc, i: int) -> None:
    del d["nodes"][i]["payload"]["content"]


def _drop_type(d: Doc, i: int) -> None:
    del d["nodes"][i]["payload"]["type"]


def _extra_field(d: Doc, i: int) -> None:
    d["nodes"][i]["payload"]["extra"] = 1


def _list_payload(d: Doc, i: int) -> None:
    d["nodes"][i]["payload"] = ["memory", "k", "v"]


def _type_not_string(d: Doc, i: int) -> None:
    d["nodes"][i]["payload"]["type"] = 5


def _key_not_string(d: Doc, i: int) -> None:
    d["nodes"][i]["payload"]["key"] = ["k"]


def _set_key(key: str) -> Callable[[Doc, int], None]:
    def edit(d: Doc, i: int) -> None:
        node = d["nodes"][i]
        node["payload"]["key"] = key
        node["resourceKey"] = f"semantic:{node['payload']['type']}:{key}"

    return edit


def _set_resource_key(key: str | None) -> Callable[[Doc, int], None]:
    def edit(d: Doc, i: int) -> None:
        if key is None:
            del d["nodes"][i]["resourceKey"]
        else:
            d["nodes"][i]["resourceKey"] = key

    return edit


def _content(value: Any) -> Callable[[Doc, int], None]:
    def edit(d: Doc, i: int) -> None:
        d["nodes"][i]["payload"]["content"] = value

    return edit


SEMANTIC_PAYLOAD_BREAKS: list[tuple[str, Callable[[Doc, int], None], str]] = [
    ("payload is a string", _edit_payload_text, ".payload"),
    ("payload is a list", _list_payload, ".payload"),
    ("content missing", _drop_content, ".payload"),
    ("type missing", _drop_type, ".payload"),
    ("unknown field", _extra_field, ".payload.extra"),
    ("type not a string", _type_not_string, ".payload.type"),
    ("key not a string", _key_not_string, ".payload.key"),
    ("key upper case", _set_key("Config.Port"), ".payload.key"),
    ("key with a space", _set_key("config port"), ".payload.key"),
    ("key empty", _set_key(""), ".payload.key"),
    ("key of 121 characters", _set_key("k" * 121), ".payload.key"),
    (
        "resourceKey names another key",
        _set_resource_key("semantic:memory:elsewhere"),
        ".resourceKey",
    ),
    ("resourceKey missing", _set_resource_key(None), ".resourceKey"),
    ("content longer than 100,000", _content("x" * 100_000), ".payload.content"),
    (
        "content longer than 100,000 UTF-16 units",
        _content("\U0001f600" * 50_000),
        ".payload.content",
    ),
]


@pytest.mark.parametrize(
    ("edit", "where"),
    [pytest.param(e, w, id=name) for name, e, w in SEMANTIC_PAYLOAD_BREAKS],
)
def test_semantic_payload(doc: Doc, edit: Callable[[Doc, int], None], where: str) -> None:
    i = _latest_superseding_semantic(doc)
    edit(doc, i)
    reseal(doc)
    only(doc, "semantic_payload", i, node_id=nid(doc, i), path=np_(i) + where)


@pytest.mark.parametrize(
    "content",
    [pytest.param("x" * 99_998, id="ascii"), pytest.param("\U0001f600" * 49_999, id="astral")],
)
def test_semantic_content_of_exactly_100000_is_accepted(doc: Doc, content: str) -> None:
    i = _latest_superseding_semantic(doc)
    doc["nodes"][i]["payload"]["content"] = content
    reseal(doc)
    assert validate(doc) == []


# -- semantic_type -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["Memory", "1memory", "-memory", "mem ory", "mem.ory", "", "m" * 49, "mémoire"]
)
def test_semantic_type_malformed(doc: Doc, bad: str) -> None:
    i = _latest_superseding_semantic(doc)
    node = doc["nodes"][i]
    node["payload"]["type"] = bad
    node["resourceKey"] = f"semantic:{bad}:{node['payload']['key']}"
    reseal(doc)
    only(doc, "semantic_type", i, node_id=nid(doc, i), path=f"{np_(i)}.payload.type")


def test_semantic_type_of_48_characters_is_accepted(doc: Doc) -> None:
    i = _latest_superseding_semantic(doc)
    node = doc["nodes"][i]
    node["payload"]["type"] = "m" * 48
    node["resourceKey"] = f"semantic:{'m' * 48}:{node['payload']['key']}"
    reseal(doc)
    assert validate(doc) == []


def test_semantic_type_outside_fixed_vocabulary(doc: Doc) -> None:
    i = _latest_superseding_semantic(doc)
    node = doc["nodes"][i]
    node["payload"]["type"] = "decision"
    node["resourceKey"] = f"semantic:decision:{node['payload']['key']}"
    reseal(doc)
    assert validate(doc) == []  # dynamic: any well-formed type
    only(
        doc,
        "semantic_type",
        i,
        node_id=nid(doc, i),
        path=f"{np_(i)}.payload.type",
        vocabulary=Vocabulary.builtin(),
    )
    assert (
        validate(doc, Vocabulary.fixed(["memory", "preference", "wisdom", "artifact", "decision"]))
        == []
    )


def test_semantic_type_fixed_vocabulary_on_the_example(example: Doc) -> None:
    only(
        example,
        "semantic_type",
        15,
        node_id="cw_edd28f98991900db4d2c4b80",
        path="$.nodes[15].payload.type",
        vocabulary=Vocabulary.fixed(["memory", "artifact"]),
    )
    vocab = Vocabulary.from_node_types(
        [
            {"name": "memory", "description": "A durable fact."},
            {"name": "preference", "description": "A stable user choice."},
        ]
    )
    assert found(example, vocab) == [("semantic_type", 14)]


@pytest.mark.parametrize("field", ["type", "key"])
def test_semantic_trailing_newline_is_refused(doc: Doc, field: str) -> None:
    i = _latest_superseding_semantic(doc)
    payload = doc["nodes"][i]["payload"]
    payload[field] += "\n"
    doc["nodes"][i]["resourceKey"] = f"semantic:{payload['type']}:{payload['key']}"
    reseal(doc)
    code = "semantic_type" if field == "type" else "semantic_payload"
    only(doc, code, i, node_id=nid(doc, i), path=f"{np_(i)}.payload.{field}")


def test_node_type_name_with_trailing_newline_is_refused() -> None:
    with pytest.raises(InputError):
        Vocabulary.from_node_types([{"name": "decision\n", "description": "d"}])


# -- duplicate_id ----------------------------------------------------------------------------


def _plain(d: Doc) -> int:
    """A tool_result with children and no resource key."""
    return first(d, lambda i, n: n["kind"] == "tool_result" and has_children(d, i) and i > 10)


def test_duplicate_id_appended_copy(doc: Doc) -> None:
    k = _plain(doc)
    dup = copy.deepcopy(doc["nodes"][k])
    n = len(doc["nodes"])
    dup["sequence"] = n + 1
    doc["nodes"].append(dup)
    only(doc, "duplicate_id", n, node_id=nid(doc, k), path=f"{np_(n)}.id")


def test_duplicate_id_copy_right_after_the_original(doc: Doc) -> None:
    k = _plain(doc)
    doc["nodes"].insert(k + 1, copy.deepcopy(doc["nodes"][k]))
    for i, node in enumerate(doc["nodes"]):
        node["sequence"] = i + 1
    only(doc, "duplicate_id", k + 1, node_id=nid(doc, k), path=f"{np_(k + 1)}.id")


def test_duplicate_id_forged_on_other_content(doc: Doc) -> None:
    j = leaves(doc)[-1]
    k = _plain(doc)
    assert k < j
    doc["nodes"][j]["id"] = nid(doc, k)
    # The forged node's content does not match the id either, but a duplicate id is
    # reported once, as duplicate_id (identity is not recomputed for it).
    only(doc, "duplicate_id", j, node_id=nid(doc, k), path=f"{np_(j)}.id")


# -- missing_parent ----------------------------------------------------------------------------


@pytest.mark.parametrize("ghost", [MISSING, "cw_ffffffffffffffffffffffff", "not-an-id", "", "CW_0"])
def test_missing_parent_added(doc: Doc, ghost: str) -> None:
    i = _plain(doc)
    doc["nodes"][i]["parents"].append(ghost)
    reseal(doc)
    j = doc["nodes"][i]["parents"].index(ghost)
    only(doc, "missing_parent", i, node_id=nid(doc, i), path=f"{np_(i)}.parents[{j}]")


def test_missing_parent_typo(doc: Doc) -> None:
    i = _plain(doc)
    (parent,) = doc["nodes"][i]["parents"]
    typo = parent[:-1] + ("0" if parent[-1] != "0" else "1")
    doc["nodes"][i]["parents"] = [typo]
    reseal(doc)
    only(doc, "missing_parent", i, node_id=nid(doc, i), path=f"{np_(i)}.parents[0]")


# -- parent_order ------------------------------------------------------------------------------


def _many_parents(d: Doc) -> int:
    return first(d, lambda i, n: len(n["parents"]) >= 3 and has_children(d, i))


def test_parent_order_unsorted(doc: Doc) -> None:
    i = _many_parents(doc)
    doc["nodes"][i]["parents"].reverse()
    reseal(doc, keep_parent_order={i})  # the id is the hash of the unsorted list
    only(doc, "parent_order", i, node_id=nid(doc, i), path=f"{np_(i)}.parents")


@pytest.mark.parametrize("js_sorted", [True, False])
def test_parent_order_compares_utf16_code_units(doc: Doc, js_sorted: bool) -> None:
    # JavaScript compares strings by UTF-16 code units: U+1F600 (as \ud83d\ude00)
    # sorts before U+FF5E, although its code point is larger. Both parents are
    # missing; only the reversed list is also out of order.
    i = _plain(doc)
    ghosts = ["\U0001f600", "\uff5e"] if js_sorted else ["\uff5e", "\U0001f600"]
    doc["nodes"][i]["parents"] = ghosts
    reseal(doc, keep_parent_order={i})
    expected = [("missing_parent", i), ("missing_parent", i)]
    if not js_sorted:
        expected.append(("parent_order", i))
    assert found(doc) == expected
    assert sort_parents(["\uff5e", "\U0001f600", "\uff5e"]) == ["\U0001f600", "\uff5e"]


def test_parent_order_duplicate(doc: Doc) -> None:
    i = _many_parents(doc)
    parents = doc["nodes"][i]["parents"]
    parents.insert(1, parents[0])  # still sorted, one id twice
    reseal(doc, keep_parent_order={i})
    only(doc, "parent_order", i, node_id=nid(doc, i), path=f"{np_(i)}.parents")


def test_parent_order_self_parent(doc: Doc) -> None:
    i = _many_parents(doc)
    own = nid(doc, i)
    doc["nodes"][i]["parents"] = sorted([*doc["nodes"][i]["parents"], own])
    j = doc["nodes"][i]["parents"].index(own)
    # No id can equal the hash of content that contains the id itself, so a
    # self-parent always breaks identity too: both are reported, nothing else.
    violations = validate(doc)
    assert [(v.code, v.index) for v in violations] == [("parent_order", i), ("identity", i)]
    assert violations[0].path == f"{np_(i)}.parents[{j}]"
    assert violations[0].node_id == own


def test_parent_order_later_parent(doc: Doc) -> None:
    # A node i with children, and a later node j that does not descend from i (so
    # j's id survives the reseal of i's descendants).
    pairs = [
        (i, j)
        for i in range(1, len(doc["nodes"]))
        if has_children(doc, i)
        for j in range(len(doc["nodes"]) - 1, i, -1)
        if j not in descendants(doc, i) and nid(doc, j) not in doc["nodes"][i]["parents"]
    ]
    i, j = pairs[0]
    later = nid(doc, j)
    doc["nodes"][i]["parents"].append(later)
    reseal(doc)
    assert nid(doc, j) == later
    k = doc["nodes"][i]["parents"].index(later)
    only(doc, "parent_order", i, node_id=nid(doc, i), path=f"{np_(i)}.parents[{k}]")


def test_parent_order_later_parent_in_the_example(example: Doc) -> None:
    example["nodes"][14]["parents"] = sorted([*example["nodes"][14]["parents"], nid(example, 15)])
    reseal(example)
    k = example["nodes"][14]["parents"].index(nid(example, 15))
    only(example, "parent_order", 14, node_id=nid(example, 14), path=f"$.nodes[14].parents[{k}]")


# -- identity ------------------------------------------------------------------------------


def test_identity_payload_edited(doc: Doc) -> None:
    i = first(doc, lambda i, n: n["kind"] == "goal" and i > 5)
    doc["nodes"][i]["payload"] += " (edited)"
    only(doc, "identity", i, node_id=nid(doc, i), path=f"{np_(i)}.id")


def test_identity_kind_changed_to_another_valid_kind(doc: Doc) -> None:
    i = first(doc, lambda i, n: n["kind"] == "goal" and i > 5)
    doc["nodes"][i]["kind"] = "answer"
    only(doc, "identity", i, node_id=nid(doc, i), path=f"{np_(i)}.id")


def test_identity_resource_key_added(doc: Doc) -> None:
    i = _plain(doc)
    doc["nodes"][i]["resourceKey"] = "notes/new-key"
    only(doc, "identity", i, node_id=nid(doc, i), path=f"{np_(i)}.id")


def test_identity_payload_key_order_does_not_matter(doc: Doc) -> None:
    # Identity sorts object members, so reordering them keeps the id (and the
    # document, which keeps the new order, stays valid).
    i = tool_call_with_children(doc)
    payload = doc["nodes"][i]["payload"]
    doc["nodes"][i]["payload"] = dict(reversed(list(payload.items())))
    assert validate(doc) == []


@pytest.mark.parametrize("forged", [MISSING, "upper", "short", "no-prefix"])
def test_identity_wrong_id_with_references_patched(doc: Doc, forged: str) -> None:
    i = _plain(doc)
    old = nid(doc, i)
    new = {
        "upper": "cw_" + old[3:].upper(),
        "short": old[:-1],
        "no-prefix": old[3:],
    }.get(forged, forged)
    assert new != old
    doc["nodes"][i]["id"] = new
    for node in doc["nodes"]:
        node["parents"] = [new if p == old else p for p in node["parents"]]
    doc["frontier"] = [new if f == old else f for f in doc["frontier"]]
    reseal(doc, keep_ids={i})
    only(doc, "identity", i, node_id=new, path=f"{np_(i)}.id")


def test_created_at_and_sequence_are_not_part_of_identity(doc: Doc) -> None:
    for node in doc["nodes"]:
        node["createdAt"] = "2030-01-01T00:00:00.000+02:00"
    assert validate(doc) == []


# -- sequence --------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [1, -1, 100, -1000])
def test_sequence_off(doc: Doc, delta: int) -> None:
    i = _plain(doc)
    doc["nodes"][i]["sequence"] = i + 1 + delta
    only(doc, "sequence", i, node_id=nid(doc, i), path=f"{np_(i)}.sequence")


def test_sequence_from_zero(doc: Doc) -> None:
    doc["nodes"][0]["sequence"] = 0
    only(doc, "sequence", 0, node_id=nid(doc, 0), path="$.nodes[0].sequence")


def test_sequence_swapped(doc: Doc) -> None:
    a, b = doc["nodes"][3], doc["nodes"][4]
    a["sequence"], b["sequence"] = b["sequence"], a["sequence"]
    assert found(doc) == [("sequence", 3), ("sequence", 4)]


def test_sequence_huge(doc: Doc) -> None:
    i = _plain(doc)
    doc["nodes"][i]["sequence"] = 10**30
    only(doc, "sequence", i, node_id=nid(doc, i), path=f"{np_(i)}.sequence")


def test_sequence_integral_float_is_accepted(doc: Doc) -> None:
    # JSON.parse("3.0") is the integer 3 for the runtime too.
    text = _jsontext.dumps(doc).replace('"sequence":3}', '"sequence":3.0}', 1)
    assert '"sequence":3.0' in text
    assert validate(parse_document(text)) == []


# -- created_at -------------------------------------------------------------------------------

BAD_TIMES = [
    "2026-12-02 14:38:31.376Z",
    "2026-12-02T14:38:31.376",
    "2026-12-02",
    "14:38:31Z",
    "not a date",
    "",
    " 2026-12-02T14:38:31.376Z",
    "2026-12-02T14:38:31.376Z ",
    "2026-13-02T14:38:31Z",
    "2026-02-30T00:00:00Z",
    "2026-12-02T24:00:00Z",
    "2026-12-02T14:60:00Z",
    "2026-12-02T14:38:31.376+24:00",
    "2026-12-02T14:38:31.376+0530",
    "2026-12-02T14:38:31.Z",
    "2026-12-02T14:38:31,376Z",
    "+002026-12-02T14:38:31.376Z",
    "1796222311376",
]

GOOD_TIMES = [
    "2026-12-02T14:38:31.376Z",
    "2026-12-02T14:38:31Z",
    "2026-12-02T14:38:31.123456789Z",
    "2026-12-02T14:38:31.376+05:30",
    "2026-12-02T14:38:31.376-00:00",
    "2026-12-02t14:38:31.376z",
    "2024-02-29T23:59:59.999Z",
    "0001-01-01T00:00:00Z",
]


@pytest.mark.parametrize("bad", BAD_TIMES)
def test_created_at(doc: Doc, bad: str) -> None:
    i = _plain(doc)
    doc["nodes"][i]["createdAt"] = bad
    only(doc, "created_at", i, node_id=nid(doc, i), path=f"{np_(i)}.createdAt")


@pytest.mark.parametrize("good", GOOD_TIMES)
def test_created_at_accepted(doc: Doc, good: str) -> None:
    doc["nodes"][_plain(doc)]["createdAt"] = good
    assert validate(doc) == []


@needs_node
def test_accepted_times_load_in_the_runtime() -> None:
    """Every createdAt cwstore accepts must pass the runtime's Date.parse check."""
    out = node_stdout(
        "const a=JSON.parse(require('fs').readFileSync(0,'utf8'));"
        "process.stdout.write(JSON.stringify(a.map(s=>!Number.isNaN(Date.parse(s)))))",
        json.dumps(GOOD_TIMES),
    )
    assert json.loads(out) == [True] * len(GOOD_TIMES)


@pytest.mark.parametrize("leap", ["2016-12-31T23:59:60Z", "2026-12-02T14:38:60.500Z"])
def test_created_at_leap_second_is_refused(doc: Doc, leap: str) -> None:
    # Date.parse (the runtime's check on load) is NaN for second 60.
    i = _plain(doc)
    doc["nodes"][i]["createdAt"] = leap
    only(doc, "created_at", i, node_id=nid(doc, i), path=f"{np_(i)}.createdAt")


# -- resource_chain ----------------------------------------------------------------------------


@pytest.mark.parametrize("semantic", [False, True], ids=["file", "semantic"])
def test_resource_chain_new_version_skips_the_head(doc: Doc, semantic: bool) -> None:
    chain = chains(doc, semantic=semantic)[0]
    head, i = chain[0], chain[1]
    doc["nodes"][i]["parents"].remove(nid(doc, head))
    assert doc["nodes"][i]["parents"]
    reseal(doc)
    only(doc, "resource_chain", i, node_id=nid(doc, i), path=f"{np_(i)}.parents")


@pytest.mark.parametrize("semantic", [False, True], ids=["file", "semantic"])
def test_resource_chain_links_an_older_version(doc: Doc, semantic: bool) -> None:
    chain = chains(doc, semantic=semantic)[0]
    v1, v2, v3 = chain[:3]
    parents = doc["nodes"][v3]["parents"]
    parents[parents.index(nid(doc, v2))] = nid(doc, v1)
    reseal(doc)
    only(doc, "resource_chain", v3, node_id=nid(doc, v3), path=f"{np_(v3)}.parents")


def test_resource_chain_in_a_small_graph() -> None:
    b = GraphBuilder()
    b.system("s")
    b.goal("g")
    v1 = b.resource("src/a.ts", {"v": 1})
    b.resource("src/A.ts", {"v": 1})  # another key: keys are case-sensitive
    b.resource("src/a.ts", {"v": 2})
    b.resource("src/a.ts", {"v": 3}, parents=[v1["id"]])  # the builder adds the head
    d = b.state()
    assert validate(d) == []
    assert len(d["nodes"][5]["parents"]) == 2
    d["nodes"][5]["parents"] = [v1["id"]]
    reseal(d)
    only(d, "resource_chain", 5, node_id=nid(d, 5), path="$.nodes[5].parents")


# -- frontier_reference ---------------------------------------------------------------------


def test_frontier_reference_unknown_id(doc: Doc) -> None:
    doc["frontier"].append(MISSING)
    k = len(doc["frontier"]) - 1
    only(doc, "frontier_reference", None, node_id=MISSING, path=f"$.frontier[{k}]")


def test_frontier_reference_listed_twice(doc: Doc) -> None:
    twice = doc["frontier"][0]
    doc["frontier"].append(twice)
    k = len(doc["frontier"]) - 1
    only(doc, "frontier_reference", None, node_id=twice, path=f"$.frontier[{k}]")


def test_frontier_reference_wrong_case(doc: Doc) -> None:
    doc["frontier"][0] = doc["frontier"][0].upper()
    only(doc, "frontier_reference", None, node_id=doc["frontier"][0], path="$.frontier[0]")


def test_frontier_declared_is_authoritative(doc: Doc) -> None:
    # Any existing nodes may be declared heads (the runtime moves the frontier by a
    # flag the nodes do not record); an empty frontier is valid too.
    doc["frontier"] = [nid(doc, 0), nid(doc, 5)]
    assert validate(doc) == []
    doc["frontier"] = []
    assert validate(doc) == []


# -- unrepresentable --------------------------------------------------------------------------

UNREPRESENTABLE_VALUES = [
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("1e400", "1e400"),
    ("-1e400", "-1e400"),
    ("2**53+1", "9007199254740993"),
    ("-(2**53+1)", "-9007199254740993"),
    ("2**64", "18446744073709551616"),
    ("lone high surrogate", '"\\ud800"'),
    ("lone low surrogate", '"tail \\udfff"'),
    ("high surrogate then letter", '"\\ud83dz"'),
    ("surrogate in a nested list", '[1, ["\\udc00"]]'),
]


@pytest.mark.parametrize(
    "replacement", [pytest.param(r, id=name) for name, r in UNREPRESENTABLE_VALUES]
)
def test_unrepresentable_value(doc: Doc, replacement: str) -> None:
    i = tool_call_with_children(doc)
    d = with_probe(doc, i, replacement)
    v = validate(d)
    assert [(x.code, x.index) for x in v] == [("unrepresentable", i)], v
    assert v[0].node_id == nid(doc, i)
    assert v[0].path.startswith(f"{np_(i)}.payload.args.probe")
    if not replacement.startswith("["):
        assert v[0].path == f"{np_(i)}.payload.args.probe"


def test_unrepresentable_lone_surrogate_in_a_key(doc: Doc) -> None:
    i = tool_call_with_children(doc)
    d = with_probe(doc, i, '"\\udc00k"', as_key=True)
    only(d, "unrepresentable", i, node_id=nid(doc, i), path=f'{np_(i)}.payload.args["\\udc00k"]')


def _nested_lists(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def test_unrepresentable_nesting_deeper_than_max_depth(doc: Doc) -> None:
    i = _plain(doc)
    doc["nodes"][i]["payload"] = _nested_lists(_jsontext.MAX_DEPTH)
    reseal(doc)
    assert validate(doc) == []  # MAX_DEPTH levels: accepted
    doc["nodes"][i]["payload"] = _nested_lists(_jsontext.MAX_DEPTH + 1)
    v = validate(doc)  # the id is left as it was; identity is not checked then
    assert [(x.code, x.index) for x in v] == [("unrepresentable", i)]
    assert v[0].path == f"{np_(i)}.payload" + "[0]" * _jsontext.MAX_DEPTH


def test_unrepresentable_nesting_from_text(doc: Doc) -> None:
    i = tool_call_with_children(doc)
    depth = _jsontext.MAX_DEPTH + 5
    d = with_probe(doc, i, "[" * depth + "]" * depth)
    v = validate(d)
    assert [(x.code, x.index) for x in v] == [("unrepresentable", i)]
    assert v[0].path.startswith(f"{np_(i)}.payload.args.probe[0][0]")


@pytest.mark.parametrize("key", ["src/a\u0000b", "\u0000"])
def test_unrepresentable_resource_key_with_nul(doc: Doc, key: str) -> None:
    i = chains(doc, semantic=False)[0][-1]  # the newest version: nothing links it
    doc["nodes"][i]["resourceKey"] = key
    reseal(doc)
    only(doc, "unrepresentable", i, node_id=nid(doc, i), path=f"{np_(i)}.resourceKey")


def test_unrepresentable_resource_key_lone_surrogate(doc: Doc) -> None:
    i = chains(doc, semantic=False)[0][-1]
    key = doc["nodes"][i]["resourceKey"]
    text = _jsontext.dumps(doc)
    assert text.count(f'"resourceKey":"{key}"') >= 2
    # Only the last occurrence (node i is the newest version of the key).
    at = text.rindex(f'"resourceKey":"{key}"')
    text = text[:at] + '"resourceKey":"\\ud800"' + text[at + len(f'"resourceKey":"{key}"') :]
    only(
        parse_document(text),
        "unrepresentable",
        i,
        node_id=nid(doc, i),
        path=f"{np_(i)}.resourceKey",
    )


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_unrepresentable_resource_key_nan_token(token: str) -> None:
    # Not JSON for the runtime (JSON.parse throws); must not pass as the string "NaN".
    b = GraphBuilder()
    b.system("s")
    b.goal("g")
    node = b.resource(token, {"v": 1})
    text = _jsontext.dumps(b.state()).replace(f'"resourceKey":"{token}"', f'"resourceKey":{token}')
    only(
        parse_document(text),
        "unrepresentable",
        2,
        node_id=node["id"],
        path="$.nodes[2].resourceKey",
    )


# -- shape ------------------------------------------------------------------------------------


def test_shape_unknown_top_level_field(doc: Doc) -> None:
    doc["extra"] = {}
    only(doc, "shape", None, node_id=None, path="$.extra")


@pytest.mark.parametrize("field", ["version", "nodes", "frontier"])
def test_shape_missing_top_level_field(doc: Doc, field: str) -> None:
    del doc[field]
    if field == "nodes":
        doc["frontier"] = []  # with no nodes every frontier id would be missing too
    only(doc, "shape", None, node_id=None, path="$")


@pytest.mark.parametrize("bad", [{}, "nodes", None, 3])
def test_shape_nodes_not_a_list(doc: Doc, bad: Any) -> None:
    doc["nodes"] = bad
    doc["frontier"] = []
    only(doc, "shape", None, node_id=None, path="$.nodes")


@pytest.mark.parametrize("bad", [{}, "cw_x", None])
def test_shape_frontier_not_a_list(doc: Doc, bad: Any) -> None:
    doc["frontier"] = bad
    only(doc, "shape", None, node_id=None, path="$.frontier")


def test_shape_frontier_entry_not_a_string(doc: Doc) -> None:
    doc["frontier"].append(7)
    k = len(doc["frontier"]) - 1
    only(doc, "shape", None, node_id=None, path=f"$.frontier[{k}]")


@pytest.mark.parametrize("bad", [[], "state", None, 1])
def test_shape_document_not_an_object(bad: Any) -> None:
    only(bad, "shape", None, node_id=None, path="$")


@pytest.mark.parametrize(
    ("name", "where"), [("meta", ".meta"), ("my field", '["my field"]'), ("", '[""]')]
)
def test_shape_unknown_node_field(doc: Doc, name: str, where: str) -> None:
    i = _plain(doc)
    doc["nodes"][i][name] = 1
    only(doc, "shape", i, node_id=nid(doc, i), path=np_(i) + where)


@pytest.mark.parametrize("field", ["kind", "parents", "payload", "createdAt", "sequence"])
def test_shape_missing_node_field(doc: Doc, field: str) -> None:
    i = _plain(doc)
    del doc["nodes"][i][field]
    only(doc, "shape", i, node_id=nid(doc, i), path=np_(i))


def test_shape_missing_id_on_a_leaf(doc: Doc) -> None:
    j = leaves(doc)[0]
    del doc["nodes"][j]["id"]
    only(doc, "shape", j, node_id=None, path=np_(j))


@pytest.mark.parametrize("bad", [12345, None, ["cw_x"]])
def test_shape_id_not_a_string(doc: Doc, bad: Any) -> None:
    j = leaves(doc)[0]
    doc["nodes"][j]["id"] = bad
    only(doc, "shape", j, node_id=None, path=f"{np_(j)}.id")


@pytest.mark.parametrize("bad", ["cw_x", None, {"0": "cw_x"}])
def test_shape_parents_not_a_list(doc: Doc, bad: Any) -> None:
    i = _plain(doc)
    doc["nodes"][i]["parents"] = bad
    only(doc, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.parents")


def test_shape_parent_not_a_string(doc: Doc) -> None:
    i = _plain(doc)
    doc["nodes"][i]["parents"].append(17)
    k = len(doc["nodes"][i]["parents"]) - 1
    only(doc, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.parents[{k}]")


@pytest.mark.parametrize("bad", [None, "", 5, ["k"]])
def test_shape_resource_key(doc: Doc, bad: Any) -> None:
    i = _plain(doc)
    doc["nodes"][i]["resourceKey"] = bad
    only(doc, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.resourceKey")


@pytest.mark.parametrize("bad", [5, "node", None, [], [1, 2]])
def test_shape_node_not_an_object(doc: Doc, bad: Any) -> None:
    j = leaves(doc)[0]
    doc["nodes"][j] = bad
    only(doc, "shape", j, node_id=None, path=np_(j))


@pytest.mark.parametrize("bad", ["3", True, 2.5, None, [3]])
def test_shape_sequence(doc: Doc, bad: Any) -> None:
    i = _plain(doc)
    doc["nodes"][i]["sequence"] = bad
    only(doc, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.sequence")


@pytest.mark.parametrize("bad", [1796222311376, None, ["2026-12-02T14:38:31.376Z"]])
def test_shape_created_at_not_a_string(doc: Doc, bad: Any) -> None:
    i = _plain(doc)
    doc["nodes"][i]["createdAt"] = bad
    only(doc, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.createdAt")


def test_shape_repeated_key_in_payload(doc: Doc) -> None:
    i = tool_call_with_children(doc)
    d = with_probe(doc, i, '{"a":1,"b":2,"a":3}')
    only(d, "shape", i, node_id=nid(doc, i), path=f"{np_(i)}.payload.args.probe")


# -- every violation, not only the first --------------------------------------------------


def test_three_independent_breaks_give_three_violations(doc: Doc) -> None:
    doc["version"] = 2
    i = _plain(doc)
    doc["nodes"][i]["createdAt"] = "yesterday"
    doc["frontier"].append(MISSING)
    assert found(doc) == [("version", None), ("created_at", i), ("frontier_reference", None)]


def test_many_breaks_on_many_nodes_all_reported(doc: Doc) -> None:
    g = first(doc, lambda i, n: n["kind"] == "goal" and i > 5)
    p = _plain(doc)
    s = _latest_superseding_semantic(doc)
    t = tool_call_with_children(doc)
    assert len({g, p, s, t}) == 4
    doc["extra"] = True
    doc["nodes"][g]["kind"] = "thought"
    doc["nodes"][p]["sequence"] = 0
    doc["nodes"][p]["meta"] = 1
    # A malformed type also breaks the resourceKey rule, and the id no longer matches.
    doc["nodes"][s]["payload"]["type"] = "Bad Type"
    doc["nodes"][t]["payload"]["name"] = "renamed"
    assert Counter(found(doc)) == Counter(
        [
            ("shape", None),
            ("kind", g),
            ("shape", p),
            ("sequence", p),
            ("semantic_type", s),
            ("semantic_payload", s),
            ("identity", s),
            ("identity", t),
        ]
    )


def test_each_node_is_reported_with_its_own_id(doc: Doc) -> None:
    for i in (3, 10, 20):
        doc["nodes"][i]["createdAt"] = "never"
    v = validate(doc)
    assert [(x.index, x.node_id) for x in v] == [(i, nid(doc, i)) for i in (3, 10, 20)]
    assert all(str(x).startswith("created_at: node ") for x in v)


DEEP_FIELDS = [
    "version",
    "kind",
    "createdAt",
    "sequence",
    "resourceKey",
    "parent",
    "frontier",
    "semantic type",
]


@pytest.mark.parametrize("field", DEEP_FIELDS)
def test_validate_never_raises_on_deep_values_outside_payload(doc: Doc, field: str) -> None:
    # 100,000 nested lists where a scalar belongs: a violation, never a RecursionError.
    deep = _nested_lists(100_000)
    i = _plain(doc)
    node = doc["nodes"][i]
    expected: list[tuple[str, int | None]] = [("shape", i)]
    if field == "version":
        doc["version"] = deep
        expected = [("version", None)]
    elif field == "kind":
        node["kind"] = deep
        expected = [("kind", i)]
    elif field == "parent":
        node["parents"].append(deep)
    elif field == "frontier":
        doc["frontier"].append(deep)
        expected = [("shape", None)]
    elif field == "semantic type":
        s = _latest_superseding_semantic(doc)
        doc["nodes"][s]["payload"]["type"] = deep
        expected = [("unrepresentable", s)]  # deeper than MAX_DEPTH inside the payload
    else:
        node[field] = deep
    assert found(doc) == expected
    assert all(len(v.message) < 2000 for v in validate(doc))


# -- JSON fidelity -------------------------------------------------------------------------


def _one_node_doc(payload: Any) -> Doc:
    b = GraphBuilder()
    b.system("s")
    b.goal("keep this exactly")
    b.tool_result("probe", payload)
    return b.state()


def _round_trip(d: Doc) -> str:
    text = _jsontext.dumps(d)
    parsed = parse_document(text)
    assert validate(parsed) == []
    assert AgentState.from_json(text).to_json() == text
    return text


def _nested_mixed(levels: int) -> Any:
    value: Any = "\u0000bottom\U0001f600"
    for level in range(levels):
        value = {"k": value, "n": level} if level % 2 else [level, value]
    return value


def test_fidelity_nul_everywhere() -> None:
    text = _round_trip(_one_node_doc({"a\u0000b": "x\u0000y", "\u0000": ["\u0000"]}))
    assert "\\u0000" in text and "\u0000" not in text


@pytest.mark.parametrize("levels", [1000, 5000])
def test_fidelity_deep_nesting_without_recursion_error(levels: int) -> None:
    d = _one_node_doc(_nested_mixed(levels))
    text = _round_trip(d)
    assert text.count("[") >= levels // 2
    # from text too, pretty-printed as the runtime's JSON.stringify(state, null, 2)
    # would be (one level deeper per line), parsed by the iterative fallback.
    assert validate(parse_document(text.replace(",", ",\n  "))) == []


def test_fidelity_deep_nesting_of_a_whole_payload_from_text() -> None:
    d = _one_node_doc("PLACEHOLDER")
    levels = 5000
    deep = _nested_lists(levels)
    d["nodes"][2]["payload"] = deep
    reseal(d)
    text = _jsontext.dumps(d)
    assert text.count("[") >= levels
    assert validate(parse_document(text)) == []


def test_fidelity_long_strings() -> None:
    big = "x" * 1_000_000
    wide = "\u00e9\u4e2d\U0001f600" * 100_000
    _round_trip(_one_node_doc({"big": big, "wide": wide, "ctl": "\x01\x1f\x7f\u2028"}))


def test_fidelity_non_ascii() -> None:
    _round_trip(
        _one_node_doc(
            {
                "Grüße": "ΚΑΛΗΜΕΡΑ",
                "日本語": "テキスト",
                "עברית": "שלום",
                "emoji": "👩‍👩‍👧‍👦",
                "combining": "e\u0301",
                "precomposed": "\u00e9",
                "bmp-edge": "\uffff\ufffe",
                "astral-max": "\U0010ffff",
            }
        )
    )


def test_fidelity_largest_safe_integers() -> None:
    top = 2**53 - 1
    text = _round_trip(_one_node_doc({"max": top, "min": -top, "list": [top, -top, 0]}))
    assert str(top) in text and str(-top) in text


def test_fidelity_numbers_in_runtime_spelling() -> None:
    d = _one_node_doc({"f": [0.1, 5e-324, 1e21, 1e-7, 123456.789, 2**53, 10**20]})
    text = _round_trip(d)
    for spelled in (
        "0.1",
        "5e-324",
        "1e+21",
        "1e-7",
        "123456.789",
        "9007199254740992",
        "100000000000000000000",
    ):
        assert spelled in text


def test_round_trip_of_the_example_text(example: Doc) -> None:
    # The runtime writes JSON.stringify(state, null, 2); json.dumps(indent=2) writes the
    # same text for a document without floats, and its compact form is valid here.
    pretty = json.dumps(example, indent=2, ensure_ascii=False) + "\n"
    assert pretty == EXAMPLE_FILE.read_text(encoding="utf-8")
    compact = json.dumps(json.loads(pretty), separators=(",", ":"), ensure_ascii=False)
    assert AgentState.from_json(pretty).to_json() == compact
    assert AgentState.from_json(pretty.encode("utf-8")).to_json() == compact


_NODE_REWRITE = (
    "const texts=JSON.parse(require('fs').readFileSync(0,'utf8'));"
    "const out=texts.map(t=>{const v=JSON.parse(t);"
    "return [JSON.stringify(v,null,2),JSON.stringify(v)];});"
    "process.stdout.write(JSON.stringify(out));"
)


@needs_node
def test_round_trip_matches_node_byte_for_byte(example: Doc) -> None:
    docs = (
        [example]
        + [generate_session(seed, 4, odd_payloads=True) for seed in (1, 2, 3, SEED)]
        + [_one_node_doc(_nested_mixed(40)), _one_node_doc(_nested_lists(3000))]
    )
    # Node re-serializes the documents as the runtime would write them (pretty, as
    # saved to disk, and compact); cwstore must read the pretty text and give back
    # exactly Node's compact text.
    pairs = json.loads(node_stdout(_NODE_REWRITE, json.dumps([_jsontext.dumps(d) for d in docs])))
    assert len(pairs) == len(docs)
    for d, (pretty, compact) in zip(docs, pairs, strict=True):
        assert validate(parse_document(pretty)) == []
        assert AgentState.from_json(pretty).to_json() == compact
        assert _jsontext.dumps(d) == compact


def test_compact_form_of_generated_odd_sessions_python_side() -> None:
    # Without Node: reading compact text and writing it again is the identity, and
    # the ids in the text are the ones cwstore computes.
    for seed in range(6):
        d = generate_session(seed, 3, odd_payloads=True)
        text = _jsontext.dumps(d)
        state = AgentState.from_json(text)
        assert state.to_json() == text
        for node in state.nodes:
            assert node.id == compute_id(
                node.kind, list(node.parents), node.payload, node.resource_key
            )
