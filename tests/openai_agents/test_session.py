"""CwstoreSession against a real PostgreSQL: what the SDK's own session tests check
(SQLAlchemySession's and SQLiteSession's: direct operations, limits and settings,
isolation, order, unicode, concurrent writers and pops, atomic batches, the Runner),
and what cwstore adds (history kept through pop and clear, SQL and as-of reads over a
session, erasure)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

import asyncpg
import pytest
from agents import Agent, ModelSettings, Runner, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import cwstore
from cwstore.openai_agents import CwstoreSession

set_tracing_disabled(True)


def _user(text: str) -> TResponseInputItem:
    return cast("TResponseInputItem", {"role": "user", "content": text})


def _assistant(text: str) -> TResponseInputItem:
    return cast("TResponseInputItem", {"role": "assistant", "content": text})


async def _contents(session: CwstoreSession, limit: int | None = None) -> list[Any]:
    return [dict(i).get("content") for i in await session.get_items(limit)]


async def test_is_an_sdk_session(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("protocol", store)
    assert isinstance(session, Session)
    assert session.session_id == "protocol"
    assert session.graph == "openai-agents:protocol"
    assert session.store is store


async def test_direct_operations(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("direct", store)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.clear_session()
    assert not await _exists(store, session)
    items = [_user("Hello"), _assistant("Hi there!")]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.pop_item() == items[1]
    assert await session.get_items() == items[:1]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    length = await store.length(session.graph)
    await session.clear_session()
    await session.add_items([])
    assert await session.get_items() == []
    assert await store.length(session.graph) == length


async def _exists(store: cwstore.AsyncStore, session: CwstoreSession) -> bool:
    return any(g.name == session.graph for g in await store.graphs())


async def test_limits_and_settings(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("limits", store)
    await session.add_items([_user(f"m{i}") for i in range(3)])
    await session.add_items([_user("m3")])
    await session.add_items([_user("m4"), _user("m5")])
    assert await _contents(session, 2) == ["m4", "m5"]
    assert await _contents(session, 3) == ["m3", "m4", "m5"]
    assert await _contents(session, 5) == ["m1", "m2", "m3", "m4", "m5"]
    assert await _contents(session, 100) == [f"m{i}" for i in range(6)]
    assert await session.get_items(0) == []
    assert await session.get_items(-1) == []
    limited = CwstoreSession("limits", store, session_settings=SessionSettings(limit=2))
    assert await _contents(limited) == ["m4", "m5"]
    assert await _contents(limited, 4) == ["m2", "m3", "m4", "m5"]
    from_dict = CwstoreSession("limits", store, session_settings={"limit": 1})
    assert await _contents(from_dict) == ["m5"]
    assert CwstoreSession("x", store).session_settings == SessionSettings()


async def test_limit_counts_live_items_across_pops(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("limit-pops", store)
    for i in range(6):
        await session.add_items([_user(f"m{i}")])
    for _ in range(3):
        await session.pop_item()
    await session.add_items([_user("n")])
    assert await _contents(session, 1) == ["n"]
    assert await _contents(session, 2) == ["m2", "n"]
    assert await _contents(session, 4) == ["m0", "m1", "m2", "n"]
    assert await _contents(session) == ["m0", "m1", "m2", "n"]
    assert await session.pop_item() == _user("n")
    assert await session.pop_item() == _user("m2")
    assert await _contents(session) == ["m0", "m1"]


async def test_sessions_are_isolated(store: cwstore.AsyncStore) -> None:
    one, two = CwstoreSession("iso-1", store), CwstoreSession("iso-2", store)
    await one.add_items([_user("one")])
    await two.add_items([_user("two")])
    assert await _contents(one) == ["one"]
    assert await _contents(two) == ["two"]
    await one.clear_session()
    assert await _contents(two) == ["two"]
    assert await one.pop_item() is None
    assert await two.pop_item() == _user("two")


async def test_order_is_the_order_written(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("order", store)
    expected: list[str] = []
    for batch in range(10):
        texts = [f"{batch}-{i}" for i in range(batch % 3 + 1)]
        await session.add_items([_user(t) for t in texts])
        expected += texts
    await session.add_items([_user("same")] * 3)
    expected += ["same"] * 3
    assert await _contents(session) == expected
    assert await _contents(session, 7) == expected[-7:]
    for _ in range(3):
        assert await session.pop_item() == _user("same")
    assert await _contents(session) == expected[:-3]


async def test_unicode_and_odd_session_ids(store: cwstore.AsyncStore) -> None:
    for sid in ("'; DROP TABLE cwstore.nodes; --", "üñí:cødé%/\\", " ", ""):
        session = CwstoreSession(sid, store)
        items = [_user("héllo 世界 🌍"), _assistant("\u0000 nul, \"quotes\", 'single'")]
        await session.add_items(items)
        assert await session.get_items() == items
    assert await store.length("openai-agents:'; DROP TABLE cwstore.nodes; --") == 1


async def test_items_come_back_exactly(store: cwstore.AsyncStore) -> None:
    item = cast(
        "TResponseInputItem",
        {
            "type": "function_call_output",
            "call_id": "c-1",
            "output": json.dumps({"n": 1.5, "list": [None, True, "x"]}),
            "extra": {"z": 1, "a": [1e-7, -0.0, 12345678901234]},
        },
    )
    session = CwstoreSession("exact", store)
    await session.add_items([item])
    assert await session.get_items() == [item]
    fresh = CwstoreSession("exact", store)
    assert json.dumps(await fresh.get_items()) == json.dumps([item]).replace("-0.0", "0")


async def test_numbers_come_back_as_javascript_writes_them(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("numbers", store)
    await session.add_items([cast("TResponseInputItem", {"a": [1.0, -0.0, 2.5, 1e21, 1e-7]})])
    (item,) = await session.get_items()
    assert json.dumps(item) == '{"a": [1, 0, 2.5, 1e+21, 1e-07]}'


async def test_a_refused_batch_writes_nothing(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("atomic", store)
    await session.add_items([_user("kept")])
    bad: list[Any] = [
        [_user("a"), {"x": float("nan")}],
        [_user("a"), {"x": {1, 2}}],
        [_user("a"), {"x": 2**60}],
    ]
    for batch in bad:
        with pytest.raises(cwstore.ValidationError) as info:
            await session.add_items(batch)
        assert info.value.violations[0].path.startswith("$[0].payload.items[1]")
    with pytest.raises(cwstore.InputError, match=r"items\[1\]"):
        await session.add_items(cast("list[TResponseInputItem]", [_user("a"), "text"]))
    with pytest.raises(cwstore.InputError, match="session_id"):
        CwstoreSession(cast("str", 7), store)
    assert await _contents(session) == ["kept"]
    assert await store.length(session.graph) == 1


async def test_concurrent_writers_interleave_whole_batches(store: cwstore.AsyncStore) -> None:
    writers = [CwstoreSession("concurrent", store) for _ in range(4)]

    async def write(w: int) -> None:
        for b in range(5):
            await writers[w].add_items([_user(f"{w}.{b}.{i}") for i in range(3)])

    await asyncio.gather(*(write(w) for w in range(4)))
    contents = await _contents(writers[0])
    assert len(contents) == 60 and len(set(contents)) == 60
    for start in range(0, 60, 3):
        batch = contents[start : start + 3]
        assert [c.rsplit(".", 1)[0] for c in batch] == [batch[0].rsplit(".", 1)[0]] * 3
        assert [c.rsplit(".", 1)[1] for c in batch] == ["0", "1", "2"]
    for w in range(4):
        mine = [c for c in contents if c.startswith(f"{w}.")]
        assert mine == [f"{w}.{b}.{i}" for b in range(5) for i in range(3)]


async def test_the_same_batch_from_two_writers_is_kept_twice(store: cwstore.AsyncStore) -> None:
    one, two = CwstoreSession("twice", store), CwstoreSession("twice", store)
    await one.add_items([_user("start")])
    await two.get_items()
    await one.add_items([_user("same")])
    await two.add_items([_user("same")])
    assert await _contents(one) == ["start", "same", "same"]
    await one.pop_item()
    await two.get_items()
    await one.pop_item()
    assert await two.pop_item() == _user("start")
    assert await one.get_items() == []


async def test_concurrent_writers_on_one_session(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("many-on-one", store)
    submitted = [f"msg-{i}" for i in range(25)]
    results = await asyncio.gather(
        *(session.add_items([_user(c)]) for c in submitted), return_exceptions=True
    )
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert sorted(await _contents(session)) == sorted(submitted)
    await session.add_items([_user("after")])
    state = await store.replay(session.graph)
    assert len(state.frontier) == 1
    assert await store.length(session.graph) == 26


@contextlib.asynccontextmanager
async def _graph_row_locked(dsn: str, graph: str) -> AsyncIterator[asyncpg.Connection]:
    """Hold the graph's row locked from another connection: writes wait on it."""
    blocker = await asyncpg.connect(dsn)
    try:
        async with blocker.transaction():
            await blocker.execute("SELECT 1 FROM cwstore.graphs WHERE name = $1 FOR UPDATE", graph)
            yield blocker
    finally:
        await blocker.close()


