"""Metadata filters find what LangGraph's PostgreSQL saver finds (``metadata @>
filter``), also in metadata JSON cannot hold exactly (``1.0``, a tuple, ``2**60``),
which the saver stores as serializer bytes (on main such checkpoints were never found,
and ``delete_for_runs`` left them behind). And ``list`` without ``checkpoint_ns`` lists
every namespace, with a ``checkpoint_id`` only that checkpoint, as LangGraph's does (on
main: the root namespace only, and the whole namespace)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, TypedDict, cast

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import contains

METADATA: list[dict[str, Any]] = [
    {"score": 1.0, "step": 0},
    {"pair": (1, 2), "step": 1},
    {"big": 2**60, "step": 2},
    {"score": 1, "flag": True, "step": 3},
    {"tags": ["a", "b"], "nested": {"x": 1.5, "y": [1, 2]}, "step": 4},
]
FILTERS: list[dict[str, Any]] = [
    {"score": 1.0},
    {"score": 1},
    {"pair": [1, 2]},
    {"pair": (1, 2)},
    {"pair": [2]},
    {"big": 2**60},
    {"big": 2**60 + 1},
    {"flag": True},
    {"flag": 1},
    {"tags": ["b"]},
    {"tags": "a"},
    {"nested": {"y": [2]}},
    {"nested": {"x": 1.5}},
    {"step": 2, "big": 2**60},
]


@pytest.fixture(scope="module")
def savers(db_dsn: str) -> Iterator[list[BaseCheckpointSaver[Any]]]:
    with cwstore.connect_sync(db_dsn) as store, PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        yield [CwstoreSaver(store), pg]


def _put(
    saver: BaseCheckpointSaver[Any], thread: str, metadata: dict[str, Any], after: Any = None
) -> Any:
    """A checkpoint with ``metadata`` (after the one ``after`` names, if given)."""
    checkpoint: Any = {**empty_checkpoint(), "id": str(uuid6(clock_seq=-1))}
    config: Any = after or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, cast(CheckpointMetadata, metadata), {})


def _steps(saver: BaseCheckpointSaver[Any], thread: str, flt: dict[str, Any]) -> list[int]:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return [int(t.metadata["step"]) for t in saver.list(config, filter=flt)]


def test_filters_find_what_postgres_saver_finds(savers: list[BaseCheckpointSaver[Any]]) -> None:
    found = []
    for saver in savers:
        thread = f"md-{uuid.uuid4().hex[:8]}"
        for md in METADATA:
            _put(saver, thread, md)
        found.append([_steps(saver, thread, f) for f in FILTERS])
    assert found[0] == found[1]
    assert found[0][:3] == [[3, 0], [3, 0], [1]]
    assert found[0][5] == [2]
    # The client's rule is jsonb's on every filter.
    for flt, steps in zip(FILTERS, found[1], strict=True):
        assert [md["step"] for md in reversed(METADATA) if contains(md, flt)] == steps


def test_delete_for_runs_finds_runs_in_any_metadata(savers: list[BaseCheckpointSaver[Any]]) -> None:
    saver = savers[0]
    thread = f"runs-{uuid.uuid4().hex[:8]}"
    run = f"run-{thread}"
    after = None
    for md in METADATA:
        # Only metadata stored as serializer bytes names the run.
        after = _put(
            saver, thread, {**md, "run_id": run if md["step"] in (0, 2) else "other"}, after
        )
    saver.delete_for_runs([run])
    assert _steps(saver, thread, {}) == [4, 3, 1]
    # No kept checkpoint names a deleted parent.
    listed = list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
    ids = {t.checkpoint["id"] for t in listed}
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in listed if t.parent_config]
    assert parents and set(parents) <= ids


class _State(TypedDict):
    n: int


def _app(saver: BaseCheckpointSaver[Any]) -> Any:
    sub = StateGraph(_State)
    sub.add_node("inner", lambda s: {"n": s["n"] + 1})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    g = StateGraph(_State)
    g.add_node("child", sub.compile())
    g.add_edge(START, "child")
    g.add_edge("child", END)
    return g.compile(checkpointer=saver)


def test_list_without_namespace_or_with_a_checkpoint_id_as_postgres_saver(
    savers: list[BaseCheckpointSaver[Any]],
) -> None:
    shapes = []
    for saver in savers:
        thread = f"ns-{uuid.uuid4().hex[:8]}"
        app = _app(saver)
        app.invoke({"n": 1}, {"configurable": {"thread_id": thread}})
        app.invoke({"n": 5}, {"configurable": {"thread_id": thread}})
        every = list(saver.list({"configurable": {"thread_id": thread}}))
        ids = [t.checkpoint["id"] for t in every]
        assert ids == sorted(ids, reverse=True)
        namespaces = [t.config["configurable"]["checkpoint_ns"].split(":")[0] for t in every]
        limited = list(saver.list({"configurable": {"thread_id": thread}}, limit=3))
        assert [t.checkpoint["id"] for t in limited] == ids[:3]
        one = every[2].config
        named = [t.checkpoint["id"] for t in saver.list(one)]
        assert named == [every[2].checkpoint["id"]]
        assert list(saver.list(one, filter={"step": -99})) == []
        shapes.append(
            (
                namespaces,
                len(list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))),
            )
        )
    assert shapes[0] == shapes[1]
    assert "child" in shapes[0][0]
