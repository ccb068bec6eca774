"""A saver remembers the messages it wrote or read, so a read fetches only those it has
not seen: what it gives back is new each time (changing it changes nothing stored or
remembered), the same as a new saver reads from the database, within its memory bound,
and forgotten with a thread it deletes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from support.langgraph import put_messages, thread_config

import cwstore
from cwstore.errors import DatabaseError
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import Stored, graph_name, missing_runs, read_checkpoints


def _thread(saver: CwstoreSaver, thread: str, n: int, start: Any = None) -> list[Any]:
    """``n`` checkpoints, each adding a message (an AI one with a tool call and usage
    metadata every other step); their configs."""
    config = start or thread_config(thread)
    found = saver.get_tuple(config) if start else None
    messages: list[BaseMessage] = (
        list(found.checkpoint["channel_values"]["messages"]) if found else []
    )
    configs = []
    for _ in range(n):
        i = len(messages)
        message: BaseMessage = (
            HumanMessage(content=f"q{i}", id=f"{thread}-{i}")
            if i % 2 == 0
            else AIMessage(
                content=f"a{i}",
                id=f"{thread}-{i}",
                additional_kwargs={"nested": {"list": [i, {"deep": i}]}},
                tool_calls=[{"name": "lookup", "args": {"q": i}, "id": f"call-{i}"}],
                usage_metadata={"input_tokens": i, "output_tokens": 1, "total_tokens": i + 1},
            )
        )
        messages = [*messages, message]
        config = put_messages(saver, config, messages, i + 1)
        configs.append(config)
    return configs


def _messages(saver: CwstoreSaver, config: Any) -> list[Any]:
    found = saver.get_tuple(config)
    assert found is not None
    return list(found.checkpoint["channel_values"]["messages"])


def test_reads_from_memory_equal_the_database_and_are_new_each_time(db_dsn: str) -> None:
    thread = "mem-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store)
        configs = _thread(saver, thread, 6)
        assert len(saver._memo.messages(graph_name(thread, ""))) == 6
        for config in configs:
            assert _messages(saver, config) == _messages(CwstoreSaver(store), config)
        first = _messages(saver, configs[-1])
        ai = first[1]
        ai.content = "changed"
        ai.additional_kwargs["nested"]["list"][1]["deep"] = "changed"
        ai.tool_calls[0]["args"]["q"] = "changed"
        first[0].additional_kwargs["added"] = True
        again = _messages(saver, configs[-1])
        assert again == _messages(CwstoreSaver(store), configs[-1])
        assert again[1].content == "a1" and again[1].additional_kwargs["nested"]["list"][1] == {
            "deep": 1
        }
        assert (
            again[1].tool_calls[0]["args"] == {"q": 1} and "added" not in again[0].additional_kwargs
        )
        assert all(a is not b for a, b in zip(first, again, strict=True))


def test_a_read_fetches_what_another_saver_wrote_since(db_dsn: str) -> None:
    thread = "mem-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(db_dsn) as store:
        reader, other = CwstoreSaver(store), CwstoreSaver(store)
        configs = _thread(reader, thread, 3)
        later = _thread(other, thread, 3, start=configs[-1])
        expected = _messages(CwstoreSaver(store), later[-1])
        assert [m.content for m in expected] == ["q0", "a1", "q2", "a3", "q4", "a5"]
        assert _messages(reader, later[-1]) == expected
        assert len(reader._memo.messages(graph_name(thread, ""))) == 6


def test_a_new_saver_lists_a_thread_as_its_writer_does(db_dsn: str) -> None:
    """A listing names many checkpoints whose segments overlap: each message is read once,
    and every checkpoint gets all of its own."""
    thread = "mem-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(db_dsn) as store:
        writer = CwstoreSaver(store)
        _thread(writer, thread, 7)
        listed = [
            t.checkpoint["channel_values"]["messages"] for t in writer.list(thread_config(thread))
        ]
        reader = CwstoreSaver(store)
        assert [
            t.checkpoint["channel_values"]["messages"] for t in reader.list(thread_config(thread))
        ] == listed
        assert [len(m) for m in listed] == [7, 6, 5, 4, 3, 2, 1]
        assert len(reader._memo.messages(graph_name(thread, ""))) == 7


def test_memory_stays_within_its_bound(db_dsn: str) -> None:
    threads = ["mem-" + uuid.uuid4().hex[:8] for _ in range(3)]
    with cwstore.connect_sync(db_dsn) as store:
        writer = CwstoreSaver(store)
        configs = [_thread(writer, t, 8)[-1] for t in threads]
        for limit in (0, 4000):
            saver = CwstoreSaver(store, message_cache_bytes=limit)
            for _ in range(2):
                for config in configs:
                    assert _messages(saver, config) == _messages(CwstoreSaver(store), config)
                    assert saver._memo._message_bytes <= limit
            kept = [len(saver._memo.messages(graph_name(t, ""))) for t in threads]
            assert sum(kept) == 0 if limit == 0 else 0 < sum(kept) < 24


def test_a_deleted_thread_is_forgotten(db_dsn: str) -> None:
    thread = "mem-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store)
        configs = _thread(saver, thread, 4)
        assert _messages(saver, configs[-1])
        saver.delete_thread(thread)
        assert saver._memo.messages(graph_name(thread, "")) == {}
        assert saver._memo._message_bytes == 0
        assert saver.get_tuple(configs[-1]) is None


def _stored(ids: list[str], segs: list[list[Any]]) -> Stored:
    return Stored(1, "cw_x", {"messages": {"messages": segs}, "values": {}}, [], [], ids)


def test_missing_runs_name_each_run_of_unknown_messages_once() -> None:
    ids = ["a", "b", "c", "d", "e", "f"]
    item = _stored(ids, [["k", 1, 4], ["k@x", 1, 2]])
    assert missing_runs([item], {}) == (["k", "k@x"], ["a", "e"], [4, 2])
    known = {"a": 1, "c": 1, "f": 1}
    assert missing_runs([item], known) == (["k", "k", "k@x"], ["b", "d", "e"], [1, 1, 1])
    assert missing_runs([item, item], {i: 1 for i in ids}) == ([], [], [])
    assert missing_runs([item, item], {"a": 1}) == (["k", "k@x"], ["b", "e"], [3, 2])
    shorter = _stored(["a", "b"], [["k", 1, 2]])
    assert missing_runs([shorter, _stored(["a", "b", "c"], [["k", 1, 3]])], {}) == (
        ["k"],
        ["a"],
        [3],
    )


def _rows(segment_ids: str | None) -> list[dict[str, Any]]:
    head = '{"checkpoint_id":"c","values":{},"messages":{"messages":[["k",1,2]]}}'
    rows: list[dict[str, Any]] = [
        {
            "seq": 5,
            "part": -1,
            "key": None,
            "version": 0,
            "last": None,
            "id": "cw_h",
            "payload_text": head,
        },
    ]
    if segment_ids is not None:
        rows.append(
            {
                "seq": 5,
                "part": 1,
                "key": "k",
                "version": 1,
                "last": 2,
                "id": segment_ids,
                "payload_text": None,
            }
        )
    return rows


def test_a_segment_not_read_whole_is_refused() -> None:
    assert read_checkpoints(_rows("cw_a,cw_b"))[0].message_ids == ["cw_a", "cw_b"]  # type: ignore[arg-type]
    for ids in ("cw_a", "cw_a,cw_b,cw_c", "", None):
        with pytest.raises(DatabaseError, match=r"versions 1\.\.2 of k"):
            read_checkpoints(_rows(ids))  # type: ignore[arg-type]
