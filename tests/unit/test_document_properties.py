"""Property tests of the pure core: identity, graphs, the frontier fold, JSON text.

(a) identity ignores the key order of payload objects; (b) random graphs built the
runtime's way always validate, and the frontier fold agrees with an independent
reference fold (and with the builder's own frontier under the runtime agent's habit);
(c) ``_jsontext`` writes what it reads, member order included, and its fast and slow
writers agree; (d) ``js_number`` prints floats exactly as Node's ``String(x)`` does.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.documents import GraphBuilder, generate_session

from cwstore import _jsontext
from cwstore.document import KINDS, fold_frontier, resource_heads, validate
from cwstore.identity import canonical_json, compute_id, key_order

NODE = shutil.which("node")
MAX_SAFE = _jsontext.MAX_SAFE_INTEGER

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- strategies ----------------------------------------------------------------------------

safe_ints = st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
valid_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
scalars = st.none() | st.booleans() | safe_ints | finite_floats | valid_text


def json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=6),
        max_leaves=30,
    )


# Lowercase ASCII words: no two distinct keys collate equal under ICU, and none is
# integer-like, so the identity's order is fully determined by the keys.
plain_keys = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=6)
any_keys = valid_text


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same value with every object's members in a random insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values for JavaScript, object member order included."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        # JavaScript holds every number as a double: 44475149731898730 (what
        # JSON.stringify writes for that double) and 4.447514973189873e16 are one value.
        return float(a) == float(b)
    return type(a) is type(b) and a == b


# -- (a) identity ignores key order ----------------------------------------------------------


@SETTINGS
@given(
    payload=json_values(plain_keys),
    kind=st.sampled_from(KINDS),
    rkey=st.none() | st.text("abc/:._-", min_size=1, max_size=8),
    seed=st.integers(0, 2**32),
)
def test_identity_ignores_key_order(payload: Any, kind: str, rkey: str | None, seed: int) -> None:
    parents = ["cw_000000000000000000000001", "cw_00000000000000000000000a"]
    shuffled = _shuffled(payload, random.Random(seed))
    assert canonical_json(shuffled) == canonical_json(payload)
    assert compute_id(kind, parents, shuffled, rkey) == compute_id(kind, parents, payload, rkey)


@SETTINGS
@given(payload=st.dictionaries(plain_keys, safe_ints, min_size=2, max_size=8))
def test_identity_sees_values_and_keys(payload: dict[str, int]) -> None:
    base = compute_id("goal", [], payload)
    first = next(iter(payload))
    changed = dict(payload)
    changed[first] = payload[first] + 1
    assert compute_id("goal", [], changed) != base
    renamed = {("z" + k if k == first else k): v for k, v in payload.items()}
    if "z" + first not in payload:
        assert compute_id("goal", [], renamed) != base
    assert compute_id("goal", ["cw_000000000000000000000001"], payload) != base


@SETTINGS
@given(payload=st.dictionaries(any_keys, safe_ints, max_size=8))
def test_key_order_is_a_permutation_of_the_keys(payload: dict[str, int]) -> None:
    order = key_order(payload)
    assert sorted(order) == sorted(payload)
    # Writing the keys in that order and ordering again changes nothing.
    assert key_order({k: payload[k] for k in order}) == order


# -- (b) random graphs and the frontier fold -----------------------------------------------


def reference_fold(nodes: list[dict[str, Any]]) -> list[str]:
    """SPEC section 4, written out on its own: semantic nodes and parentless system
    nodes leave F alone; every other node replaces its parents with itself."""
    heads: list[str] = []
    for node in nodes:
        if node["kind"] == "semantic" or (node["kind"] == "system" and not node["parents"]):
            continue
        heads = [h for h in heads if h not in node["parents"]]
        if node["id"] not in heads:
            heads.append(node["id"])
    return heads


OTHER_KINDS = [k for k in KINDS if k not in ("semantic", "system")]
step = st.tuples(
    st.sampled_from([*OTHER_KINDS, "semantic", "system"]),
    st.none() | st.lists(st.integers(0, 10**6), max_size=4),  # None: take the frontier
    st.none() | st.sampled_from(["src/a.ts", "src/b.ts", "src/A.ts", "notes"]),
    st.booleans(),  # advance, where the mode lets it vary
    st.sampled_from(["memory", "preference", "decision"]),
    st.sampled_from(["k1", "k2", "deep/key.x"]),
)


def _build(steps: list[tuple[Any, ...]], runtime_habit: bool) -> GraphBuilder:
    b = GraphBuilder()
    for n, (kind, picks, rkey, advance, stype, skey) in enumerate(steps):
        ids = [node["id"] for node in b.nodes]
        parents = None if picks is None else [ids[p % len(ids)] for p in picks if ids]
        payload = {"n": n, "text": f"step {n}"}
        if kind == "semantic":
            b.semantic(stype, skey, {"n": n}, parents=parents)
        elif runtime_habit:
            if kind == "system":
                # the runtime: the first system node parentless, without advancing
                if b.latest("system") is None:
                    b.append("system", payload, [], advance=False)
                elif b.frontier:
                    b.append("system", payload, parents or b.frontier)
                else:
                    b.append("system", payload, [], advance=False)
            else:
                b.append(kind, payload, parents, rkey)
        else:
            b.append(kind, payload, parents, rkey, advance)
    return b


@SETTINGS
@given(steps=st.lists(step, min_size=1, max_size=40))
def test_random_graphs_validate_and_fold_like_the_runtime(steps: list[tuple[Any, ...]]) -> None:
    b = _build(steps, runtime_habit=True)
    doc = b.state()
    assert validate(doc) == []
    assert len(doc["nodes"]) == len(steps)  # payloads are unique: no repeated content
    folded = fold_frontier(doc["nodes"])
    assert folded == reference_fold(doc["nodes"])
    assert folded == b.frontier
    assert resource_heads(doc["nodes"]) == b.heads


@SETTINGS
@given(steps=st.lists(step, min_size=1, max_size=40), cut=st.integers(0, 40))
def test_random_advance_flags_still_validate(steps: list[tuple[Any, ...]], cut: int) -> None:
    b = _build(steps, runtime_habit=False)
    doc = b.state()
    assert validate(doc) == []  # the declared frontier is checked for references only
    nodes = doc["nodes"]
    assert fold_frontier(nodes) == reference_fold(nodes)
    # folding in two halves (the store derives the frontier append by append)
    k = min(cut, len(nodes))
    assert fold_frontier(nodes[k:], start=fold_frontier(nodes[:k])) == fold_frontier(nodes)


@pytest.mark.parametrize("seed", range(12))
def test_generated_sessions_fold_to_their_frontier(seed: int) -> None:
    doc = generate_session(seed, 1 + seed % 5, branches=seed % 3 != 0, odd_payloads=seed % 2 == 1)
    assert validate(doc) == []
    assert doc["frontier"] == fold_frontier(doc["nodes"]) == reference_fold(doc["nodes"])
    assert [n["sequence"] for n in doc["nodes"]] == list(range(1, len(doc["nodes"]) + 1))


def test_generate_session_is_deterministic_and_seeded() -> None:
    a = generate_session(5, 4, odd_payloads=True)
    assert _jsontext.dumps(a) == _jsontext.dumps(generate_session(5, 4, odd_payloads=True))
    assert _jsontext.dumps(a) != _jsontext.dumps(generate_session(6, 4, odd_payloads=True))


def test_builder_repeated_content_moves_the_frontier_like_the_runtime() -> None:
    # Appending existing content stores nothing but still advances (the runtime's
    # append does); the fold cannot see that, which is why a declared frontier wins.
    b = GraphBuilder()
    b.system("s")
    goal = b.goal("g")
    b.inference("x")
    again = b.append("goal", "g", goal["parents"])
    assert again == goal and len(b) == 3
    assert b.frontier == [b.nodes[2]["id"], goal["id"]]
    assert fold_frontier(b.nodes) == [b.nodes[2]["id"]]


def test_builder_clock_and_field_order() -> None:
    b = GraphBuilder(base_time="2026-12-31T23:59:59.998Z")
    b.system("s")
    b.goal("g")
    r = b.resource("k", {"v": 1})
    nodes = b.nodes
    assert [n["createdAt"] for n in nodes] == [
        "2026-12-31T23:59:59.998Z",
        "2026-12-31T23:59:59.999Z",
        "2027-01-01T00:00:00.000Z",
    ]
    assert list(nodes[1]) == ["id", "kind", "parents", "payload", "createdAt", "sequence"]
    assert list(r) == [*list(nodes[1]), "resourceKey"]


# -- (c) JSON text -------------------------------------------------------------------------------


@SETTINGS
@given(value=json_values(any_keys))
def test_loads_dumps_round_trip(value: Any) -> None:
    text = _jsontext.dumps(value)
    back = _jsontext.loads(text)
    assert _same(back, value)
    assert _jsontext.dumps(back) == text


@SETTINGS
@given(value=json_values(any_keys))
def test_fast_and_slow_writers_agree(value: Any) -> None:
    for order in (None, key_order):
        slow = _jsontext._write_slow(value, order)
        try:
            fast = _jsontext._dumps_fast(_jsontext._fast_copy(value, order))
        except _jsontext._Slow:
            fast = slow  # the fast path declined this value; write() takes the slow one
        assert fast == slow
        assert _jsontext.write(value, order) == slow


@SETTINGS
@given(value=json_values(any_keys))
def test_problems_finds_nothing_in_valid_values(value: Any) -> None:
    assert list(_jsontext.problems(value)) == []


@pytest.mark.parametrize("text", ["9007199254740994.0", "9.007199254740994e15", "-9.5e15"])
def test_fast_writer_integral_floats_beyond_2_53(text: str) -> None:
    # repr() writes 9007199254740994.0 where JSON.stringify writes 9007199254740994.
    value = _jsontext.loads(text)
    expected = _jsontext.js_number(value)
    assert _jsontext.dumps(value) == expected
    assert canonical_json({"n": value}) == '{"n":' + expected + "}"


# -- (d) js_number against Node ---------------------------------------------------------------


def _floats() -> list[float]:
    rng = random.Random(20261202)
    out: list[float] = [
        0.1, 0.2 + 0.1, 1e21, 1e20, 999999999999999900000.0, 1e-7, 1.5e-7, 1e-6, 5e-324,
        1.7976931348623157e308, 2.0**53, 2.0**53 + 2, 2.0**60, 123456789.125, -0.0, 1e16,
        4.35, 0.000123, 1e-5, 100.0, 1234567890123456789.0,
    ]  # fmt: skip
    while len(out) < 300:
        choice = rng.random()
        if choice < 0.4:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        elif choice < 0.8:
            x = rng.uniform(-1, 1) * 10 ** rng.uniform(-330, 309)
        else:
            x = float(rng.randint(-(2**70), 2**70)) / 10 ** rng.randint(0, 25)
        if math.isfinite(x):
            out.append(x)
    return out


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed (needs `node`)")
def test_js_number_matches_node_string() -> None:
    floats = _floats()
    assert len(floats) == 300
    assert NODE is not None
    run = subprocess.run(
        [
            NODE,
            "-e",
            "const a=JSON.parse(require('fs').readFileSync(0,'utf8'));"
            "process.stdout.write(JSON.stringify(a.map(x=>[String(x),JSON.stringify(x)])))",
        ],
        input=json.dumps(floats).encode(),  # repr() round-trips every double
        capture_output=True,
        timeout=60,
        check=True,
    )
    node = json.loads(run.stdout)
    mismatches = [(x, js, ours) for x, (js, _) in zip(floats, node, strict=True)
                  if (ours := _jsontext.js_number(x)) != js]  # fmt: skip
    assert mismatches == []
    # The writer (fast path included) agrees with JSON.stringify.
    written = [
        (x, js, _jsontext.dumps(x))
        for x, (_, js) in zip(floats, node, strict=True)
        if _jsontext.dumps(x) != js
    ]
    assert written == []
