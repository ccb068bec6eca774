"""A real LangGraph agent (a StateGraph with a tool, then a fork through update_state)
on cwstore and on LangGraph's own PostgreSQL saver: the same history, checkpoint by
checkpoint; each message stored once as a node of its kind; no causal edge from one
branch into another; pending writes stored before their checkpoint, by another process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import cwstore
from cwstore.langgraph import CwstoreSaver


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
    messages = state["messages"]
    n = len(messages)
    last = messages[-1]
    if isinstance(last, HumanMessage):
        call = {"name": "add", "args": {"a": n, "b": 2}, "id": f"call-{n}"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{n}")]}
    return {"messages": [AIMessage(content=f"the sum is {last.content}", id=f"ai-{n}")]}


def _graph(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("agent", _agent)
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=saver)


def _plain(message: BaseMessage) -> tuple[str, Any, Any]:
    # Tool messages get random ids from add_messages; compare what the agent saw.
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])]
    return (message.type, message.content, calls)


def _session(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    """Two turns, then a fork from the first turn's answer with another question; the
    whole state history, newest first, with what differs between runs left out."""
    app = _graph(saver)
    config: Any = {"configurable": {"thread_id": thread}}
    app.invoke({"messages": [HumanMessage("add 1 and 2", id="h-1")]}, config)
    app.invoke({"messages": [HumanMessage("and again", id="h-2")]}, config)
    history = list(app.get_state_history(config))
    first_answer = next(
        s
        for s in reversed(history)
        if s.values.get("messages") and s.values["messages"][-1].id == "ai-3"
    )
    fork = app.update_state(
        first_answer.config,
        {"messages": [HumanMessage("fork here", id="h-fork")]},
        as_node="tools",
    )
    app.invoke(None, fork)
    return [
        (
            [_plain(m) for m in s.values.get("messages", [])],
            s.next,
            s.metadata["source"] if s.metadata else None,
            s.metadata["step"] if s.metadata else None,
            len(s.tasks),
        )
        for s in app.get_state_history(config)
    ]


@pytest.fixture(scope="module")
def store(db_dsn: str) -> Iterator[cwstore.Store]:
    with cwstore.connect_sync(db_dsn) as s:
        yield s


def test_agent_history_equals_the_postgres_savers(db_dsn: str, store: cwstore.Store) -> None:
    with PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        theirs = _session(pg, "t-pg")
    ours = _session(CwstoreSaver(store), "t-cw")
    assert len(ours) == len(theirs) > 10
    assert ours == theirs


def _rows(db_dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_dsn) as conn:
        return conn.execute(sql, args).fetchall()


def test_each_message_is_one_node_of_its_kind(db_dsn: str, store: cwstore.Store) -> None:
    _session(CwstoreSaver(store), "t-kinds")
    kinds = dict(
        _rows(
            db_dsn,
            "SELECT kind, count(*) FROM cwstore.node_view WHERE graph = %s "
            "AND resource_key LIKE 'lg:msg:%%' GROUP BY kind",
            "langgraph:t-kinds",
        )
    )
    # Two turns (human, tool call, tool result, answer) and the fork's turn.
    assert kinds == {"goal": 3, "tool_call": 3, "tool_result": 3, "answer": 3}


def _put(
    saver: CwstoreSaver, config: Any, step: int, source: str, messages: list[BaseMessage]
) -> Any:
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=step)),
        "channel_values": {"messages": messages},
        "channel_versions": {"messages": step + 1},
    }
    metadata: Any = {"source": source, "step": step, "parents": {}}
    return saver.put(config, checkpoint, metadata, {"messages": step + 1})


def test_a_step_of_the_loop_follows_the_writes_it_applied(
    db_dsn: str, store: cwstore.Store
) -> None:
    # The pending writes of a checkpoint are what the loop's next step applied: that
    # step's checkpoint has their last batch among its parents, so the graph's own
    # frontier after the put is the new checkpoint, as the put declares it (before, the
    # writes stayed a head of their own and every put rewrote the frontier's history).
    saver = CwstoreSaver(store)
    config: Any = {"configurable": {"thread_id": "t-writes", "checkpoint_ns": ""}}
    hello = HumanMessage("hello", id="h-1")
    first = _put(saver, config, 0, "input", [hello])
    saver.put_writes(first, [("messages", [AIMessage("hi", id="ai-1")])], "task-1")
    second = _put(saver, first, 1, "loop", [hello, AIMessage("hi", id="ai-1")])
    saver.put_writes(second, [("messages", [HumanMessage("again", id="h-2")])], "task-2")
    third = _put(saver, second, 2, "input", [hello, AIMessage("hi", id="ai-1")])
    nodes = {
        key: (node_id, parents)
        for key, node_id, parents in _rows(
            db_dsn,
            "SELECT resource_key, id, parents FROM cwstore.node_view WHERE graph = %s",
            "langgraph:t-writes",
        )
    }

    def cp(c: Any) -> str:
        return "lg:cp:" + str(c["configurable"]["checkpoint_id"])

    def writes(c: Any) -> str:
        return "lg:w:" + str(c["configurable"]["checkpoint_id"])

    assert nodes[writes(first)][0] in nodes[cp(second)][1]
    # An input is not a step that applied the writes before it: no such edge.
    assert nodes[writes(second)][0] not in nodes[cp(third)][1]


def test_a_fork_gains_no_edge_into_the_other_branch(db_dsn: str, store: cwstore.Store) -> None:
    saver = CwstoreSaver(store)
    _session(saver, "t-fork")
    latest = saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
    assert latest is not None
    assert [m.id for m in latest.checkpoint["channel_values"]["messages"]][:4] == [
        "h-1",
        "ai-1",
        latest.checkpoint["channel_values"]["messages"][2].id,
        "ai-3",
    ]
    head = _rows(
        db_dsn,
        "SELECT id FROM cwstore.node_view WHERE graph = %s AND resource_key = %s",
        "langgraph:t-fork",
        "lg:cp:" + latest.checkpoint["id"],
    )[0][0]
    ancestors = {
        r[0]
        for r in _rows(
            db_dsn,
            "SELECT n.payload_text FROM cwstore.ancestors(%s, %s) a "
            "JOIN cwstore.node_view n ON n.graph = %s AND n.id = a.id",
            "langgraph:t-fork",
            head,
            "langgraph:t-fork",
        )
    }
    text = "\n".join(ancestors)
    assert "fork here" in text and "add 1 and 2" in text
    # The abandoned branch's second turn is no ancestor of the fork's checkpoint.
    assert "and again" not in text
    chains = _rows(
        db_dsn,
        "SELECT DISTINCT resource_key FROM cwstore.node_view WHERE graph = %s "
        "AND resource_key LIKE 'lg:msg:%%'",
        "langgraph:t-fork",
    )
    assert any("@" in k for (k,) in chains), chains


def test_writes_before_their_checkpoint_from_another_process(
    db_dsn: str, store: cwstore.Store
) -> None:
    from langgraph.checkpoint.conformance.test_utils import (
        generate_checkpoint,
        generate_metadata,
    )

    cp = generate_checkpoint(channel_values={"k": "v"}, channel_versions={"k": 1})
    code = textwrap.dedent(
        f"""
        import cwstore
        from cwstore.langgraph import CwstoreSaver
        with cwstore.connect_sync({db_dsn!r}) as store:
            config = {{"configurable": {{"thread_id": "t-bg", "checkpoint_ns": "",
                       "checkpoint_id": {cp["id"]!r}}}}}
            CwstoreSaver(store).put_writes(config, [("k", "early"), ("__error__", "x")], "task-1")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    saver = CwstoreSaver(store)
    stored = saver.put(
        {"configurable": {"thread_id": "t-bg", "checkpoint_ns": ""}},
        cp,
        generate_metadata(),
        {"k": 1},
    )
    saver.put_writes(stored, [("k", "late")], "task-2")
    tup = saver.get_tuple(stored)
    assert tup is not None
    assert sorted(tup.pending_writes or []) == [
        ("task-1", "__error__", "x"),
        ("task-1", "k", "early"),
        ("task-2", "k", "late"),
    ]
    assert tup.checkpoint["channel_values"] == {"k": "v"}


def test_delete_thread_erases_the_graph(db_dsn: str, store: cwstore.Store) -> None:
    saver = CwstoreSaver(store)
    _session(saver, "t-erase")
    saver.delete_thread("t-erase")
    assert _rows(db_dsn, "SELECT 1 FROM cwstore.graphs WHERE name = %s", "langgraph:t-erase") == []
    assert _rows(db_dsn, "SELECT count(*) FROM cwstore.erasures")[0][0] >= 1
