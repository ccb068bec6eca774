"""The async saver (the source the sync one is generated from) on the day-two paths the
sync tests drive: ``aprune`` keeps the latest checkpoint and drops its deleted parent,
refuses a string; ``adelete_for_runs`` finds a run in metadata stored as serializer
bytes; ``alist`` without ``checkpoint_ns`` merges every namespace; a put after another
saver deleted the thread; a bad thread id is an InputError."""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import cwstore
from cwstore.langgraph import AsyncCwstoreSaver


class _State(TypedDict):
    n: int


def _app(saver: AsyncCwstoreSaver) -> Any:
    sub = StateGraph(_State)
    sub.add_node("inner", lambda s: {"n": s["n"] + 1})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    g = StateGraph(_State)
    g.add_node("child", sub.compile())
    g.add_edge(START, "child")
    g.add_edge("child", END)
    return g.compile(checkpointer=saver)


def _config(thread: str, run: str | None = None) -> Any:
    return {"configurable": {"thread_id": thread} | ({"run_id": run} if run else {})}


async def _ids(saver: AsyncCwstoreSaver, config: Any) -> list[str]:
    return [t.checkpoint["id"] async for t in saver.alist(config)]


async def test_the_async_saver_on_day_two(db_dsn: str) -> None:
    async with await cwstore.connect(db_dsn) as store:
        saver, other = AsyncCwstoreSaver(store), AsyncCwstoreSaver(store)
        thread = f"async-{uuid.uuid4().hex[:8]}"
        app = _app(saver)
        await app.ainvoke({"n": 1}, _config(thread, f"{thread}-r1"))
        await app.ainvoke({"n": 1.0}, _config(thread, f"{thread}-r2"))

        every = await _ids(saver, _config(thread))
        assert every == sorted(every, reverse=True)
        root = await _ids(saver, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        assert set(root) < set(every)

        # Run r2's input checkpoint holds n = 1.0 (metadata as serializer bytes).
        await saver.adelete_for_runs([f"{thread}-r2"])
        left = [t async for t in saver.alist(_config(thread))]
        assert {t.metadata.get("run_id") for t in left} == {f"{thread}-r1"}

        with pytest.raises(cwstore.InputError, match="thread_ids"):
            await saver.aprune(thread)
        await saver.aprune([thread])
        kept = [
            t
            async for t in saver.alist({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        ]
        assert len(kept) == 1 and kept[0].parent_config is None

        latest = await saver.aget_tuple(_config(thread))
        assert latest is not None
        await other.adelete_thread(thread)
        checkpoint: Any = {**latest.checkpoint, "id": str(uuid.uuid4())}
        stored = await saver.aput(latest.config, checkpoint, {"step": 9}, {})
        assert (await saver.aget_tuple(stored)) is not None

        with pytest.raises(cwstore.InputError, match="thread_id"):
            await saver.aget_tuple(_config("bad\x00id"))
