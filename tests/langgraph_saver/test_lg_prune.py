"""``prune`` and ``delete_for_runs`` as LangGraph's PostgreSQL saver does them, side by
side with it: ``keep_latest`` refuses a thread using a ``DeltaChannel`` (on main it
emptied the channel), leaves no kept checkpoint naming a deleted parent, removes the
namespaces of subgraph calls whose root checkpoint goes, and a string for the thread
ids is a clear error (on main it pruned nothing, silently). What is kept is never lost:
the erasure and the rewrite are one transaction (on main a failure between them lost
the thread).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import graph_name


def _concat(state: list[int] | None, writes: list[list[int]]) -> list[int]:
    out = list(state or [])
    for w in writes:
        out += w
    return out


class _Delta(TypedDict):
    items: Annotated[list[int], DeltaChannel(_concat, list, snapshot_frequency=3)]


class _Plain(TypedDict):
    n: int
    tag: tuple[str, int]


def _delta_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(_Delta)
    g.add_node("a", lambda s: {"items": [len(s["items"])]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def _sub_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    sub = StateGraph(_Plain)
    sub.add_node("inner", lambda s: {"n": s["n"] + 1})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    g = StateGraph(_Plain)
    g.add_node("outer", lambda s: {"n": s["n"] * 2, "tag": ("t", s["n"])})
    g.add_node("child", sub.compile())
    g.add_edge(START, "outer")
    g.add_edge("outer", "child")
    g.add_edge("child", END)
    return g.compile(checkpointer=saver)


class _Failing(JsonPlusSerializer):
    """A serializer that fails to write once told to (a crash in the middle of a
    rewrite)."""

    fail = False

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if self.fail:
            raise RuntimeError("serializer failed")
        return super().dumps_typed(obj)


@pytest.fixture(scope="module")
def store(db_dsn: str) -> Iterator[cwstore.Store]:
    with cwstore.connect_sync(db_dsn) as s:
        yield s


@pytest.fixture(scope="module")
def pg(db_dsn: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(db_dsn) as saver:
        saver.setup()
        yield saver


def _savers(store: cwstore.Store, pg: PostgresSaver) -> list[BaseCheckpointSaver[Any]]:
    return [CwstoreSaver(store), pg]


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _namespaces(saver: BaseCheckpointSaver[Any], dsn: str, thread: str) -> list[str]:
    """The thread's namespaces, each as its node name (a call's task id differs)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        if isinstance(saver, PostgresSaver):
            rows = c.execute(
                "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s", (thread,)
            ).fetchall()
            found = [str(r[0]) for r in rows]
        else:
            root = graph_name(thread, "")
            rows = c.execute(
                "SELECT name FROM cwstore.graphs WHERE name = %s OR starts_with(name, %s)",
                (root, root + ":"),
            ).fetchall()
            found = [str(r[0]).removeprefix(root).removeprefix(":") for r in rows]
    return sorted(ns.split(":")[0] for ns in found)


def test_keep_latest_refuses_a_delta_channel_thread_and_keeps_it(
    store: cwstore.Store, pg: PostgresSaver
) -> None:
    for saver in _savers(store, pg):
        thread, other = f"delta-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
        app, plain = _delta_graph(saver), _sub_graph(saver)
        for i in range(5):
            app.invoke({"items": [100 + i]}, _config(thread))
        plain.invoke({"n": 1}, _config(other))
        plain.invoke({"n": 2}, _config(other))
        before = app.get_state(_config(thread)).values
        others = len(list(saver.list(_config(other))))
        with pytest.raises(NotImplementedError, match="DeltaChannel"):
            saver.prune([other, thread])
        assert app.get_state(_config(thread)).values == before
        assert before["items"] == [100, 1, 101, 3, 102, 5, 103, 7, 104, 9]
        # Nothing pruned: not even the thread before it in the batch.
        assert len(list(saver.list(_config(other)))) == others
        saver.prune([thread], strategy="delete")
        assert saver.get_tuple(_config(thread)) is None


