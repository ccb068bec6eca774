"""list() reads a long thread a page of checkpoints at a time (a listing holds at most a
page of them in memory): every checkpoint comes, once, newest first, as LangGraph's
PostgreSQL saver lists them, with and without limit, before and filter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._saver_async import _LIST_PAGE

STEPS = 2 * _LIST_PAGE + 7


def _thread(saver: BaseCheckpointSaver[Any], thread: str) -> list[str]:
    """STEPS checkpoints, each adding a message; their ids, oldest first."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint: Any = empty_checkpoint()
    messages: list[Any] = []
    versions: dict[str, Any] = {}
    ids = []
    for step in range(STEPS):
        cls = HumanMessage if step % 2 == 0 else AIMessage
        messages = [*messages, cls(content=f"message {step}", id=f"m-{step}")]
        new = {"messages": saver.get_next_version(versions.get("messages"), None)}
        versions.update(new)
        checkpoint = {
            **checkpoint,
            "id": str(uuid6(clock_seq=step)),
            "channel_values": {"messages": messages},
            "channel_versions": dict(versions),
        }
        metadata: Any = {"source": "loop", "step": step, "parity": step % 2}
        config = saver.put(config, checkpoint, metadata, new)
        ids.append(checkpoint["id"])
    return ids


def _listed(saver: BaseCheckpointSaver[Any], thread: str, **kwargs: Any) -> list[tuple[str, int]]:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return [
        (t.checkpoint["id"], len(t.checkpoint["channel_values"]["messages"]))
        for t in saver.list(config, **kwargs)
    ]


@pytest.fixture(scope="module")
def savers(db_dsn: str) -> Iterator[tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]]]:
    with cwstore.connect_sync(db_dsn) as store, PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        yield CwstoreSaver(store), pg


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"limit": _LIST_PAGE},
        {"limit": _LIST_PAGE + 1},
        {"limit": STEPS + 5},
        {"filter": {"parity": 1}},
        {"filter": {"parity": 0}, "limit": _LIST_PAGE + 2},
        {"before": 30},
        {"before": 30, "limit": _LIST_PAGE + 3},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "all",
)
def test_list_pages_through_a_long_thread_as_langgraph_lists(
    savers: tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]], kwargs: dict[str, Any]
) -> None:
    ours, theirs = savers
    name = "list-" + "-".join(f"{k}{v}" for k, v in sorted(kwargs.items())).replace(" ", "")
    ids = {"cw": _thread(ours, name), "pg": _thread(theirs, name)}
    listed = {}
    for tag, saver in (("cw", ours), ("pg", theirs)):
        kw = dict(kwargs)
        if "before" in kw:
            kw["before"] = {"configurable": {"checkpoint_id": ids[tag][kw["before"]]}}
        got = _listed(saver, name, **kw)
        position = {cid: i for i, cid in enumerate(ids[tag])}
        listed[tag] = [(position[cid], n) for cid, n in got]
    assert listed["cw"] == listed["pg"]
    assert len(listed["cw"]) == len(set(listed["cw"]))
    if not kwargs:
        assert [i for i, _ in listed["cw"]] == list(reversed(range(STEPS)))


def test_a_listing_reads_a_page_at_a_time(
    savers: tuple[BaseCheckpointSaver[Any], BaseCheckpointSaver[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours, _ = savers
    assert isinstance(ours, CwstoreSaver)
    _thread(ours, "list-pages")
    asked: list[Any] = []
    read = CwstoreSaver._checkpoints

    def spy(self: CwstoreSaver, *args: Any, **kwargs: Any) -> Any:
        found = read(self, *args, **kwargs)
        asked.append((kwargs.get("limit"), len(found)))
        return found

    monkeypatch.setattr(CwstoreSaver, "_checkpoints", spy)
    assert len(_listed(ours, "list-pages")) == STEPS
    assert asked == [(_LIST_PAGE, _LIST_PAGE), (_LIST_PAGE, _LIST_PAGE), (_LIST_PAGE, 7)]
