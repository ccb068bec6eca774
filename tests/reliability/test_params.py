"""Every value is a bound parameter: graph names that look like SQL, quoting or escapes
are just names.

For each name and each client: import, append, export, replay, project, history,
frontier, length, graphs, save, and the errors that carry the name back (the graph
exists, a stale length, an unknown graph) all work with the name exactly as given, and
afterwards every cwstore table is still there. Names PostgreSQL text cannot hold (U+0000,
lone surrogates) and the empty name are refused with a cwstore error and leave nothing.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import asyncpg
import pytest
from support import GRAPH_TABLES
from support.documents import EXAMPLE_FRONTIER, example_turn
from support.nodes import T0
from support.reliability import CLIENTS, Client, assert_graph

import cwstore
from cwstore import _jsontext, compute_id

_rng = random.Random(20261202)

NAMES: dict[str, str] = {
    "single quote": "it's",
    "double quotes": 'say "hi"',
    "semicolon": "a;b",
    "injection": "'); DROP TABLE cwstore.nodes; --",
    "injection, double-quoted": '"; DROP SCHEMA cwstore CASCADE; --',
    "backslashes": "back\\slash\\\\ \\x00 \\u0000 \\'",
    "placeholders": "$1 %s %(name)s ? :name {}",
    "comment and dollar quotes": "/* c */ $$x$$ $tag$ -- end",
    "like wildcards": "100% _match_",
    "whitespace": " \t spaced\nnew line\r ",
    "keywords": "NULL",
    "looks like a table": "cwstore.nodes",
    "unicode": "日本語 🚀 é e\u0301 \u05d0\u05d1 \u202eRTL\u202c \u2028",
    "1,000 ASCII characters": "".join(chr(_rng.randint(32, 126)) for _ in range(1000)),
    "600 CJK characters": "".join(chr(_rng.randint(0x4E00, 0x9FFF)) for _ in range(600)),
    "1,000 mixed characters": "".join(
        _rng.choice(["a", "'", '"', ";", "\\", "é", "日", "🚀", "-", " "]) for _ in range(1000)
    ),
}


def _goal(parents: list[str], text: str) -> dict[str, Any]:
    ps = sorted(parents)
    payload = {"text": text}
    return {
        "id": compute_id("goal", ps, payload),
        "kind": "goal",
        "parents": ps,
        "payload": payload,
        "createdAt": T0,
    }


async def _tables_intact(aconn: asyncpg.Connection) -> None:
    for table in GRAPH_TABLES:
        assert await aconn.fetchval("SELECT to_regclass($1)", f"cwstore.{table}"), table
    assert await aconn.fetchval("SELECT count(*) FROM cwstore.schema_migrations") > 0


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("label", list(NAMES))
async def test_names_are_just_names(
    db_dsn: str, aconn: asyncpg.Connection, label: str, client: str
) -> None:
    name = NAMES[label] + f" {client}"  # one graph per client, same module database
    doc = example_turn()
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        with pytest.raises(cwstore.UnknownGraphError) as unknown:
            await store.call("length", name)
        assert unknown.value.graph == name

        assert await store.call("import_state", name, doc) == len(doc["nodes"])
        assert (
            await aconn.fetchval("SELECT count(*) FROM cwstore.graphs WHERE name = $1", name) == 1
        )
        with pytest.raises(cwstore.GraphExistsError) as exists:
            await store.call("import_state", name, doc)
        assert exists.value.graph == name

        goal = _goal(list(EXAMPLE_FRONTIER), f"next task for {name}")
        out = await store.call("append", name, [goal], expected_length=len(doc["nodes"]))
        assert [(n.id, n.sequence) for n in out] == [(goal["id"], 17)]
        with pytest.raises(cwstore.LengthConflictError) as stale:
            await store.call("append", name, [_goal([goal["id"]], "late")], expected_length=16)
        assert stale.value.graph == name and stale.value.actual_length == 17

        expected: dict[str, Any] = {
            "version": 1,
            "nodes": [*doc["nodes"], {**goal, "sequence": 17}],
            "frontier": [goal["id"]],
        }
        assert await store.call("export_json", name) == _jsontext.dumps(expected)
        assert await store.call("export_json", name, 16) == _jsontext.dumps(doc)
        assert (await store.call("replay", name)).to_obj() == expected
        assert await store.call("length", name) == 17
        assert await store.call("frontier", name) == [goal["id"]]

        projection = await store.call("project", name)
        assert projection.graph == name and projection.length == 17
        assert projection.latest_goal is not None and projection.latest_goal.id == goal["id"]
        assert projection.resources["src/config.js"].version == 2
        history = await store.call("history", name, "src/config.js")
        assert [v.version for v in history] == [1, 2]

        listed = {g.name: g for g in await store.call("graphs")}
        assert listed[name].length == 17

        # save: the runtime hands back the whole state, one node longer.
        more = _goal([goal["id"]], "saved")
        state = {
            "version": 1,
            "nodes": [*expected["nodes"], {**more, "sequence": 18}],
            "frontier": [more["id"]],
        }
        written = await store.call("save", name, state)
        assert [n.id for n in written] == [more["id"]]
        assert await store.call("export_json", name) == _jsontext.dumps(state)

        if client == "async":
            seen = []

            async def follow() -> None:
                async for n in store.store.tail(name, after=16):
                    seen.append(n.sequence)
                    if len(seen) == 2:
                        return

            await asyncio.wait_for(follow(), 30)
            assert seen == [17, 18]

        stored_name = await aconn.fetchval("SELECT name FROM cwstore.graphs WHERE name = $1", name)
        assert stored_name == name
        await _tables_intact(aconn)
    finally:
        await store.close()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "name", ["nul\u0000byte", "\u0000", "lone \ud800 surrogate", "", "x\udfff"]
)
async def test_names_text_cannot_hold_are_refused(
    db_dsn: str, aconn: asyncpg.Connection, client: str, name: str
) -> None:
    store = await Client.open(client, db_dsn, min_size=1, max_size=1)
    try:
        doc = example_turn()
        for call, args in [
            ("import_state", (doc,)),
            ("append", ([_goal([], f"x {uuid.uuid4()}")],)),
        ]:
            with pytest.raises(cwstore.Error) as refused:
                await store.call(call, name, *args)
            assert isinstance(refused.value, cwstore.InputError | cwstore.ValidationError), (
                call,
                refused.value,
            )
        assert await aconn.fetchval("SELECT count(*) FROM cwstore.graphs WHERE name = ''") == 0
        await _tables_intact(aconn)
    finally:
        await store.close()


async def test_a_refused_name_leaves_no_graph(db_dsn: str, aconn: asyncpg.Connection) -> None:
    """A node batch refused for its content leaves no graph row behind for its name."""
    store = await Client.open("async", db_dsn, min_size=1, max_size=1)
    try:
        name = "'); DROP TABLE cwstore.graphs; -- refused"
        bad = {**_goal([], "x"), "kind": "not-a-kind"}
        with pytest.raises(cwstore.ValidationError):
            await store.call("append", name, [bad])
        await assert_graph(aconn, name, [])
        assert (
            await aconn.fetchval("SELECT count(*) FROM cwstore.graphs WHERE name = $1", name) == 0
        )
    finally:
        await store.close()