async def _until_a_lock_is_awaited(conn: asyncpg.Connection) -> None:
    for _ in range(1000):
        if await conn.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the write never waited on the graph's row")


@pytest.mark.parametrize("operation", ["add", "pop", "clear"])
async def test_a_cancelled_write_lands_whole(
    store: cwstore.AsyncStore, db_dsn: str, operation: str
) -> None:
    """Cancelled while its append waits on the graph's row (held by another
    connection), the write still lands whole once the row is free, and only then does
    the caller see the cancellation."""
    session = CwstoreSession(f"cancelled-{operation}", store)
    await session.add_items([_user("first"), _user("second")])
    length = await store.length(session.graph)
    async with _graph_row_locked(db_dsn, session.graph) as blocker:
        if operation == "add":
            task: asyncio.Task[Any] = asyncio.create_task(
                session.add_items([_user("third"), _user("fourth")])
            )
        elif operation == "pop":
            task = asyncio.create_task(session.pop_item())
        else:
            task = asyncio.create_task(session.clear_session())
        await _until_a_lock_is_awaited(blocker)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.length(session.graph) == length + 1
    expected = {
        "add": ["first", "second", "third", "fourth"],
        "pop": ["first"],
        "clear": [],
    }[operation]
    assert await _contents(session) == expected


