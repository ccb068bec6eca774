"""The two clients behave alike: each scenario runs through :class:`cwstore.AsyncStore`
and through :class:`cwstore.Store`, and what each returns or raises must be equal.

The sync client is generated from the async one (``tools/async_to_sync.py``); this test
is what catches a difference the generator or a driver adapter lets through (it caught
``Vocabulary.fixed([])``, stored as dynamic by one client and refused by the other).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from support.stores import ThreadedStore

import cwstore
from cwstore import Vocabulary

T0 = "2025-01-01T00:00:00.000Z"
Scenario = Callable[[Any, str], Awaitable[Any]]


def _plain(value: Any) -> Any:
    """``value`` as plain data to compare (times of writing and graph ids dropped)."""
    if isinstance(value, cwstore.CausalNode | cwstore.AgentState):
        return value.to_obj()
    if isinstance(value, cwstore.GraphInfo):
        return (value.name, value.length, value.vocabulary, value.tenant)
    if isinstance(value, cwstore.KeyVersion):
        return {k: v for k, v in dataclasses.asdict(value).items() if k != "recorded_at"}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


async def _outcome(scenario: Scenario, store: Any, graph: str) -> Any:
    """What the scenario returned or raised, as text with the graph's name left out
    (each client writes graphs of its own)."""
    try:
        found: Any = ("ok", _plain(await scenario(store, graph)))
    except cwstore.Error as exc:
        fields = {k: _plain(v) for k, v in vars(exc).items()}
        found = ("raised", type(exc).__name__, fields)
    return repr(found).replace(graph, "<graph>")


def _node(kind: str, parents: list[str], payload: Any, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "parents": parents, "payload": payload, "createdAt": T0, **extra}


async def _chain(store: Any, graph: str) -> list[Any]:
    goal = (await store.append(graph, [_node("goal", [], {"text": "plan"})]))[0]
    res = await store.append(
        graph, [_node("resource", [goal.id], {"v": 1}, resourceKey="file:a")], expected_length=1
    )
    return [goal, *res]


async def import_fixed_empty_vocabulary(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    doc = await store.export_json(graph)
    return await store.import_state(graph + "-copy", doc, vocabulary=Vocabulary.fixed([]))


async def import_then_read(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    doc = await store.export_json(graph)
    copy = graph + "-copy"
    n = await store.import_state(copy, doc, vocabulary=Vocabulary.fixed(["memory"]))
    infos = [g for g in await store.graphs() if g.name == copy]
    return [n, infos, await store.export_json(copy) == doc, await store.frontier(copy)]


async def append_stale_length(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    return await store.append(graph, [_node("goal", [], {"text": "late"})], expected_length=1)


async def append_bad_batch(store: Any, graph: str) -> Any:
    return await store.append(graph, [_node("nope", [], {}), _node("goal", ["x"], {"a": 1})])


async def save_diverged(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    other = graph + "-other"
    await store.append(other, [_node("goal", [], {"text": "other"})])
    return await store.save(graph, await store.replay(other))


async def save_extends(store: Any, graph: str) -> Any:
    nodes = await _chain(store, graph)
    state = await store.replay(graph)
    doc = state.to_obj()
    await store.append(graph + "-scratch", [_node("goal", [], {"text": "x"})])
    written = await store.save(graph, doc)
    return [len(nodes), written, await store.length(graph)]


async def reads(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    return [
        await store.project(graph),
        await store.project(graph, 1),
        await store.history(graph, "resource:file:a"),
        (await store.replay(graph, 1)).to_obj(),
    ]


async def read_past_the_end(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    return await store.export_json(graph, 5)


async def unknown_graph(store: Any, graph: str) -> Any:
    return await store.length(graph)


async def bad_arguments(store: Any, graph: str) -> Any:
    return await store.project(graph, -1)


async def erase_then_reuse(store: Any, graph: str) -> Any:
    await _chain(store, graph)
    erased = await store.erase(graph, reason="twin")
    again = await store.append(graph, [_node("goal", [], {"text": "again"})])
    return [erased, again, await store.length(graph)]


async def erase_unknown(store: Any, graph: str) -> Any:
    return await store.erase(graph)


async def erase_tenant_bad_batch(store: Any, graph: str) -> Any:
    return await store.erase_tenant("acme", batch=0)


SCENARIOS = [
    import_fixed_empty_vocabulary,
    import_then_read,
    append_stale_length,
    append_bad_batch,
    save_diverged,
    save_extends,
    reads,
    read_past_the_end,
    unknown_graph,
    bad_arguments,
    erase_then_reuse,
    erase_unknown,
    erase_tenant_bad_batch,
]


@pytest.fixture
async def clients(db_dsn: str) -> AsyncIterator[tuple[Any, Any]]:
    astore = await cwstore.connect(db_dsn, max_size=2)
    sync = await asyncio.to_thread(cwstore.connect_sync, db_dsn, max_size=2)
    try:
        yield astore, ThreadedStore(sync)
    finally:
        await astore.close()
        await asyncio.to_thread(sync.close)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
async def test_both_clients_agree(scenario: Scenario, clients: tuple[Any, Any]) -> None:
    astore, sstore = clients
    tag = uuid.uuid4().hex
    got_async = await _outcome(scenario, astore, f"twin-a-{tag}")
    got_sync = await _outcome(scenario, sstore, f"twin-s-{tag}")
    assert got_async == got_sync


async def test_an_empty_fixed_vocabulary_is_refused(clients: tuple[Any, Any]) -> None:
    """Both clients refuse it the same way, before any I/O: a fixed vocabulary names
    1 to 32 types, as the runtime's ``nodeTypes`` do."""
    for store in clients:
        outcome = await _outcome(import_fixed_empty_vocabulary, store, f"g-{uuid.uuid4().hex}")
        assert outcome.startswith("('raised', 'InputError'"), outcome


