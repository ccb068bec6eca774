"""A checkpoint's message lists come back whole and in order however they are stored:
two message channels, a list that spans a branch's chain and the chain it forked from,
a list that dropped a message, the same checkpoint read alone and in a listing. A fresh
saver reads each (nothing remembered from the puts), and a put from what it read
extends the right chains."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import cwstore
from cwstore.langgraph import CwstoreSaver


def _put(
    saver: CwstoreSaver,
    config: Any,
    values: dict[str, list[BaseMessage]],
    versions: dict[str, int],
) -> tuple[Any, dict[str, Any]]:
    """A checkpoint holding ``values`` after ``config``'s; its config and its checkpoint."""
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=-1)),
        "channel_values": values,
        "channel_versions": dict(versions),
    }
    new: dict[str, str | int | float] = {c: versions[c] for c in values}
    return saver.put(config, checkpoint, {"source": "loop", "step": -1}, new), checkpoint


def _rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def _message(cls: type[BaseMessage], n: int, **kwargs: Any) -> BaseMessage:
    return cls(content=f"message {n}", id=f"m-{n}", **kwargs)


def test_lists_across_branches_and_channels_read_back_whole(db_dsn: str) -> None:
    thread = "segments-" + uuid.uuid4().hex[:8]
    root: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    m = [_message(HumanMessage, 0), _message(AIMessage, 1), _message(HumanMessage, 2)]
    notes = [_message(HumanMessage, 100), _message(AIMessage, 101)]
    tool = _message(ToolMessage, 3, tool_call_id="call-3")
    fork_reply = _message(AIMessage, 4)
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store)
        first, cp1 = _put(
            saver, root, {"messages": m[:2], "notes": notes[:1]}, {"messages": 1, "notes": 1}
        )
        _, cp2 = _put(
            saver, first, {"messages": [*m, tool], "notes": notes}, {"messages": 2, "notes": 2}
        )
        # A fork from the first checkpoint: its list is the first chain's two messages,
        # then the fork's own chain.
        fork, cp3 = _put(saver, first, {"messages": [*m[:2], fork_reply]}, {"messages": 3})
        # A list that dropped a message: its first, then a new one.
        _, cp4 = _put(saver, fork, {"messages": [m[0], _message(AIMessage, 5)]}, {"messages": 4})
        written = [cp1, cp2, cp3, cp4]
        graph = "langgraph:" + thread
        chains = _rows(
            db_dsn,
            "SELECT DISTINCT resource_key FROM cwstore.node_view WHERE graph = %s "
            "AND resource_key LIKE 'lg:msg:messages@%%'",
            graph,
        )
        assert chains, "the fork started no chain of its own"

        fresh = CwstoreSaver(store)
        for cp in written:
            got = fresh.get_tuple(
                {"configurable": {**root["configurable"], "checkpoint_id": cp["id"]}}
            )
            assert got is not None
            assert got.checkpoint["channel_values"] == cp["channel_values"], cp["id"]
            for channel, value in cp["channel_values"].items():
                assert [type(x) for x in got.checkpoint["channel_values"][channel]] == [
                    type(x) for x in value
                ]
        listed = {t.checkpoint["id"]: t.checkpoint["channel_values"] for t in fresh.list(root)}
        assert listed == {cp["id"]: cp["channel_values"] for cp in written}

        # A put from the fork's checkpoint, by a saver that only read it, extends the
        # fork's chain: the new message's node has the fork's last message as parent.
        latest = _message(HumanMessage, 6)
        _put(fresh, fork, {"messages": [*m[:2], fork_reply, latest]}, {"messages": 5})
        node = (
            "SELECT id, parents, resource_key FROM cwstore.node_view "
            "WHERE graph = %s AND payload_text LIKE %s"
        )
        ((_, parents, key),) = _rows(db_dsn, node, graph, "%message 6%")
        ((reply, _, reply_key),) = _rows(db_dsn, node, graph, "%message 4%")
        assert list(parents) == [reply]
        assert key == reply_key