async def test_concurrent_pops_return_each_item_once(store: cwstore.AsyncStore) -> None:
    first = CwstoreSession("pops", store)
    await first.add_items([_user(f"m{i}") for i in range(20)])
    poppers = [CwstoreSession("pops", store) for _ in range(4)]

    async def pop_all(session: CwstoreSession) -> list[Any]:
        got = []
        while (item := await session.pop_item()) is not None:
            got.append(dict(item)["content"])
        return got

    results = await asyncio.gather(*(pop_all(p) for p in poppers))
    popped = [c for r in results for c in r]
    assert sorted(popped) == sorted(f"m{i}" for i in range(20))
    for r in results:
        assert r == sorted(r, key=lambda c: -int(c[1:]))
    assert await first.get_items() == []


async def test_history_is_kept_through_pop_and_clear(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("history", store)
    await session.add_items([_user("q1")])
    await session.add_items(
        [
            cast("TResponseInputItem", {"type": "function_call", "call_id": "c", "name": "f"}),
            cast("TResponseInputItem", {"type": "function_call_output", "call_id": "c"}),
        ]
    )
    await session.add_items([_assistant("a1")])
    before_clear = await store.length(session.graph)
    assert await session.pop_item() == _assistant("a1")
    await session.clear_session()
    await session.clear_session()
    await session.add_items([_user("q2")])
    assert await _contents(session) == ["q2"]

    state = await store.replay(session.graph)
    kinds = [n.kind for n in state.nodes]
    assert kinds == ["goal", "tool_result", "answer", "system", "system", "goal"]
    pop, clear = state.nodes[3], state.nodes[4]
    assert pop.payload == {"pop": {"node": state.nodes[2].id, "index": 0}}
    assert pop.parents == (state.nodes[2].id,)
    assert clear.payload == {"clear": True}
    assert clear.resource_key == "openai-agents:clear"
    assert [n.parents for n in state.nodes[1:]] == [(n.id,) for n in state.nodes[:-1]]
    assert list(state.frontier) == [state.nodes[-1].id]

    past = await store.replay(session.graph, as_of=before_clear)
    assert [i.get("content") for n in past.nodes for i in n.payload["items"]] == [
        "q1",
        None,
        None,
        "a1",
    ]

    async with store.snapshot() as conn:
        rows = await conn.fetch(
            """SELECT n.seq, i.ord, i.item ->> 'type' AS type, i.item ->> 'content' AS content
                 FROM cwstore.node_view n
                 CROSS JOIN LATERAL jsonb_array_elements(n.payload -> 'items')
                      WITH ORDINALITY i(item, ord)
                WHERE n.graph = $1 ORDER BY n.seq, i.ord""",
            session.graph,
        )
    assert [(r["seq"], r["type"], r["content"]) for r in rows] == [
        (1, None, "q1"),
        (2, "function_call", None),
        (2, "function_call_output", None),
        (3, None, "a1"),
        (6, None, "q2"),
    ]


_EVERY_ITEM = """
WITH s AS (SELECT seq, id, payload FROM cwstore.node_view WHERE graph = $1),
     cleared AS (SELECT coalesce(max(seq), 0) AS seq FROM s WHERE payload ? 'clear'),
     popped AS (SELECT payload -> 'pop' ->> 'node' AS node,
                       (payload -> 'pop' ->> 'index')::int AS idx
                  FROM s WHERE payload ? 'pop')
SELECT s.seq, i.ord - 1 AS index, i.item ->> 'content' AS content,
       s.seq <= cleared.seq AS cleared, p.node IS NOT NULL AS popped
  FROM s CROSS JOIN cleared
 CROSS JOIN LATERAL jsonb_array_elements(s.payload -> 'items') WITH ORDINALITY i(item, ord)
  LEFT JOIN popped p ON p.node = s.id AND p.idx = i.ord - 1
 ORDER BY s.seq, i.ord"""
"""docs/openai-agents.md's query: every item ever added, and whether it was popped or
cleared since."""


async def test_sql_tells_every_item_and_its_fate(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("fate", store)
    await session.add_items([_user("a"), _user("b")])
    await session.pop_item()
    await session.clear_session()
    await session.add_items([_user("c"), _user("d")])
    await session.pop_item()
    async with store.snapshot() as conn:
        rows = await conn.fetch(_EVERY_ITEM, session.graph)
    assert [(r["content"], r["cleared"], r["popped"]) for r in rows] == [
        ("a", True, False),
        ("b", True, True),
        ("c", False, False),
        ("d", False, True),
    ]
    live = [r["content"] for r in rows if not r["cleared"] and not r["popped"]]
    assert live == await _contents(session)


async def test_retention_group(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("kept-together", store, retention_group="user-7")
    await session.add_items([_user("x")])
    await CwstoreSession("kept-together-2", store, retention_group="user-7").add_items([_user("y")])
    await asyncio.sleep(0.02)
    idle = await store.idle_graphs(timedelta(milliseconds=1))
    groups = {g.graph: g.retention_group for g in idle}
    assert groups[session.graph] == groups["openai-agents:kept-together-2"] == "user-7"


async def test_erase_removes_the_session(store: cwstore.AsyncStore) -> None:
    session = CwstoreSession("erased", store)
    assert await session.erase() == 0
    await session.add_items([_user("secret")])
    await session.pop_item()
    assert await session.erase(reason="user asked") == 2
    assert not await _exists(store, session)
    assert await session.get_items() == []
    await session.add_items([_user("new life")])
    assert await _contents(session) == ["new life"]
    assert await store.length(session.graph) == 1
    other = CwstoreSession("erased", store)
    assert await other.erase() == 1
    await session.add_items([_user("after another erased it")])
    assert await _contents(other) == ["after another erased it"]


async def test_a_stale_writer_reads_again(store: cwstore.AsyncStore) -> None:
    one, two = CwstoreSession("stale", store), CwstoreSession("stale", store)
    await one.add_items([_user("1")])
    await two.add_items([_user("2")])
    await one.add_items([_user("3")])
    await two.clear_session()
    await one.add_items([_user("4")])
    assert await _contents(two) == ["4"]
    state = await store.replay(one.graph)
    assert [n.parents for n in state.nodes[1:]] == [(n.id,) for n in state.nodes[:-1]]


async def test_from_dsn_owns_its_store(db_dsn: str) -> None:
    async with await CwstoreSession.from_dsn("owned", db_dsn) as session:
        await session.add_items([_user("x")])
        assert await _contents(session) == ["x"]
        owned = session.store
    with pytest.raises(cwstore.Error):
        await owned.length(session.graph)
    async with await cwstore.connect(db_dsn) as store:
        borrowed = CwstoreSession("owned", store)
        await borrowed.close()
        assert await _contents(borrowed) == ["x"]


class _EchoModel(Model):
    """Answers with how many items it was given and the last user message."""

    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
        **_: Any,
    ) -> ModelResponse:
        items = [_user(input)] if isinstance(input, str) else list(input)
        self.seen.append(items)
        text = f"{len(items)} items, last {dict(items[-1]).get('content')!r}"
        message = ResponseOutputMessage(
            type="message",
            id=f"msg_{len(self.seen)}",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError


async def test_runner_keeps_the_conversation(store: cwstore.AsyncStore) -> None:
    model = _EchoModel()
    agent = Agent(name="echo", model=model)
    session = CwstoreSession("runner", store)
    first = await Runner.run(agent, "What city is the Golden Gate Bridge in?", session=session)
    assert first.final_output == "1 items, last 'What city is the Golden Gate Bridge in?'"
    second = await Runner.run(agent, "What state is it in?", session=session)
    assert second.final_output == "3 items, last 'What state is it in?'"
    assert [dict(i).get("role") for i in model.seen[-1]] == ["user", "assistant", "user"]
    items = await session.get_items()
    assert len(items) == 4
    limited = CwstoreSession("runner", store, session_settings=SessionSettings(limit=2))
    await Runner.run(agent, "And the country?", session=limited)
    assert [dict(i).get("role") for i in model.seen[-1]] == ["user", "assistant", "user"]
    assert len(await session.get_items()) == 6
    kinds = [n.kind for n in (await store.replay(session.graph)).nodes]
    assert kinds == ["goal", "answer"] * 3