def test_keep_latest_as_postgres_saver(
    store: cwstore.Store, pg: PostgresSaver, db_dsn: str
) -> None:
    seen = []
    for saver in _savers(store, pg):
        thread = f"sub-{uuid.uuid4().hex[:8]}"
        app = _sub_graph(saver)
        for n in (1, 2, 3):
            app.invoke({"n": n, "tag": ("x", 0)}, _config(thread))
        assert len(_namespaces(saver, db_dsn, thread)) > 2
        latest = saver.get_tuple(_config(thread))
        assert latest is not None and latest.parent_config is not None
        saver.prune([thread])
        kept = list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
        assert [t.checkpoint["id"] for t in kept] == [latest.checkpoint["id"]]
        assert kept[0].parent_config is None
        assert app.get_state(_config(thread)).values == {"n": 7, "tag": ["t", 3]}
        seen.append(_namespaces(saver, db_dsn, thread))
        # The thread goes on from what was kept.
        app.invoke({"n": 4, "tag": ("x", 0)}, _config(thread))
        assert app.get_state(_config(thread)).values == {"n": 9, "tag": ["t", 4]}
    assert seen[0] == seen[1]


def test_a_string_for_thread_ids_is_refused(store: cwstore.Store) -> None:
    saver = CwstoreSaver(store)
    thread = f"alpha-{uuid.uuid4().hex[:8]}"
    app = _sub_graph(saver)
    app.invoke({"n": 1, "tag": ("x", 0)}, _config(thread))
    app.invoke({"n": 2, "tag": ("x", 0)}, _config(thread))
    count = len(list(saver.list(_config(thread))))
    for strategy in ("keep_latest", "delete"):
        with pytest.raises(cwstore.InputError, match="thread_ids"):
            saver.prune(thread, strategy=strategy)
    with pytest.raises(cwstore.InputError, match="run_ids"):
        saver.delete_for_runs("run")
    assert len(list(saver.list(_config(thread)))) == count


class _Sets(TypedDict):
    seen: set[int]


def _set_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(_Sets)
    g.add_node("a", lambda s: {"seen": s["seen"] | {len(s["seen"])}})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(checkpointer=saver)


def _two_runs(saver: BaseCheckpointSaver[Any], thread: str) -> tuple[list[Any], Any]:
    app = _set_graph(saver)
    for run in ("r1", "r2"):
        app.invoke({"seen": {10}}, {"configurable": {"thread_id": thread, "run_id": thread + run}})
    return _listed(saver, thread), app.get_state(_config(thread)).values


def _listed(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    return [
        (t.checkpoint["id"], str(t.metadata.get("run_id")).removeprefix(thread))
        for t in saver.list(_config(thread))
    ]


def _prune_or_delete(saver: CwstoreSaver, thread: str, call: str) -> None:
    if call == "prune":
        saver.prune([thread])
    else:
        saver.delete_for_runs([thread + "r1"])


@pytest.mark.parametrize("call", ["prune", "delete_for_runs"])
def test_a_failure_while_rewriting_loses_nothing(store: cwstore.Store, call: str) -> None:
    serde = _Failing()
    saver = CwstoreSaver(store, serde=serde)
    thread = f"fail-{call}-{uuid.uuid4().hex[:8]}"
    before, values = _two_runs(saver, thread)
    assert values == {"seen": {10, 1}}
    serde.fail = True
    with pytest.raises(RuntimeError, match="serializer failed"):
        _prune_or_delete(saver, thread, call)
    serde.fail = False
    fresh = CwstoreSaver(store)
    assert _listed(fresh, thread) == before
    assert _set_graph(fresh).get_state(_config(thread)).values == values


class _StopsAfterErasing(CwstoreSaver):
    """A saver that stops (as a process killed there would) after erasing a graph it
    rewrites, before writing back what it keeps."""

    def _write_staged(self, *args: Any) -> None:
        raise RuntimeError("stopped after erasing")


@pytest.mark.parametrize("call", ["prune", "delete_for_runs"])
def test_a_rewrite_stopped_after_erasing_is_finished_by_the_next_reader(
    store: cwstore.Store, call: str
) -> None:
    thread = f"stop-{call}-{uuid.uuid4().hex[:8]}"
    _, values = _two_runs(CwstoreSaver(store), thread)
    stopping = _StopsAfterErasing(store)
    kept = _listed(stopping, thread)[:1] if call == "prune" else None
    with pytest.raises(RuntimeError, match="stopped after erasing"):
        _prune_or_delete(stopping, thread, call)
    fresh = CwstoreSaver(store)
    after = _listed(fresh, thread)
    if kept is not None:
        assert after == kept
    else:
        assert [run for _, run in after] == ["r2", "r2", "r2"]
    assert _set_graph(fresh).get_state(_config(thread)).values == values
    # And the thread goes on.
    _set_graph(fresh).invoke({"seen": {20}}, _config(thread))
    assert _set_graph(CwstoreSaver(store)).get_state(_config(thread)).values == {"seen": {20, 1}}
    assert len(_listed(CwstoreSaver(store), thread)) == len(after) + 3
