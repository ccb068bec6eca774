"""The import fuzz generator driven through the SQL door: ``append_v1`` as a writer.

The TypeScript runtime writes through ``cwstore.append_v1`` with no Python in front of
it, so the database alone must hold the rules. Each example takes a stored prefix of a
real document and a mutated batch (the mutations of ``test_fuzz.py``: wrong types,
dropped and added fields, broken parents, odd Unicode, huge numbers and bare
``1e400``/``NaN`` tokens, deep nesting, 1 MB strings, duplicated and swapped nodes, odd
timestamps, broken semantic payloads, bad frontiers), sends the batch as the JSON text
the runtime would send, as a ``cwstore_writer`` login role, and checks:

* the door accepts the batch exactly when :func:`cwstore.validate` accepts the graph
  the batch would leave (the stored prefix, then the batch's new nodes numbered on, a
  node given twice with one content written once; the declared frontier or SPEC
  section 4's fold), except for identity: the database checks an id's form, not that
  it is the hash of the content (docs/reliability.md, "What the SQL door does not
  check"), so a wrong-hash id is the one violation the door lets through;
* a refused batch leaves the graph as it was, with a SPEC code the validator also
  reports (or PostgreSQL's own 22P02 when the text is not JSON at all);
* an accepted batch exports as exactly the JSON the runtime writes for that graph, and
  that export imports back (``cwstore import``) and exports again unchanged; if the
  door let a wrong-hash id through, the import refuses it with ``identity`` only.
"""

from __future__ import annotations

import copy
import json
import math
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.reliability import SPEC_CODES
from test_fuzz import (
    BASES,
    FUZZ_SETTINGS,
    RAW,
    Case,
    _as_text,
    _event,
    _mutate,
    _reseal,
    _runtime_text,
)

import cwstore
from cwstore import ValidationError, _jsontext, fold_frontier
from cwstore.document import parse_document
from cwstore.identity import canonical_json, identity_object

TENANT = "fuzz"
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Door:
    def __init__(self, admin: str, writer: str) -> None:
        self.admin_dsn = admin
        self.admin = psycopg.connect(admin, autocommit=True)
        self.writer = psycopg.connect(writer, autocommit=True)
        self.store = cwstore.connect_sync(admin, max_size=2, migrate_schema=False, tenant=TENANT)

    def close(self) -> None:
        self.store.close()
        self.writer.close()
        self.admin.close()

    def stored(self, graph: str) -> tuple[int, int]:
        row = self.admin.execute(
            "SELECT g.length, (SELECT count(*) FROM cwstore.nodes n WHERE n.graph_id = g.graph_id)"
            " FROM cwstore.graphs g WHERE g.name = %s",
            (graph,),
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))


@pytest.fixture(scope="module")
def door(db_dsn: str, login_role: Any) -> Iterator[Door]:
    d = Door(db_dsn, login_role("cwstore_writer", TENANT))
    try:
        yield d
    finally:
        d.close()


def _bare(value: Any, depth: int = 0) -> Any:
    """``value`` with each non-finite float marked to be written as its bare token
    (``NaN``, ``Infinity``): what a client that is not JSON.stringify might send. The
    mutations put such numbers at most four levels into a node."""
    if isinstance(value, float) and not math.isfinite(value):
        token = "NaN" if math.isnan(value) else "-Infinity" if value < 0 else "Infinity"
        return RAW + token + RAW
    if depth < 5 and isinstance(value, dict):
        return {k: _bare(v, depth + 1) for k, v in value.items()}
    if depth < 5 and isinstance(value, list):
        return [_bare(v, depth + 1) for v in value]
    return value


def _door_text(batch: list[Any]) -> str:
    """The batch as the JSON text sent to append_v1 (bare tokens written bare)."""
    text = _as_text(_bare(batch))
    for token in ("NaN", "Infinity", "-Infinity"):
        text = text.replace(_jsontext.dumps(RAW + token + RAW), token)
    # A lone surrogate as JSON.stringify writes it (escaped): raw, it is not UTF-8.
    return LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _content(node: Any) -> Any:
    """What a node's id stands for, comparable across two nodes with one id (content
    that cannot be hashed compares as its text, or, failing that, as itself)."""
    try:
        obj = identity_object(
            node["kind"], node["parents"], node["payload"], node.get("resourceKey")
        )
        return canonical_json(obj)
    except Exception:
        pass
    try:
        return _door_text([{f: node.get(f) for f in ("kind", "parents", "payload", "resourceKey")}])
    except Exception:
        return object()


