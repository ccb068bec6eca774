"""An ``EncryptedSerializer`` as the saver's serde encrypts every value: messages,
plain values, metadata and pending writes, JSON-able or not (on main, values JSON could
hold were stored as plain JSON: readable in the database, and by a saver without the
key). What SQL over the history still sees is structure: ids, kinds, keys (channel
names), parents, order and the checkpoints' timestamps (docs/langgraph.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, MessagesState, StateGraph
from support.langgraph import Cipher, rows_holding

import cwstore
from cwstore.langgraph import CwstoreSaver

SECRET = "attack at dawn"


class _State(MessagesState):
    note: str
    count: int


def _reply(state: _State) -> dict[str, Any]:
    n = len(state["messages"])
    return {
        "messages": [AIMessage(content=f"{SECRET} #{n}", id=f"ai-{n}")],
        "note": f"{SECRET} note",
        "count": n,
    }


def _app(saver: CwstoreSaver) -> Any:
    g = StateGraph(_State)
    g.add_node("reply", _reply)
    g.add_edge(START, "reply")
    return g.compile(checkpointer=saver)


@pytest.fixture(scope="module")
def store(db_dsn: str) -> Iterator[cwstore.Store]:
    with cwstore.connect_sync(db_dsn) as s:
        yield s


def test_every_value_is_encrypted(store: cwstore.Store, db_dsn: str) -> None:
    serde = EncryptedSerializer(Cipher(b"k" * 32))
    saver = CwstoreSaver(store, serde=serde)
    thread = f"enc-{uuid.uuid4().hex[:8]}"
    config: Any = {"configurable": {"thread_id": thread}}
    app = _app(saver)
    for n, text in enumerate([f"{SECRET}: go", "again"]):
        run = {"configurable": {"thread_id": thread, "run_id": f"run-{thread}-{n}"}}
        app.invoke({"messages": [HumanMessage(content=text, id=f"h{n}")]}, run)
    saver.put_writes(app.get_state(config).config, [("note", f"{SECRET} pending")], "task-1")
    values = app.get_state(config).values
    assert values["note"] == f"{SECRET} note" and values["count"] == 3
    assert [m.content for m in values["messages"]][-1] == f"{SECRET} #3"

    assert rows_holding(db_dsn, SECRET) == {}
    assert rows_holding(db_dsn, f"run-{thread}") == {}

    # The saver with the key reads everything back, and filters on metadata.
    again = CwstoreSaver(store, serde=EncryptedSerializer(Cipher(b"k" * 32)))
    assert _app(again).get_state(config).values == values
    listed = list(again.list(config, filter={"run_id": f"run-{thread}-0", "step": 1}))
    assert [t.metadata["step"] for t in listed] == [1]
    tup = again.get_tuple(config)
    assert tup is not None and tup.pending_writes == [("task-1", "note", f"{SECRET} pending")]

    # Without the key (or with another), nothing is read.
    for other in (
        CwstoreSaver(store),
        CwstoreSaver(store, serde=EncryptedSerializer(Cipher(b"x" * 32))),
    ):
        with pytest.raises(Exception):  # noqa: B017 - the serializer's own error
            other.get_tuple(config)
