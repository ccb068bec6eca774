"""Small channel values are held inline by the checkpoint's node (``"inline"``), not
stored as nodes of their own; larger ones still are (``lg:ch:<channel>``). Values come
back as they were put, whichever way they were stored; a value that grows past the
bound becomes a node again (a first value of its key, or a new chain on a fork), and
the other way round. Checkpoints stored before (every value a node, named by id in
``"values"``) read as before and a put continues them. With an ``EncryptedSerializer``
an inline value is the serializer's bytes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, TypedDict

import psycopg
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from support.langgraph import Cipher, rows_holding

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import INLINE_BYTES, encode_value, graph_name

BIG = "x" * (INLINE_BYTES + 1)
SECRET = "attack at dawn"


@pytest.fixture(scope="module")
def store(db_dsn: str) -> Iterator[cwstore.Store]:
    with cwstore.connect_sync(db_dsn) as s:
        yield s


def _config(thread: str, checkpoint_id: str | None = None) -> Any:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    return {
        "configurable": conf if checkpoint_id is None else {**conf, "checkpoint_id": checkpoint_id}
    }


def _put(
    saver: BaseCheckpointSaver[Any],
    config: Any,
    values: dict[str, Any],
    versions: dict[str, int],
    changed: dict[str, int],
) -> Any:
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=-1)),
        "channel_values": values,
        "channel_versions": versions,
    }
    return saver.put(config, checkpoint, {"step": max(versions.values())}, dict(changed))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _nodes(dsn: str, thread: str) -> list[tuple[str, str, str, list[str], Any]]:
    """The thread's nodes in order: kind, key, id, parents, payload."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT kind, resource_key, id, parents, payload FROM cwstore.node_view "
            "WHERE graph = %s ORDER BY seq",
            (graph_name(thread, ""),),
        ).fetchall()
    return [(r[0], r[1], r[2], list(r[3]), r[4]) for r in rows]


def _cp_payload(dsn: str, thread: str, checkpoint_id: str) -> Any:
    (payload,) = [p for _, k, _, _, p in _nodes(dsn, thread) if k == f"lg:cp:{checkpoint_id}"]
    return payload


def _id(config: Any) -> str:
    return str(config["configurable"]["checkpoint_id"])


def test_small_values_are_inline_and_round_trip(store: cwstore.Store, db_dsn: str) -> None:
    saver = CwstoreSaver(store)
    thread = f"inline-{uuid.uuid4().hex[:8]}"
    values: dict[str, Any] = {
        "none": None,
        "s": "hello",
        "n": 3,
        "f": 1.5,
        "one": 1.0,  # serde: JSON would read it back as 1
        "t": {1, 2},
        "b": b"\x00\x01",
        "d": {"a": [1, 2], "é": "ü"},
        "big": BIG,
    }
    v1 = dict.fromkeys(values, 1)
    first = _put(saver, _config(thread), values, v1, v1)
    second_values = {**values, "n": 4}
    second = _put(saver, first, second_values, {**v1, "n": 2}, {"n": 2})

    fresh = CwstoreSaver(store)
    for config, want in ((first, values), (second, second_values)):
        tup = fresh.get_tuple(config)
        assert tup is not None and _same(tup.checkpoint["channel_values"], want)
    listed = [t.checkpoint["channel_values"] for t in fresh.list(_config(thread))]
    assert len(listed) == 2
    assert _same(listed[0], second_values) and _same(listed[1], values)

    nodes = _nodes(db_dsn, thread)
    assert [k for kind, k, *_ in nodes if kind == "resource"] == ["lg:ch:big"]
    (big_id,) = [i for _, k, i, _, _ in nodes if k == "lg:ch:big"]
    small = set(values) - {"big"}
    one, two = _cp_payload(db_dsn, thread, _id(first)), _cp_payload(db_dsn, thread, _id(second))
    assert one["values"] == two["values"] == {"big": big_id}
    assert set(one["inline"]) == set(two["inline"]) == small
    assert one["inline"]["s"] == {"version": 1, "json": "hello"}
    assert two["inline"]["n"] == {"version": 2, "json": 4}
    assert "serde" in one["inline"]["t"] and "serde" in one["inline"]["one"]