def _result(
    prefix: list[dict[str, Any]], batch: list[Any], frontier: list[Any] | None
) -> tuple[dict[str, Any] | None, list[Any]]:
    """The document the batch would leave, and its new nodes; None when the batch gives
    one id two contents (the door must refuse it: duplicate_id)."""
    by_id = {n["id"]: _content(n) for n in prefix}
    new: list[Any] = []
    for node in batch:
        nid = node.get("id") if isinstance(node, dict) else None
        if isinstance(nid, str) and nid in by_id:
            if by_id[nid] != _content(node):
                return None, []
            continue
        if isinstance(nid, str):
            by_id[nid] = _content(node)
        if isinstance(node, dict):
            node = {**node, "sequence": len(prefix) + len(new) + 1}
        new.append(node)
    nodes = prefix + new
    if frontier is None:
        try:
            frontier = fold_frontier(nodes)
        except Exception:
            frontier = []
    return {"version": 1, "nodes": nodes, "frontier": frontier}, new


def _wrong_hash_only(violations: list[Any]) -> bool:
    """Every violation is an id of the right form that is not its content's hash."""
    return all(
        v.code == "identity" and "does not match" in v.message and v.node_id is not None
        for v in violations
    )


@FUZZ_SETTINGS
@given(data=st.data())
def test_the_sql_door_accepts_exactly_what_import_accepts(door: Door, data: st.DataObject) -> None:
    base = copy.deepcopy(BASES[data.draw(st.sampled_from(range(len(BASES))), label="base")])
    nodes = base["nodes"]
    k = data.draw(st.integers(0, len(nodes) - 1), label="stored prefix")
    prefix, batch = nodes[:k], copy.deepcopy(nodes[k:])
    case = Case({"nodes": batch}, batch_prefix=copy.deepcopy(prefix))
    _mutate(data, case, batch)
    if case.reseal:
        _reseal({"nodes": case.batch_prefix + batch}, {i + k for i in case.keep_order}, case.done)
    frontier: list[Any] | None = None
    if data.draw(st.booleans(), label="declare frontier"):
        ids = [n.get("id") for n in batch if isinstance(n, dict) and "id" in n]
        choices: list[list[Any]] = [ids[-1:], ids[:2], [*ids[-1:], *ids[-1:]], ["cw_" + "e" * 24]]
        frontier = data.draw(st.sampled_from(choices), label="frontier")
    done = case.done

    graph = f"door-{uuid.uuid4().hex}"
    if prefix:
        assert (
            door.store.import_state(
                graph, {"version": 1, "nodes": prefix, "frontier": fold_frontier(prefix)}
            )
            == k
        )
    text = _door_text(batch)
    try:
        sent = parse_document(text)
    except cwstore.InputError:
        sent = None  # bare NaN/Infinity tokens: not JSON at all
    result, _new = _result(prefix, sent, frontier) if isinstance(sent, list) else (None, [])
    verdict = None if result is None else cwstore.validate(result)

    try:
        door.writer.execute(
            "SELECT * FROM cwstore.append_v1(%s, %s::json, NULL, %s::json)",
            (graph, text, None if frontier is None else json.dumps(frontier)),
        ).fetchall()
    except psycopg.Error as exc:
        state = exc.diag.sqlstate
        _event(f"refused: {state}")
        assert door.stored(graph) == (k, k), f"a refused batch left nodes ({done})"
        if sent is None:
            assert state == "22P02", (state, done)
            return
        assert state in ("CW400", "CW410"), (state, exc.diag.message_primary, done)
        if result is None:
            assert state == "CW400", done
            assert json.loads(exc.diag.message_detail or "{}")["code"] == "duplicate_id"
            return
        assert verdict, (
            f"the door refused ({exc.diag.message_primary}) what cwstore.validate accepts ({done})"
        )
        code = (
            "resource_chain"
            if state == "CW410"
            else json.loads(exc.diag.message_detail or "{}")["code"]
        )
        assert code in SPEC_CODES, done
        # U+0000 outside a payload: the door names it (unrepresentable) before the field's
        # own rule, which is what the validator reports.
        nul_outside = code == "unrepresentable" and "\\u0000" in text
        assert code in {v.code for v in verdict} or nul_outside, (
            code,
            [str(v) for v in verdict],
            done,
        )
        return
    _event("accepted" + (" (wrong-hash id)" if verdict else ""))
    assert sent is not None and result is not None, f"the door accepted {done}"
    assert verdict is not None
    assert _wrong_hash_only(verdict), (
        f"the door accepted what cwstore.validate refuses: {[str(v) for v in verdict]} ({done})"
    )
    assert door.stored(graph) == (len(result["nodes"]),) * 2, done
    exported = door.store.export_json(graph)
    assert exported == _runtime_text(result["nodes"], result["frontier"]), (
        f"export differs ({done})"
    )
    again = f"door-{uuid.uuid4().hex}"
    try:
        door.store.import_state(again, exported)
    except ValidationError as exc:
        assert verdict and _wrong_hash_only(exc.violations), (exc.violations, done)
        return
    assert not verdict
    assert door.store.export_json(again) == exported, done
