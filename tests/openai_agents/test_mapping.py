"""The pure mapping of SDK items to nodes, and the backward fold of a session's nodes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cwstore.openai_agents._mapping import (
    CLEAR_KEY,
    Fold,
    batch_node,
    clear_node,
    graph_name,
    item_kind,
    pop_node,
)


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        ({"role": "user", "content": "hi"}, "goal"),
        ({"type": "message", "role": "user", "content": []}, "goal"),
        ({"type": "message", "role": "assistant", "content": []}, "answer"),
        ({"role": "system", "content": "be brief"}, "system"),
        ({"role": "developer", "content": "be brief"}, "system"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, "tool_call"),
        ({"type": "computer_call", "call_id": "c"}, "tool_call"),
        ({"type": "mcp_approval_request", "id": "a"}, "tool_call"),
        ({"type": "function_call_output", "call_id": "c", "output": "x"}, "tool_result"),
        ({"type": "computer_call_output", "call_id": "c"}, "tool_result"),
        ({"type": "mcp_approval_response", "approve": True}, "tool_result"),
        ({"type": "mcp_list_tools", "tools": []}, "tool_result"),
        ({"type": "reasoning", "summary": []}, "inference"),
        ({"type": "compaction", "encrypted_content": "x"}, "inference"),
        ({"type": "item_reference", "id": "x"}, "inference"),
        ({"role": "tool", "content": "?"}, "inference"),
        ({"type": 7}, "inference"),
    ],
)
def test_item_kind(item: dict[str, Any], kind: str) -> None:
    assert item_kind(item) == kind


def test_nodes() -> None:
    items = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert batch_node(items, ()) == {"kind": "answer", "parents": [], "payload": {"items": items}}
    assert batch_node(items[:1], ["cw_b"])["parents"] == ["cw_b"]
    assert batch_node(items[:1], ["cw_c", "cw_b", "cw_c"])["parents"] == ["cw_b", "cw_c"]
    assert pop_node(["cw_b"], "cw_a", 1) == {
        "kind": "system",
        "parents": ["cw_a", "cw_b"],
        "payload": {"pop": {"node": "cw_a", "index": 1}},
    }
    assert pop_node(["cw_a"], "cw_a", 0)["parents"] == ["cw_a"]
    assert clear_node(["cw_b"], None)["resourceKey"] == CLEAR_KEY
    assert clear_node(["cw_b"], "cw_a")["parents"] == ["cw_a", "cw_b"]
    assert graph_name("s:1") == "openai-agents:s:1"


def _fold(nodes: list[dict[str, Any]], limit: int | None) -> list[Any]:
    fold = Fold(limit)
    for i, payload in reversed(list(enumerate(nodes))):
        fold.add(f"n{i}", json.dumps(payload))
    return fold.items()


def test_fold_applies_pops_to_the_tail_at_their_time() -> None:
    nodes: list[dict[str, Any]] = [
        {"items": [1, 2, 3]},
        {"pop": {}},
        {"items": [4]},
        {"pop": {}},
        {"pop": {}},
        {"items": [5, 6]},
    ]
    assert _fold(nodes, None) == [1, 5, 6]
    assert _fold(nodes, 2) == [5, 6]
    assert _fold(nodes, 3) == [1, 5, 6]
    assert _fold(nodes, 10) == [1, 5, 6]
    assert _fold([{"pop": {}}, {"items": [1]}], None) == [1]


def test_fold_reports_where_each_item_is() -> None:
    fold = Fold(None)
    fold.add("b", json.dumps({"items": ["x", "y"]}))
    fold.add("a", json.dumps({"items": ["w"]}))
    assert fold.found == [("y", "b", 1), ("x", "b", 0), ("w", "a", 0)]
    assert not fold.full
    assert Fold(0).full
