"""Threads written by LangGraph's PostgreSQL saver move into cwstore (the function and
``cwstore langgraph-move``): every checkpoint of every namespace reads back as
LangGraph's saver reads it (values, metadata, parents, pending writes; versions as
integers), and the thread goes on in cwstore as it goes on in LangGraph's saver. On main
a copied thread could not go on (``NotImplementedError``: string channel versions)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import cwstore
from cwstore.langgraph import CwstoreSaver, move_threads

REPO = Path(__file__).resolve().parents[2]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class _State(MessagesState):
    total: int


def _agent(state: _State) -> dict[str, Any]:
    n = len(state["messages"])
    if isinstance(state["messages"][-1], HumanMessage):
        call = {"name": "add", "args": {"a": n, "b": 2}, "id": f"call-{n}"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{n}")]}
    return {"messages": [AIMessage(content=f"sum {n}", id=f"ai-{n}")], "total": n}


class _Sub(TypedDict):
    total: int


def _app(saver: BaseCheckpointSaver[Any]) -> Any:
    sub = StateGraph(_Sub)
    sub.add_node("double", lambda s: {"total": s.get("total", 0) * 2})
    sub.add_edge(START, "double")
    sub.add_edge("double", END)
    g = StateGraph(_State)
    g.add_node("agent", _agent)
    g.add_node("tools", ToolNode([add]))
    g.add_node("sub", sub.compile())
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "sub"})
    g.add_edge("tools", "agent")
    g.add_edge("sub", END)
    return g.compile(checkpointer=saver)


@pytest.fixture(scope="module")
def savers(db_dsn: str) -> Iterator[tuple[CwstoreSaver, PostgresSaver]]:
    with cwstore.connect_sync(db_dsn) as store, PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        yield CwstoreSaver(store), pg


def _turn(app: Any, thread: str, text: str) -> None:
    app.invoke({"messages": [HumanMessage(content=text, id=f"h-{text}")]}, _config(thread))


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _plain(message: BaseMessage) -> tuple[Any, ...]:
    return (message.type, message.content, getattr(message, "tool_calls", None))


def _view(tup: CheckpointTuple) -> tuple[Any, ...]:
    values = {
        k: [_plain(m) for m in v] if k == "messages" else v
        for k, v in tup.checkpoint["channel_values"].items()
    }
    writes = [
        (t, c, [_plain(m) for m in v] if c == "messages" else v)
        for t, c, v in tup.pending_writes or []
    ]
    parent = (
        None if tup.parent_config is None else tup.parent_config["configurable"]["checkpoint_id"]
    )
    return (
        tup.config["configurable"]["checkpoint_ns"],
        tup.checkpoint["id"],
        parent,
        values,
        tup.metadata,
        writes,
    )


def _new(view: tuple[Any, ...]) -> tuple[Any, ...]:
    ns, _, _, values, metadata, writes = view
    return (ns.split(":")[0], values, metadata["step"], [w[1:] for w in writes])


def _history(saver: BaseCheckpointSaver[Any], thread: str) -> list[tuple[Any, ...]]:
    return [_view(t) for t in saver.list(_config(thread))]


@pytest.mark.parametrize("how", ["function", "cli"])
def test_postgres_threads_move_over_and_go_on(
    savers: tuple[CwstoreSaver, PostgresSaver], db_dsn: str, how: str
) -> None:
    cw, pg = savers
    thread = f"move-{how}-{uuid.uuid4().hex[:8]}"
    for text in ("one", "two"):
        _turn(_app(pg), thread, text)
    # A pending write of the latest checkpoint, as an interrupted run leaves one.
    latest = pg.get_tuple(_config(thread))
    assert latest is not None
    pg.put_writes(latest.config, [("total", 99)], "pending-task")
    before = _history(pg, thread)
    assert {ns.split(":")[0] for ns, *_ in before} == {"", "sub"}

    if how == "function":
        assert move_threads(pg, cw, [thread]) == [(thread, len(before))]
    else:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "cwstore",
                "langgraph-move",
                "--from",
                db_dsn,
                "--thread",
                thread,
                "--dsn",
                db_dsn,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout == f"{thread}\t{len(before)}\n"
    assert _history(cw, thread) == before
    versions = cw.get_tuple(_config(thread))
    assert versions is not None
    assert all(isinstance(v, int) for v in versions.checkpoint["channel_versions"].values())

    # Moving it again is refused: it is there.
    with pytest.raises(cwstore.InputError, match="already in cwstore"):
        move_threads(pg, cw, [thread])

    # The thread goes on in both, the same way.
    for saver in (pg, cw):
        _turn(_app(saver), thread, "three")
    after = [_history(s, thread)[: -len(before)] for s in (pg, cw)]
    assert len(after[0]) == len(after[1]) > 0
    # New checkpoints have new ids (and tasks, and tool messages): compare the root
    # namespace's values, steps and what was written, and the namespaces.
    assert [_new(v) for v in after[0] if not v[0]] == [_new(v) for v in after[1] if not v[0]]
    assert [v[0].split(":")[0] for v in after[0]] == [v[0].split(":")[0] for v in after[1]]
    final = [_app(s).get_state(_config(thread)).values for s in (pg, cw)]
    assert [_plain(m) for m in final[0]["messages"]] == [_plain(m) for m in final[1]["messages"]]
    assert final[0]["total"] == final[1]["total"]