def test_a_checkpoint_stored_before_reads_and_continues(store: cwstore.Store, db_dsn: str) -> None:
    """Two checkpoints in the form written before values were held inline (every value
    a node, the checkpoint naming it by id), appended through the store as the saver
    wrote them then."""
    thread = f"oldform-{uuid.uuid4().hex[:8]}"
    serde = JsonPlusSerializer()
    nodes: list[dict[str, Any]] = []

    def node(kind: str, parents: list[str], payload: Any, key: str) -> str:
        parents = sorted(parents)
        node_id = cwstore.compute_id(kind, parents, payload, key)
        nodes.append(
            {
                "id": node_id,
                "kind": kind,
                "parents": parents,
                "payload": payload,
                "resourceKey": key,
            }
        )
        return node_id

    def checkpoint(cid: str, parent: str | None, versions: dict[str, int], ids: Any) -> Any:
        rest = {**empty_checkpoint(), "channel_versions": versions}
        for k in ("id", "ts", "channel_values"):
            rest.pop(k)
        return {
            "checkpoint_id": cid,
            "parent_checkpoint_id": parent,
            "ts": "2026-01-01T00:00:00+00:00",
            "metadata": encode_value(serde, {"source": "loop", "step": versions["count"]}),
            "checkpoint": encode_value(serde, rest),
            "values": ids,
            "messages": {},
        }

    id1, id2 = str(uuid6(clock_seq=-1)), str(uuid6(clock_seq=-1))
    count1 = node("resource", [], {"channel": "count", "version": 1, "json": 1}, "lg:ch:count")
    note1 = node("resource", [], {"channel": "note", "version": 1, "json": "hi"}, "lg:ch:note")
    ids1 = {"count": count1, "note": note1}
    cp1 = node(
        "verification",
        [count1, note1],
        checkpoint(id1, None, {"count": 1, "note": 1}, ids1),
        f"lg:cp:{id1}",
    )
    count2 = node(
        "resource", [count1], {"channel": "count", "version": 2, "json": 2}, "lg:ch:count"
    )
    ids2 = {"count": count2, "note": note1}
    cp2 = node(
        "verification",
        [count2, cp1],
        checkpoint(id2, id1, {"count": 2, "note": 1}, ids2),
        f"lg:cp:{id2}",
    )
    graph = graph_name(thread, "")
    store.append(graph, nodes, frontier=[cp2], retention_group=graph)

    saver = CwstoreSaver(store)
    tup = saver.get_tuple(_config(thread))
    assert tup is not None and tup.checkpoint["id"] == id2
    assert tup.checkpoint["channel_values"] == {"count": 2, "note": "hi"}
    assert tup.parent_config is not None and _id(tup.parent_config) == id1
    listed = [
        (t.checkpoint["id"], t.checkpoint["channel_values"]) for t in saver.list(_config(thread))
    ]
    assert listed == [(id2, {"count": 2, "note": "hi"}), (id1, {"count": 1, "note": "hi"})]

    # A put continues it: a small changed value goes inline, an unchanged one keeps
    # its node; then a value growing past the bound extends its key's chain.
    third = _put(
        saver, tup.config, {"count": 3, "note": "hi"}, {"count": 3, "note": 1}, {"count": 3}
    )
    payload = _cp_payload(db_dsn, thread, _id(third))
    assert payload["values"] == {"note": note1}
    assert payload["inline"] == {"count": {"version": 3, "json": 3}}
    fourth = _put(saver, third, {"count": 3, "note": BIG}, {"count": 3, "note": 2}, {"note": 2})
    (note2,) = [
        (i, p) for _, k, i, p, _ in _nodes(db_dsn, thread) if k == "lg:ch:note" and i != note1
    ]
    assert note2[1] == [note1]
    fresh = CwstoreSaver(store)
    got = [t.checkpoint["channel_values"] for t in fresh.list(_config(thread))]
    assert got == [
        {"count": 3, "note": BIG},
        {"count": 3, "note": "hi"},
        {"count": 2, "note": "hi"},
        {"count": 1, "note": "hi"},
    ]
    # Rewritten (keep_latest), it keeps the latest in the new form.
    fresh.prune([thread], strategy="keep_latest")
    kept = list(CwstoreSaver(store).list(_config(thread)))
    assert [t.checkpoint["id"] for t in kept] == [_id(fourth)]
    assert kept[0].checkpoint["channel_values"] == {"count": 3, "note": BIG}


