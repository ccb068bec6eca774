"""A saver remembers each graph's key so a read is one query, and never trusts it: every
query given a key checks the graph's name there. A key the name has left (its graph
erased, the name placed elsewhere) reads nothing, and the saver looks the key up again;
a key whose graph was erased and written again reads the new graph."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from support.langgraph import put_messages, thread_config

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import graph_name


def _thread(saver: CwstoreSaver, thread: str, words: list[str]) -> tuple[Any, list[BaseMessage]]:
    """A thread of one checkpoint per word, each adding a message; its last config and
    messages."""
    config: Any = thread_config(thread)
    messages: list[BaseMessage] = []
    for i, word in enumerate(words):
        cls = HumanMessage if i % 2 == 0 else AIMessage
        messages = [*messages, cls(content=word, id=f"{thread}-{i}")]
        config = put_messages(saver, config, messages, i + 1)
    return config, messages


def _contents(saver: CwstoreSaver, config: Any) -> list[Any] | None:
    found = saver.get_tuple(config)
    if found is None:
        return None
    return [m.content for m in found.checkpoint["channel_values"]["messages"]]


def _listed(saver: CwstoreSaver, thread: str) -> list[list[Any]]:
    return [
        [m.content for m in t.checkpoint["channel_values"]["messages"]]
        for t in saver.list(thread_config(thread))
    ]


def _key(saver: CwstoreSaver, thread: str) -> int | None:
    return saver._memo.key(graph_name(thread, ""))


def test_a_key_the_name_has_left_reads_nothing_and_is_looked_up_again(db_dsn: str) -> None:
    a, b = ("keys-" + uuid.uuid4().hex[:8] for _ in range(2))
    with cwstore.connect_sync(db_dsn) as store:
        writer, reader = CwstoreSaver(store), CwstoreSaver(store)
        last_a, _ = _thread(writer, a, ["a0", "a1", "a2"])
        _thread(writer, b, ["b0", "b1"])
        assert _contents(reader, thread_config(b)) == ["b0", "b1"]
        assert _contents(reader, last_a) == ["a0", "a1", "a2"]
        key_a, key_b = _key(reader, a), _key(reader, b)
        assert key_a is not None and key_b is not None and key_a != key_b
        # As if thread a's graph had been erased and its name placed at b's key since.
        reader._memo.keep_key(graph_name(a, ""), key_b)
        assert _contents(reader, last_a) == ["a0", "a1", "a2"]
        assert _key(reader, a) == key_a
        reader._memo.keep_key(graph_name(a, ""), key_b)
        assert _contents(reader, thread_config(a)) == ["a0", "a1", "a2"]
        reader._memo.keep_key(graph_name(a, ""), key_b)
        assert _listed(reader, a) == [["a0", "a1", "a2"], ["a0", "a1"], ["a0"]]
        # A put whose heads are read by a key the name has left still extends a's chain.
        fresh = CwstoreSaver(store)
        fresh._memo.keep_key(graph_name(a, ""), key_b)
        kinds = [HumanMessage, AIMessage, HumanMessage, HumanMessage]
        messages: list[BaseMessage] = [
            cls(content=f"a{i}", id=f"{a}-{i}") for i, cls in enumerate(kinds)
        ]
        last = put_messages(fresh, last_a, messages, 4)
        assert _contents(CwstoreSaver(store), last) == ["a0", "a1", "a2", "a3"]
        assert _contents(reader, thread_config(b)) == ["b0", "b1"]


def test_a_remembered_key_of_an_erased_thread_reads_what_is_there_now(db_dsn: str) -> None:
    thread = "keys-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(db_dsn) as store:
        writer, reader = CwstoreSaver(store), CwstoreSaver(store)
        last, _ = _thread(writer, thread, ["x0", "x1"])
        assert _contents(reader, last) == ["x0", "x1"]
        assert _key(reader, thread) is not None
        writer.delete_thread(thread)
        assert _contents(reader, last) is None
        assert _contents(reader, thread_config(thread)) is None
        assert _listed(reader, thread) == []
        again, _ = _thread(writer, thread, ["y0"])
        assert _contents(reader, thread_config(thread)) == ["y0"]
        assert _contents(reader, again) == ["y0"]
        assert _contents(reader, last) is None
