"""``str`` and ``int`` enums in state and in tool-call arguments are stored and read
back as LangGraph's PostgreSQL saver reads them (inside a value, as its serializer's
types; a channel's value itself, inline as plain JSON); on main the run failed ("not a
plain JSON value")."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph

import cwstore
from cwstore.langgraph import CwstoreSaver


class Color(str, enum.Enum):  # noqa: UP042 - the older spelling, still common
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Mood(enum.StrEnum):
    CALM = "calm"


class _State(MessagesState):
    color: Color
    levels: dict[str, Any]


def _node(state: _State) -> dict[str, Any]:
    call = {"name": "paint", "args": {"color": Color.RED, "level": Level.HIGH}, "id": "c1"}
    return {
        "messages": [AIMessage(content="", tool_calls=[call], id="ai-1")],
        "color": Color.RED,
        "levels": {"l": [Level.HIGH, Mood.CALM], "k": (Level.HIGH,)},
    }


def _app(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(_State)
    g.add_node("n", _node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g.compile(checkpointer=saver)


@pytest.fixture(scope="module")
def savers(db_dsn: str) -> Iterator[list[BaseCheckpointSaver[Any]]]:
    with cwstore.connect_sync(db_dsn) as store, PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        yield [CwstoreSaver(store), pg]


def _typed(value: Any) -> Any:
    """The value with every type spelled out, to compare types as well as values."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    return (type(value).__name__, value)


def test_enums_round_trip_as_postgres_saver(savers: list[BaseCheckpointSaver[Any]]) -> None:
    read = []
    for saver in savers:
        config: Any = {"configurable": {"thread_id": f"enum-{uuid.uuid4().hex[:8]}"}}
        _app(saver).invoke({"messages": [HumanMessage(content="go", id="h")]}, config)
        values = _app(saver).get_state(config).values
        args = values["messages"][-1].tool_calls[0]["args"]
        read.append(_typed({"color": values["color"], "levels": values["levels"], "args": args}))
    assert read[0] == read[1]
    # A top-level str enum is stored inline by LangGraph's saver: it comes back a str.
    assert read[0]["color"] == ("str", "red")
    assert read[0]["args"]["level"] == ("Level", Level.HIGH)
