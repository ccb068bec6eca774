"""cwstore._suffix: reading a state for save, the prefix it is checked against, and the
suffix check (pure, no server)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from support.documents import GraphBuilder

from cwstore import AgentState, ValidationError, compute_id, validate
from cwstore._suffix import SavedPrefix, SaveMemory, check_suffix, read_state
from cwstore.document import CausalNode


def _state(extra: int = 0) -> dict[str, Any]:
    b = GraphBuilder()
    b.system("You are a test agent.")
    b.goal("write the report")
    b.resource("report.md", {"content": "v1"})
    b.semantic("memory", "owner", "ada")
    for i in range(extra):
        b.inference(f"step {i}")
    return b.state()


def test_a_valid_suffix_passes_and_comes_back_as_runtime_objects() -> None:
    state = _state(extra=2)
    todo = read_state(state)
    assert todo.ids == [n["id"] for n in state["nodes"]]
    new = check_suffix(todo, SavedPrefix.of_state(todo, 4))
    assert new == state["nodes"][4:]
    model = read_state(AgentState.from_obj(state))
    assert check_suffix(model, SavedPrefix.of_state(model, 4)) == state["nodes"][4:]


def test_the_suffix_check_finds_what_validate_finds_past_the_prefix() -> None:
    state = _state(extra=2)
    bad = copy.deepcopy(state)
    bad["nodes"][5]["payload"] = "tampered"
    bad["nodes"][4]["sequence"] = 40
    todo = read_state(bad)
    with pytest.raises(ValidationError) as info:
        check_suffix(todo, SavedPrefix.of_state(todo, 4))
    assert sorted((v.code, v.index) for v in info.value.violations) == sorted(
        (v.code, v.index) for v in validate(bad)
    )
    assert {(v.code, v.index) for v in info.value.violations} == {
        ("sequence", 4),
        ("identity", 5),
    }


def test_a_new_version_of_a_key_must_link_to_the_prefix_head() -> None:
    b = GraphBuilder()
    b.system("You are a test agent.")
    first = b.resource("report.md", {"content": "v1"})
    b.resource("report.md", {"content": "v2"})
    state = b.state()
    payload = {"content": "v3"}
    branch = {
        "id": compute_id("resource", [first["id"]], payload, "report.md"),
        "kind": "resource",
        "parents": [first["id"]],
        "payload": payload,
        "createdAt": first["createdAt"],
        "resourceKey": "report.md",
    }
    todo = read_state({**state, "nodes": [*state["nodes"], {**branch, "sequence": 4}]})
    with pytest.raises(ValidationError) as info:
        check_suffix(todo, SavedPrefix.of_state(todo, 3))
    assert [(v.code, v.index) for v in info.value.violations] == [("resource_chain", 3)]


def test_a_state_whose_nodes_cannot_be_read_is_validated_in_full() -> None:
    """The document's own fields are checked when it is read; its nodes' ids when a
    save needs them, and then a node that has none fails the whole document's check."""
    state = _state()
    state["nodes"][1] = ["not", "a", "node"]
    todo = read_state(state)
    with pytest.raises(ValidationError) as info:
        _ = todo.ids
    assert ("shape", 1) in {(v.code, v.index) for v in info.value.violations}
    prefix = SavedPrefix.of_state(read_state(_state()), 3)
    with pytest.raises(ValidationError):
        read_state(state).extends(prefix)
    with pytest.raises(ValidationError) as info:
        read_state({"version": 2, "nodes": [], "frontier": []})
    assert info.value.codes == ["version"]


def test_a_prefix_is_extended_by_ids_or_by_the_same_immutable_nodes() -> None:
    state = _state(extra=1)
    model = AgentState.from_obj(state)
    prefix = SavedPrefix.of_state(read_state(model), 4)
    assert read_state(model).extends(prefix)
    assert read_state(state).extends(prefix)  # other objects, same ids
    changed = copy.deepcopy(state)
    changed["nodes"][2]["id"] = "cw_" + "0" * 24
    assert not read_state(changed).extends(prefix)
    assert not read_state({**state, "nodes": state["nodes"][:3]}).extends(prefix)
    longer = prefix.extended(state["nodes"][4:], list(model.nodes[4:]))
    assert (longer.length, longer.ids) == (5, [n["id"] for n in state["nodes"]])
    assert longer.holds(state["nodes"][4]["id"]) and not prefix.holds(state["nodes"][4]["id"])


