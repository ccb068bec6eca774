"""prepare_batch: each missing id computed once, in the same pass as the checks."""

from __future__ import annotations

import pytest

from cwstore import ValidationError, compute_id
from cwstore._store_base import prepare_batch

GOAL = compute_id("goal", [], "g")


def test_missing_ids_are_the_content_ids_and_later_nodes_may_name_them() -> None:
    first = {"kind": "inference", "parents": [GOAL], "payload": {"b": 1, "a": 2}}
    first_id = compute_id("inference", [GOAL], {"b": 1, "a": 2})
    second = {"kind": "answer", "parents": [first_id], "payload": "done"}
    batch = prepare_batch([first, second])
    assert [n["id"] for n in batch.nodes] == [first_id, compute_id("answer", [first_id], "done")]
    assert list(batch.nodes[0])[:3] == ["id", "kind", "parents"]
    assert "id" not in first  # the caller's dicts are left alone


def test_a_parent_only_a_later_computed_id_matches_is_parent_order() -> None:
    later = {"kind": "inference", "parents": [GOAL], "payload": "later"}
    later_id = compute_id("inference", [GOAL], "later")
    early = {"kind": "inference", "parents": [later_id], "payload": "early"}
    with pytest.raises(ValidationError) as info:
        prepare_batch([early, later])
    [v] = info.value.violations
    assert (v.code, v.index, v.path) == ("parent_order", 0, "$[0].parents[0]")
    assert v.node_id == compute_id("inference", [later_id], "early")


def test_a_violation_of_a_node_without_id_names_the_computed_id() -> None:
    bad = {"kind": "goal", "parents": [], "payload": "x", "createdAt": "yesterday"}
    with pytest.raises(ValidationError) as info:
        prepare_batch([bad])
    [v] = info.value.violations
    assert (v.code, v.index, v.node_id) == ("created_at", 0, compute_id("goal", [], "x"))


def test_bad_content_gets_no_id_and_is_reported_once() -> None:
    bad = {"kind": "tool_result", "parents": [GOAL], "payload": {"n": float("nan")}}
    with pytest.raises(ValidationError) as info:
        prepare_batch([bad])
    [v] = info.value.violations
    assert (v.code, v.index, v.node_id, v.path) == ("unrepresentable", 0, None, "$[0].payload.n")