# --- bad arguments: both clients refuse them alike, with InputError, before the driver ---

FAR_EAST = timezone(timedelta(hours=14))
EARLIEST = datetime(1, 1, 1, tzinfo=FAR_EAST)  # before 0001-01-01 in UTC
LATEST = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-14)))


async def _with_root(store: Any, graph: str) -> None:
    await store.append(graph, [_node("goal", [], {"text": "root"})])


def _append_expecting(length: Any) -> Scenario:
    async def scenario(store: Any, graph: str) -> Any:
        await _with_root(store, graph)
        more = [_node("goal", [], {"text": "more"})]
        return await store.append(graph, more, expected_length=length)

    scenario.__name__ = f"append_expected_length_{length!r}"
    return scenario


def _save_expecting(length: Any) -> Scenario:
    async def scenario(store: Any, graph: str) -> Any:
        await _with_root(store, graph)
        return await store.save(graph, await store.replay(graph), expected_length=length)

    scenario.__name__ = f"save_expected_length_{length!r}"
    return scenario


def _read_as_of(method: str, as_of: Any) -> Scenario:
    async def scenario(store: Any, graph: str) -> Any:
        await _with_root(store, graph)
        return await getattr(store, method)(graph, as_of)

    scenario.__name__ = f"{method}_as_of_{as_of!r}"
    return scenario


def _history_of(key: Any) -> Scenario:
    async def scenario(store: Any, graph: str) -> Any:
        await _with_root(store, graph)
        return await store.history(graph, key)

    scenario.__name__ = f"history_key_{key!r}"
    return scenario


def _tail_after(after: Any) -> Scenario:
    async def scenario(store: Any, graph: str) -> Any:
        await _with_root(store, graph)
        feed = store.tail(graph, after)
        try:
            return await asyncio.wait_for(anext(aiter(feed)), 10)
        finally:
            await feed.aclose()

    scenario.__name__ = f"tail_after_{after!r}"
    return scenario


BAD_ARGUMENTS = [
    *(_append_expecting(v) for v in (1.5, False, True, -1, "1", 2**63)),
    *(_save_expecting(v) for v in (1.5, False, -1)),
    *(
        _read_as_of(m, t)
        for m in ("project", "export_json", "replay")
        for t in (EARLIEST, LATEST, 2**63, 1.0)
    ),
    *(_history_of(k) for k in ("a\x00b", "\ud800", "", 5, None)),
    *(_tail_after(a) for a in (2**63, 1.0, -1)),
]


@pytest.mark.parametrize("scenario", BAD_ARGUMENTS, ids=[s.__name__ for s in BAD_ARGUMENTS])
async def test_both_clients_refuse_bad_arguments_alike(
    scenario: Scenario, clients: tuple[Any, Any]
) -> None:
    astore, sstore = clients
    tag = uuid.uuid4().hex
    got_async = await _outcome(scenario, astore, f"twin-a-{tag}")
    got_sync = await _outcome(scenario, sstore, f"twin-s-{tag}")
    assert got_async == got_sync
    assert got_async.startswith("('raised', 'InputError'"), got_async