def test_a_value_switches_between_inline_and_node(store: cwstore.Store, db_dsn: str) -> None:
    saver = CwstoreSaver(store)
    thread = f"switch-{uuid.uuid4().hex[:8]}"
    steps = ["a", BIG + "1", BIG + "2", "b", BIG + "3"]
    configs = []
    config = _config(thread)
    for n, value in enumerate(steps, start=1):
        config = _put(saver, config, {"v": value}, {"v": n}, {"v": n})
        configs.append(config)

    def v_nodes() -> dict[str, tuple[str, list[str], Any]]:
        return {
            i: (k, p, pl) for _, k, i, p, pl in _nodes(db_dsn, thread) if k.startswith("lg:ch:")
        }

    def node_of(config: Any) -> str | None:
        found = _cp_payload(db_dsn, thread, _id(config))["values"].get("v")
        return None if found is None else str(found)

    assert node_of(configs[0]) is None and node_of(configs[3]) is None
    n2, n3, n5 = node_of(configs[1]), node_of(configs[2]), node_of(configs[4])
    found = v_nodes()
    assert found[n2 or ""][:2] == ("lg:ch:v", [])  # a first value: the parent held "a" inline
    assert found[n3 or ""][:2] == ("lg:ch:v", [n2])
    # After "b" inline, a first value again: lg:ch:v has a head, so a chain of its own.
    assert found[n5 or ""][:2] == (f"lg:ch:v@{_id(configs[4])}", [])

    # Forks from old checkpoints (as update_state on them puts): from the node n2 (no
    # longer its key's head) to a larger value, a new chain from n2; from the inline
    # "a" to a larger value, a first value; from n3 to a small value, inline.
    fork1 = _put(saver, configs[1], {"v": BIG + "f1"}, {"v": 10}, {"v": 10})
    fork2 = _put(saver, configs[0], {"v": BIG + "f2"}, {"v": 11}, {"v": 11})
    fork3 = _put(saver, configs[2], {"v": "c"}, {"v": 12}, {"v": 12})
    found = v_nodes()
    assert found[node_of(fork1) or ""][:2] == (f"lg:ch:v@{_id(fork1)}", [n2])
    assert found[node_of(fork2) or ""][:2] == (f"lg:ch:v@{_id(fork2)}", [])
    assert node_of(fork3) is None
    assert _cp_payload(db_dsn, thread, _id(fork3))["inline"] == {"v": {"version": 12, "json": "c"}}

    fresh = CwstoreSaver(store)
    want = [*steps, BIG + "f1", BIG + "f2", "c"]
    for config, value in zip([*configs, fork1, fork2, fork3], want, strict=True):
        tup = fresh.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"] == {"v": value}


class _State(TypedDict):
    note: str
    count: int


def _step(state: _State) -> dict[str, Any]:
    n = state.get("count", 0) + 1
    return {"note": BIG if n % 2 == 0 else f"short {n}", "count": n}


def _app(saver: BaseCheckpointSaver[Any]) -> Any:
    g = StateGraph(_State)
    g.add_node("step", _step)
    g.add_edge(START, "step")
    return g.compile(checkpointer=saver)


def test_update_state_on_an_old_checkpoint_reads_as_in_postgres_saver(
    store: cwstore.Store, db_dsn: str
) -> None:
    """The same graph through both savers: each turn makes ``note`` small or large, then
    ``update_state`` on old checkpoints forks with a small and a large value and runs
    on; every checkpoint's values of both histories are compared."""
    thread = f"fork-{uuid.uuid4().hex[:8]}"
    with PostgresSaver.from_conn_string(db_dsn) as pg:
        pg.setup()
        histories = []
        for saver in (CwstoreSaver(store), pg):
            app = _app(saver)
            config: Any = {"configurable": {"thread_id": thread}}
            for _ in range(4):
                app.invoke({"note": "in"}, config)
            history = list(app.get_state_history(config))
            # The oldest states with a large and a small note, forked both ways.
            large = next(s for s in reversed(history) if s.values.get("note") == BIG)
            small = next(
                s for s in reversed(history) if str(s.values.get("note", "")).startswith("short")
            )
            forked = app.update_state(large.config, {"note": "tiny"})
            app.invoke(None, forked)
            forked = app.update_state(small.config, {"note": BIG + "!"})
            app.invoke(None, forked)
            histories.append(
                [
                    (s.values, s.next, s.metadata and s.metadata.get("step"))
                    for s in app.get_state_history(config)
                ]
            )
        cw_history, pg_history = histories
        assert cw_history == pg_history
    fresh = [
        s.values
        for s in _app(CwstoreSaver(store)).get_state_history(
            {"configurable": {"thread_id": thread}}
        )
    ]
    assert fresh == [v for v, _, _ in cw_history]


def test_an_inline_value_is_encrypted(store: cwstore.Store, db_dsn: str) -> None:
    serde = EncryptedSerializer(Cipher(b"k" * 32))
    saver = CwstoreSaver(store, serde=serde)
    thread = f"inline-enc-{uuid.uuid4().hex[:8]}"
    value = f"{SECRET} inline"
    config = _put(
        saver, _config(thread), {"note": value, "n": 7}, {"note": 1, "n": 1}, {"note": 1, "n": 1}
    )
    config = _put(saver, config, {"note": value, "n": 8}, {"note": 1, "n": 2}, {"n": 2})
    assert rows_holding(db_dsn, SECRET) == {}
    payload = _cp_payload(db_dsn, thread, _id(config))
    assert payload["values"] == {}
    assert set(payload["inline"]) == {"note", "n"}
    for members in payload["inline"].values():
        assert set(members) == {"version", "serde", "b64"}
    assert SECRET not in json.dumps(payload)
    again = CwstoreSaver(store, serde=EncryptedSerializer(Cipher(b"k" * 32)))
    tup = again.get_tuple(_config(thread))
    assert tup is not None and tup.checkpoint["channel_values"] == {"note": value, "n": 8}
