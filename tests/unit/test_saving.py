"""cwstore._saving: the plan of a save, driven here without a database. Each test
answers the plan's requests as ``append_v1`` and the reads would, and checks what the
plan asks for next, what it returns and what the store remembers after."""

from __future__ import annotations

from typing import Any

import pytest
from support.documents import GraphBuilder

from cwstore import (
    AgentState,
    DatabaseError,
    DivergedError,
    Error,
    GraphErasedError,
    LengthConflictError,
    ValidationError,
)
from cwstore._saving import (
    AppendNodes,
    FindMismatch,
    ReadFrontier,
    ReadGraph,
    Request,
    Saved,
    SavePlan,
    StoredGraph,
)
from cwstore._suffix import SavedPrefix, SaveMemory, read_state

GRAPH = "g"
GRAPH_ID = 7
LIFE = 11
"""The life (incarnation) of the graph the tests store to."""


def _builder(nodes: int) -> GraphBuilder:
    b = GraphBuilder()
    b.system("You are a test agent.")
    b.goal("write the report")
    for i in range(nodes - 2):
        b.inference(f"step {i}")
    return b


def _written(
    step: Request | Saved, length: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What ``append_v1`` returns for ``step`` when it writes every node at ``length``:
    rows of the query ``append``, read by column name as the drivers' rows are."""
    assert isinstance(step, AppendNodes)
    assert step.expected_length == length
    rows = [
        {
            "seq": length + i,
            "id": n["id"],
            "created_at": n["createdAt"],
            "recorded_at": None,
            "written": True,
            "payload_text": None,
            "incarnation": LIFE,
        }
        for i, n in enumerate(step.nodes, start=1)
    ]
    return step.nodes, rows


def _one_node_past_the_remembered() -> tuple[SaveMemory, dict[str, Any]]:
    """A memory holding the graph's first 4 nodes, and a state of 5."""
    b = _builder(4)
    memory = SaveMemory()
    memory.remember(GRAPH, SavedPrefix.of_state(read_state(b.state()), 4, LIFE))
    b.inference("one more")
    return memory, b.state()


def _remembered(memory: SaveMemory, state: Any) -> int | None:
    """The length the memory holds for the graph, as a save of ``state`` sees it."""
    todo = read_state(state)
    known = memory.unchanged(GRAPH, todo, None)
    return None if known is None else known.length


def test_a_first_save_reads_the_graph_then_appends_everything() -> None:
    state = _builder(4).state()
    memory = SaveMemory()
    plan = SavePlan(memory, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    step = plan.answer(None)
    assert step == AppendNodes(state["nodes"], 0, state["frontier"], None)
    done = plan.answer(_written(step, 0))
    assert isinstance(done, Saved)
    assert [n.id for n in done.nodes] == [n["id"] for n in state["nodes"]]
    assert _remembered(memory, state) == 4


def test_a_remembered_graph_appends_only_the_new_nodes_without_reading() -> None:
    memory, state = _one_node_past_the_remembered()
    plan = SavePlan(memory, GRAPH, state, None)
    step = plan.start()
    assert step == AppendNodes(state["nodes"][4:], 4, state["frontier"], LIFE)
    done = plan.answer(_written(step, 4))
    assert isinstance(done, Saved) and [n.sequence for n in done.nodes] == [5]
    assert _remembered(memory, state) == 5


@pytest.mark.parametrize("moved", [False, True])
def test_nothing_new_reads_the_length_and_frontier_once(moved: bool) -> None:
    """A save with nothing new reads the graph's length and frontier, and declares the
    frontier again (the last node re-sent) only when it differs."""
    state = _builder(4).state()
    memory = SaveMemory()
    memory.remember(GRAPH, SavedPrefix.of_state(read_state(state), 4, LIFE))
    plan = SavePlan(memory, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    assert plan.answer(StoredGraph(GRAPH_ID, 4, LIFE)) == ReadFrontier(GRAPH_ID)
    if not moved:
        assert plan.answer(list(state["frontier"])) == Saved([])
        return
    step = plan.answer(["cw_elsewhere"])
    assert step == AppendNodes(state["nodes"][-1:], 4, state["frontier"], LIFE)
    assert plan.answer(([], [])) == Saved([])
    assert _remembered(memory, state) == 4


def test_nothing_new_on_a_later_life_of_the_same_length_goes_cold() -> None:
    """The graph was erased and made again with as many nodes: the life differs, so
    the plan compares what is stored instead of trusting its memory."""
    state = _builder(4).state()
    memory = SaveMemory()
    memory.remember(GRAPH, SavedPrefix.of_state(read_state(state), 4, LIFE))
    plan = SavePlan(memory, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    assert plan.answer(StoredGraph(GRAPH_ID, 4, LIFE + 1)) == ReadGraph()
    assert _remembered(memory, state) is None
    ids = [n["id"] for n in state["nodes"]]
    assert plan.answer(StoredGraph(GRAPH_ID, 4, LIFE + 1)) == FindMismatch(GRAPH_ID, ids)


def test_new_nodes_go_to_the_remembered_life_and_the_written_life_is_kept() -> None:
    memory, state = _one_node_past_the_remembered()
    step = SavePlan(memory, GRAPH, state, None).start()
    assert isinstance(step, AppendNodes) and step.incarnation == LIFE
    fresh = SaveMemory()
    plan = SavePlan(fresh, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    first = plan.answer(None)
    assert isinstance(first, AppendNodes) and first.incarnation is None  # creates it
    plan.answer(_written(first, 0))
    known = fresh.unchanged(GRAPH, read_state(state), None)
    assert known is not None and known.incarnation == LIFE


def test_nothing_new_on_a_graph_that_grew_goes_cold_and_diverges() -> None:
    state = _builder(4).state()
    memory = SaveMemory()
    memory.remember(GRAPH, SavedPrefix.of_state(read_state(state), 4, LIFE))
    plan = SavePlan(memory, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    assert plan.answer(StoredGraph(GRAPH_ID, 5, LIFE)) == ReadGraph()  # a snapshot of its own
    assert _remembered(memory, state) is None
    with pytest.raises(DivergedError) as info:
        plan.answer(StoredGraph(GRAPH_ID, 5, LIFE))
    assert (info.value.position, info.value.stored_length) == (5, 5)


@pytest.mark.parametrize(
    "refusal",
    [
        LengthConflictError(graph=GRAPH, expected_length=4, actual_length=0),
        GraphErasedError(graph=GRAPH),
        ValidationError([]),
    ],
)
def test_a_refused_append_forgets_the_graph_and_compares_what_is_stored(
    refusal: Error,
) -> None:
    """An erased graph refuses the append; the plan then reads the graph again and
    saves the whole state onto what it finds (here: nothing)."""
    memory, state = _one_node_past_the_remembered()
    plan = SavePlan(memory, GRAPH, state, None)
    assert isinstance(plan.start(), AppendNodes)
    assert plan.refused(refusal) == ReadGraph()
    step = plan.answer(None)
    assert step == AppendNodes(state["nodes"], 0, state["frontier"], None)
    done = plan.answer(_written(step, 0))
    assert isinstance(done, Saved) and len(done.nodes) == 5


def test_any_other_error_of_the_append_is_raised() -> None:
    memory, state = _one_node_past_the_remembered()
    plan = SavePlan(memory, GRAPH, state, None)
    assert isinstance(plan.start(), AppendNodes)
    lost = DatabaseError("connection lost")
    with pytest.raises(DatabaseError) as info:
        plan.refused(lost)
    assert info.value is lost


def test_rows_of_another_writer_make_the_memory_forget_and_go_cold() -> None:
    memory, state = _one_node_past_the_remembered()
    plan = SavePlan(memory, GRAPH, state, None)
    step = plan.start()
    sent, rows = _written(step, 4)
    not_mine = [{**rows[0], "written": False}]
    assert plan.answer((sent, not_mine)) == ReadGraph()


def test_cold_compares_the_stored_ids_in_the_same_snapshot() -> None:
    b = _builder(4)
    b.inference("one more")
    state = b.state()
    ids = [n["id"] for n in state["nodes"]]
    memory = SaveMemory()
    plan = SavePlan(memory, GRAPH, state, None)
    assert plan.start() == ReadGraph()
    assert plan.answer(StoredGraph(GRAPH_ID, 3, LIFE)) == FindMismatch(GRAPH_ID, ids[:3])
    step = plan.answer(None)
    assert step == AppendNodes(state["nodes"][3:], 3, state["frontier"], LIFE)
    done = plan.answer(_written(step, 3))
    assert isinstance(done, Saved) and [n.sequence for n in done.nodes] == [4, 5]
    assert _remembered(memory, state) == 5


def test_cold_raises_diverged_at_the_first_other_id() -> None:
    state = _builder(4).state()
    plan = SavePlan(SaveMemory(), GRAPH, state, None)
    plan.start()
    assert isinstance(plan.answer(StoredGraph(GRAPH_ID, 3, LIFE)), FindMismatch)
    with pytest.raises(DivergedError) as info:
        plan.answer(2)
    assert (info.value.position, info.value.stored_length) == (2, 3)


def test_cold_on_the_whole_state_with_its_frontier_writes_nothing_and_remembers() -> None:
    state = AgentState.from_obj(_builder(4).state())
    memory = SaveMemory()
    plan = SavePlan(memory, GRAPH, state, None)
    plan.start()
    assert isinstance(plan.answer(StoredGraph(GRAPH_ID, 4, LIFE)), FindMismatch)
    assert plan.answer(None) == ReadFrontier(GRAPH_ID)
    assert plan.answer(list(state.frontier)) == Saved([])
    assert _remembered(memory, state) == 4


def test_a_stale_expected_length_is_a_length_conflict() -> None:
    plan = SavePlan(SaveMemory(), GRAPH, _builder(4).state(), 2)
    plan.start()
    with pytest.raises(LengthConflictError) as info:
        plan.answer(StoredGraph(GRAPH_ID, 3, LIFE))
    assert (info.value.expected_length, info.value.actual_length) == (2, 3)


def test_an_invalid_state_is_refused_before_any_request() -> None:
    with pytest.raises(ValidationError):
        SavePlan(SaveMemory(), GRAPH, {"version": 2, "nodes": [], "frontier": []}, None).start()


def test_an_empty_state_on_no_graph_writes_nothing() -> None:
    plan = SavePlan(SaveMemory(), GRAPH, {"version": 1, "nodes": [], "frontier": []}, None)
    assert plan.start() == ReadGraph()
    assert plan.answer(None) == Saved([])
