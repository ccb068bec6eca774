"""A saver whose thread another saver deleted goes on writing it, as LangGraph's
PostgreSQL saver does: the put from a checkpoint it remembers stores the new checkpoint
(naming the deleted parent, as LangGraph's does), and pending writes to a checkpoint
it stored before the deletion are stored. On main both failed every time
(``missing_parent``: the saver's remembered nodes were erased)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from support.langgraph import put_messages, thread_config

import cwstore
from cwstore.langgraph import CwstoreSaver


@pytest.fixture(scope="module")
def pairs(db_dsn: str) -> Iterator[list[tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]]]]:
    with (
        cwstore.connect_sync(db_dsn) as store,
        PostgresSaver.from_conn_string(db_dsn) as pg,
        PostgresSaver.from_conn_string(db_dsn) as pg2,
    ):
        pg.setup()
        yield [(CwstoreSaver(store), CwstoreSaver(store)), (pg, pg2)]


def _shape(saver: BaseCheckpointSaver[Any], thread: str) -> tuple[Any, ...]:
    tup = saver.get_tuple(thread_config(thread))
    assert tup is not None
    return (
        [m.content for m in tup.checkpoint["channel_values"]["messages"]],
        tup.parent_config is not None,
        len(list(saver.list(thread_config(thread)))),
    )


def test_a_put_after_another_saver_deleted_the_thread(
    pairs: list[tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]]],
) -> None:
    shapes = []
    for writer, deleter in pairs:
        thread = f"stale-{uuid.uuid4().hex[:8]}"
        first: list[BaseMessage] = [HumanMessage(content="one", id="m1")]
        config = put_messages(writer, thread_config(thread), first, 1)
        config = put_messages(writer, config, [*first, HumanMessage(content="two", id="m2")], 2)
        deleter.delete_thread(thread)
        writer.put_writes(config, [("messages", [HumanMessage(content="w", id="w1")])], "task")
        both: list[BaseMessage] = [
            *first,
            HumanMessage(content="two", id="m2"),
            HumanMessage(content="3", id="m3"),
        ]
        config = put_messages(writer, config, both, 3)
        writer.put_writes(config, [("messages", [HumanMessage(content="w", id="w2")])], "task")
        shapes.append(_shape(writer, thread))
        shapes.append(_shape(deleter, thread))
        tup = writer.get_tuple(config)
        assert tup is not None and [w[0] for w in tup.pending_writes or []] == ["task"]
    assert shapes[0] == shapes[1] == shapes[2] == shapes[3]
    assert shapes[0] == (["one", "two", "3"], True, 1)