def test_a_whole_state_is_extended_by_a_state_that_starts_with_its_nodes() -> None:
    """A prefix that is a whole AgentState is compared with the next state as one tuple
    against another: the same node objects, or equal ones, extend it; a state with a
    node of other content in its place, or shorter, does not."""
    state = _state(extra=2)
    model = AgentState.from_obj(state)
    first = AgentState.model_construct(
        version=1, nodes=model.nodes[:5], frontier=(model.nodes[4].id,)
    )
    prefix = SavedPrefix.of_state(read_state(first), 5)
    assert prefix.state_nodes is first.nodes
    assert read_state(model).extends(prefix)
    assert read_state(first).extends(prefix)
    equal = AgentState.from_obj(state)  # other objects, same content
    assert equal.nodes[0] is not model.nodes[0] and read_state(equal).extends(prefix)
    other = copy.deepcopy(state)
    other["nodes"][2]["payload"] = {"content": "v2"}
    other["nodes"][2]["id"] = compute_id(
        "resource", other["nodes"][2]["parents"], other["nodes"][2]["payload"], "report.md"
    )
    replaced = AgentState.model_construct(
        version=1,
        nodes=(*model.nodes[:2], CausalNode.from_obj(other["nodes"][2]), *model.nodes[3:]),
        frontier=model.frontier,
    )
    assert not read_state(replaced).extends(prefix)
    shorter = AgentState.model_construct(
        version=1, nodes=model.nodes[:4], frontier=(model.nodes[3].id,)
    )
    assert not read_state(shorter).extends(prefix)
    # Nodes have no order: a member that differs ends the comparison with TypeError.
    with pytest.raises(TypeError):
        _ = model.nodes[0] < model.nodes[1]  # type: ignore[operator]


def test_the_memory_keeps_the_most_recently_saved_graphs() -> None:
    todo = read_state(_state())
    memory = SaveMemory(graphs=2)
    for graph in ("a", "b", "c"):
        memory.remember(graph, SavedPrefix.of_state(todo, 3))
    assert memory.usable("a", todo, None) is None
    assert memory.usable("b", todo, None) is not None
    assert memory.usable("c", todo, 3) is not None
    assert memory.usable("c", todo, 2) is None


class _Unread(dict[str, Any]):
    """A node dict that fails the test when anything reads one of its members."""

    def __getitem__(self, key: str) -> Any:
        raise AssertionError(f"node member {key!r} read")

    def get(self, key: str, default: Any = None) -> Any:
        raise AssertionError(f"node member {key!r} read")


def test_a_dict_state_extended_in_place_is_compared_without_reading_its_prefix() -> None:
    """The very node dicts saved before are taken as saved: a save of the same document
    one node longer reads none of them (so it costs what its new node costs)."""
    state = _state(extra=1)
    nodes = [_Unread(n) for n in state["nodes"][:4]] + state["nodes"][4:]
    prefix = replace(SavedPrefix.of_state(read_state(state), 4), objects=list(nodes[:4]))
    todo = read_state({**state, "nodes": nodes})
    assert todo.extends(prefix)
    assert check_suffix(todo, prefix) == state["nodes"][4:]
    same = read_state({**state, "nodes": nodes[:4]})
    assert same.extends(prefix)


def test_a_dict_state_is_compared_by_ids_when_its_nodes_are_other_objects() -> None:
    """Equal copies, or the first and last saved dicts around a node replaced by
    another, fall back to the ids: a node of another id in the prefix does not extend
    it, one of the same id does (as a state of fresh copies always did)."""
    state = _state(extra=1)
    todo = read_state(state)
    prefix = SavedPrefix.of_state(todo, 4)
    assert prefix.objects is not None and prefix.objects[0] is state["nodes"][0]
    assert read_state(copy.deepcopy(state)).extends(prefix)
    for replacement, extends in (
        ({**state["nodes"][2], "id": "cw_" + "0" * 24}, False),
        ({**state["nodes"][2], "payload": {"content": "v2"}}, True),
        (copy.deepcopy(state["nodes"][2]), True),
    ):
        nodes = list(state["nodes"])
        nodes[2] = replacement
        assert read_state({**state, "nodes": nodes}).extends(prefix) is extends
    longer = prefix.extended(state["nodes"][4:], state["nodes"][4:])
    assert longer.objects == state["nodes"]
    state["nodes"].append(copy.deepcopy(state["nodes"][4]))
    assert read_state(state).extends(longer)


def test_a_saved_dict_given_another_id_in_place_is_refused_where_the_state_uses_it() -> None:
    """A saved node dict changed in place is taken as saved (nodes are immutable in the
    runtime's model); its new id is unknown to the prefix, so a new node whose parent it
    is, or a frontier that names it, is refused."""
    state = _state(extra=1)
    prefix = SavedPrefix.of_state(read_state(state), 4)
    changed = state["nodes"][3]
    changed["payload"] = {"value": "grace"}
    changed["id"] = compute_id("semantic", changed["parents"], changed["payload"], "owner")
    payload = {"text": "uses the changed node"}
    child = {
        "id": compute_id("inference", [changed["id"]], payload),
        "kind": "inference",
        "parents": [changed["id"]],
        "payload": payload,
        "createdAt": changed["createdAt"],
        "sequence": 5,
    }
    state["nodes"][4] = child
    todo = read_state({**state, "frontier": [child["id"]]})
    assert todo.extends(prefix)
    with pytest.raises(ValidationError) as info:
        check_suffix(todo, prefix)
    assert [(v.code, v.index) for v in info.value.violations] == [("missing_parent", 4)]
    named = read_state({**state, "nodes": state["nodes"][:4], "frontier": [changed["id"]]})
    with pytest.raises(ValidationError) as info:
        check_suffix(named, prefix)
    assert [v.code for v in info.value.violations] == ["frontier_reference"]
