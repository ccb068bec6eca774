"""CwstoreSessionService against a real PostgreSQL: what ADK's shared session contract
(tests/unittests/sessions of google/adk-python) checks, and what cwstore adds (a
session is a graph: its nodes, kinds and keys, SQL over it, erasure)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

import cwstore
from cwstore.adk import CwstoreSessionService
from cwstore.adk._mapping import (
    app_graph,
    decode_event,
    encode_event,
    session_graph,
    split_session_graph,
    time_text,
    user_graph,
)


@pytest.fixture
async def service(db_dsn: str) -> AsyncIterator[CwstoreSessionService]:
    async with await CwstoreSessionService.from_dsn(db_dsn) as s:
        yield s


@pytest.fixture
def app() -> str:
    return f"app-{uuid.uuid4().hex[:8]}"


def _delta(**kw: Any) -> EventActions:
    return EventActions(state_delta=kw)


def test_graph_names_are_injective() -> None:
    triples = [("a", "b", "c"), ("a:b", "c", "d"), ("a", "b:c", "d"), ("a%3Ab", "c", "d")]
    names = [session_graph(*t) for t in triples]
    assert len(set(names)) == len(names)
    assert [split_session_graph(n) for n in names] == triples
    assert app_graph("a:b") != user_graph("a", "b")


@pytest.mark.parametrize("ts", [0.0, 100.0, 1700000000.123, 1730613600.0, time.time()])
def test_time_text_holds_the_float_exactly(ts: float) -> None:
    text = time_text(ts)
    assert text is not None
    event = Event(author="user", timestamp=ts)
    payload, created_at = encode_event(event)
    assert "timestamp" not in payload
    assert decode_event(cwstore.canonical_json(payload), created_at).timestamp == ts


def test_a_timestamp_without_exact_text_stays_in_the_payload() -> None:
    event = Event(author="user", timestamp=-5.25)
    payload, created_at = encode_event(event)
    assert payload["timestamp"] == -5.25
    assert decode_event(cwstore.canonical_json(payload), created_at) == event


async def test_create_get_delete(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u", state={"k": "v"})
    assert await service.get_session(app_name=app, user_id="u", session_id=s.id) == s
    await service.delete_session(app_name=app, user_id="u", session_id=s.id)
    assert await service.get_session(app_name=app, user_id="u", session_id=s.id) is None
    assert s.id not in {g.name for g in await service.store.graphs()}
    await service.delete_session(app_name=app, user_id="u", session_id=s.id)


async def test_existing_id_is_refused(service: CwstoreSessionService, app: str) -> None:
    await service.create_session(app_name=app, user_id="u", session_id="x", state={"a": 1})
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="u", session_id="x", state={"a": 2})
    got = await service.get_session(app_name=app, user_id="u", session_id="x")
    assert got is not None and got.state == {"a": 1}


async def test_padded_id_is_the_trimmed_id(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u", session_id=" o-1\n")
    assert s.id == "o-1"
    assert await service.get_session(app_name=app, user_id="u", session_id="o-1 ") == s


async def test_scopes(service: CwstoreSessionService, app: str) -> None:
    s1 = await service.create_session(
        app_name=app, user_id="u1", state={"app:a": 1, "user:b": 2, "c": 3, "temp:t": 4}
    )
    assert s1.state == {"app:a": 1, "user:b": 2, "c": 3}
    ev = Event(author="user", actions=_delta(**{"app:a": None, "user:b": {"x": 1}, "temp:z": 1}))
    await service.append_event(s1, ev)
    assert s1.state["temp:z"] == 1 and "temp:z" not in ev.actions.state_delta
    s2 = await service.create_session(app_name=app, user_id="u2")
    assert s2.state == {"app:a": None}
    s3 = await service.create_session(app_name=app, user_id="u1")
    assert s3.state == {"app:a": None, "user:b": {"x": 1}}
    assert await service.get_user_state(app_name=app, user_id="u1") == {"b": {"x": 1}}
    assert await service.get_user_state(app_name=app, user_id="nobody") == {}


async def test_stale_session_is_refused(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    stale = s.model_copy(deep=True)
    await service.append_event(s, Event(author="user", actions=_delta(k=1)))
    with pytest.raises(StaleSessionError, match="modified in storage"):
        await service.append_event(stale, Event(author="user", actions=_delta(k=2)))
    got = await service.get_session(app_name=app, user_id="u", session_id=s.id)
    assert got is not None and got.state == {"k": 1} and len(got.events) == 1
    # A second service (another process) sees the same: the check is the database's.
    other = CwstoreSessionService(service.store)
    with pytest.raises(StaleSessionError):
        await other.append_event(stale, Event(author="user"))
    await other.append_event(got, Event(author="user"))


async def test_concurrent_appends_one_wins(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    for i in range(4):
        latest = await service.get_session(app_name=app, user_id="u", session_id=s.id)
        assert latest is not None
        a, b = latest.model_copy(deep=True), latest.model_copy(deep=True)
        results = await asyncio.gather(
            service.append_event(a, Event(author="user", actions=_delta(**{f"a{i}": 1}))),
            service.append_event(b, Event(author="user", actions=_delta(**{f"b{i}": 1}))),
            return_exceptions=True,
        )
        assert sum(isinstance(r, StaleSessionError) for r in results) == 1
    final = await service.get_session(app_name=app, user_id="u", session_id=s.id)
    assert final is not None and len(final.events) == 4 and len(final.state) == 4


async def test_markerless_session(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    await service.append_event(s, Event(author="user", invocation_id="1"))
    s._storage_update_marker = None
    await service.append_event(s, Event(author="user", invocation_id="2"))
    stale = s.model_copy(deep=True)
    stale.events.pop()
    stale._storage_update_marker = None
    with pytest.raises(StaleSessionError):
        await service.append_event(stale, Event(author="user"))


async def test_append_to_deleted_session(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u", session_id="gone")
    await service.delete_session(app_name=app, user_id="u", session_id="gone")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(s, Event(author="user"))
    # A new session of the same id is another life: the old object does not write to it.
    await service.create_session(app_name=app, user_id="u", session_id="gone")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(s, Event(author="user"))


async def test_get_session_config(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    base = float(int(time.time()))
    for i in range(1, 6):
        await service.append_event(s, Event(author="user", timestamp=base + i))

    async def times(**kw: Any) -> list[float]:
        got = await service.get_session(
            app_name=app, user_id="u", session_id=s.id, config=GetSessionConfig(**kw)
        )
        assert got is not None
        assert got.last_update_time == base + 5
        return [e.timestamp for e in got.events]

    assert await times() == [base + i for i in range(1, 6)]
    assert await times(num_recent_events=0) == []
    assert await times(num_recent_events=3) == [base + 3, base + 4, base + 5]
    assert await times(after_timestamp=base + 4) == [base + 4, base + 5]
    assert await times(after_timestamp=base + 4.000001) == [base + 5]
    assert await times(after_timestamp=base + 50) == []


async def test_events_round_trip(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    event = Event(
        invocation_id="inv",
        author="user",
        content=types.Content(
            role="user", parts=[types.Part.from_bytes(data=b"\x00\xff", mime_type="x/y")]
        ),
        long_running_tool_ids={"t1"},
        usage_metadata=types.GenerateContentResponseUsageMetadata(total_token_count=2),
        custom_metadata={"k": [1, 2.5, None]},
        timestamp=1700000000.123,
    )
    await service.append_event(s, event)
    assert await service.get_session(app_name=app, user_id="u", session_id=s.id) == s


async def test_a_value_json_cannot_hold_is_its_str(
    service: CwstoreSessionService, app: str
) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    await service.append_event(s, Event(author="user", actions=_delta(f=len, ok=2)))
    got = await service.get_session(app_name=app, user_id="u", session_id=s.id)
    assert got is not None and got.state["ok"] == 2 and isinstance(got.state["f"], str)
    assert got.events[0].actions.state_delta == got.state


async def test_an_event_and_its_shared_state_land_together(
    service: CwstoreSessionService, app: str
) -> None:
    s = await service.create_session(app_name=app, user_id="u")
    too_long = "user:" + "k" * 2100  # its graph's key would pass the 2,000-byte limit
    with pytest.raises(cwstore.ValidationError):
        await service.append_event(s, Event(author="user", actions=_delta(**{too_long: 1})))
    got = await service.get_session(app_name=app, user_id="u", session_id=s.id)
    assert got is not None and got.events == []
    await service.append_event(s, Event(author="user", actions=_delta(**{"user:k": 1})))
    assert await service.get_user_state(app_name=app, user_id="u") == {"k": 1}


async def test_list_sessions(service: CwstoreSessionService, app: str) -> None:
    for sid, user in (("a", "u1"), ("b", "u1"), ("c", "u2")):
        await service.create_session(app_name=app, user_id=user, session_id=sid, state={"s": sid})
    a = await service.get_session(app_name=app, user_id="u1", session_id="a")
    assert a is not None
    await service.append_event(a, Event(author="user", actions=_delta(**{"user:x": 1})))
    mine = (await service.list_sessions(app_name=app, user_id="u1")).sessions
    assert [s.id for s in mine] == ["b", "a"]
    assert [s.state for s in mine] == [{"s": "b", "user:x": 1}, {"s": "a", "user:x": 1}]
    assert all(not s.events for s in mine)
    every = (await service.list_sessions(app_name=app)).sessions
    assert [(s.user_id, s.id) for s in every] == [("u1", "b"), ("u2", "c"), ("u1", "a")]
    assert (await service.list_sessions(app_name=app + "-other")).sessions == []


async def test_a_session_is_a_graph(service: CwstoreSessionService, app: str) -> None:
    s = await service.create_session(app_name=app, user_id="u", state={"k": 0})
    call = types.Part(function_call=types.FunctionCall(name="f", args={"x": 1}))
    reply = types.Part(function_response=types.FunctionResponse(name="f", response={"r": 2}))
    for ev in (
        Event(author="user", content=types.Content(role="user", parts=[types.Part(text="hi")])),
        Event(author="bot", content=types.Content(role="model", parts=[call])),
        Event(author="bot", content=types.Content(role="user", parts=[reply]), actions=_delta(k=1)),
        Event(author="bot", content=types.Content(role="model", parts=[types.Part(text="ok")])),
    ):
        await service.append_event(s, ev)
    graph = session_graph(app, "u", s.id)
    state = await service.store.replay(graph)
    kinds = [(n.kind, n.resource_key) for n in state.nodes]
    assert kinds == [
        ("system", "state"),
        ("goal", None),
        ("tool_call", None),
        ("tool_result", "state"),
        ("answer", None),
    ]
    ids = [n.id for n in state.nodes]
    # A chain in append order; a state version also links to the version before.
    assert [list(n.parents) for n in state.nodes] == [
        [],
        [ids[0]],
        [ids[1]],
        sorted([ids[2], ids[0]]),
        [ids[3]],
    ]
    # The state's versions: the opening's initial state, then the tool result's delta;
    # as of the first event only the first.
    assert (await service.store.project(graph, as_of=2)).resources["state"].version == 1
    assert (await service.store.project(graph)).resources["state"].version == 2
    got = await service.get_session(app_name=app, user_id="u", session_id=s.id)
    assert got is not None and got.state == {"k": 1}
    async with service.store.connection() as conn:
        texts = await conn.fetch(
            "SELECT n.payload -> 'content' -> 'parts' -> 0 ->> 'text' AS text"
            "  FROM cwstore.node_view n WHERE n.graph = $1 AND n.kind IN ('goal', 'answer')"
            " ORDER BY n.seq",
            graph,
        )
    assert [r["text"] for r in texts] == ["hi", "ok"]
