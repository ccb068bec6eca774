"""One limit, every door: the graph-name and payload limits the clients and the validator
check are the ones the SQL functions enforce, and input past them is refused alike."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from cwstore import _jsontext
from cwstore._arg_checks import (
    MAX_GRAPH_NAME_BYTES,
    MAX_REASON_BYTES,
    check_graph_name,
    check_reason,
)
from cwstore.document import MAX_PAYLOAD_BYTES, Vocabulary, check_nodes
from cwstore.errors import InputError
from cwstore.identity import compute_id


def test_the_clients_and_the_sql_share_the_graph_name_limit(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT cwstore.max_graph_name_bytes()").fetchone()
    assert row == (MAX_GRAPH_NAME_BYTES,)
    check_graph_name("é" * (MAX_GRAPH_NAME_BYTES // 2))
    with pytest.raises(InputError):
        check_graph_name("é" * (MAX_GRAPH_NAME_BYTES // 2) + "x")


@pytest.mark.parametrize(
    "call",
    [
        "SELECT cwstore.ensure_graph_v1(%s)",
        "SELECT cwstore.begin_import_v1(%s)",
        "SELECT count(*) FROM cwstore.append_v1(%s, '[]'::json)",
    ],
)
def test_every_sql_door_refuses_a_name_past_the_limit(db_dsn: str, call: str) -> None:
    name = "n" * (MAX_GRAPH_NAME_BYTES + 1)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(call, (name,))
        n = conn.execute(
            "SELECT count(*) FROM cwstore.graphs WHERE length(name) > %s",
            (MAX_GRAPH_NAME_BYTES,),
        ).fetchone()
    assert err.value.sqlstate == "CW400"
    assert err.value.diag.message_primary is not None
    assert len(err.value.diag.message_primary) < 300  # the name is not quoted whole
    assert n == (0,)


def test_messages_quote_a_long_name_cut(db_dsn: str) -> None:
    name = "m" * 100_000
    with psycopg.connect(db_dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT * FROM cwstore.frontier_at(%s)", (name,))
    diag: Any = err.value.diag
    assert err.value.sqlstate == "CW404"
    assert len(diag.message_primary) < 300


def test_the_validator_and_the_sql_share_the_payload_limit(db_dsn: str) -> None:
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT cwstore.max_payload_bytes()").fetchone()
    assert row == (MAX_PAYLOAD_BYTES,)


def _node(payload: Any) -> dict[str, Any]:
    node: dict[str, Any] = {
        "kind": "goal",
        "parents": [],
        "payload": payload,
        "createdAt": "2025-01-01T00:00:00.000Z",
    }
    node["id"] = compute_id("goal", [], payload)
    return node


@pytest.mark.parametrize("over", [0, 1])
def test_a_payload_past_the_limit_is_refused_alike(db_dsn: str, over: int) -> None:
    """Exactly at the limit passes both the validator and append_v1; a byte more is
    too_large in both, at the same path, and nothing is written."""
    payload = {"s": "é" * ((MAX_PAYLOAD_BYTES - len('{"s":""}')) // 2) + "x" * over}
    node = _node(payload)
    text = _jsontext.dumps(payload)
    assert len(text.encode("utf-8")) == MAX_PAYLOAD_BYTES + over
    found = check_nodes([{**node, "sequence": 1}], vocabulary=Vocabulary.dynamic())
    graph = f"payload-{over}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        try:
            conn.execute(
                "SELECT count(*) FROM cwstore.append_v1(%s, %s::json)",
                (graph, _jsontext.dumps([node])),
            )
            refused = None
        except psycopg.Error as exc:
            refused = exc
        stored = conn.execute(
            "SELECT count(*) FROM cwstore.nodes n JOIN cwstore.graphs g USING (graph_id)"
            " WHERE g.name = %s",
            (graph,),
        ).fetchone()
    if over:
        assert [(v.code, v.path) for v in found] == [("too_large", "$.nodes[0].payload")]
        assert refused is not None and refused.sqlstate == "CW400"
        assert json.loads(refused.diag.message_detail or "{}")["code"] == "too_large"
        assert json.loads(refused.diag.message_detail or "{}")["path"] == "$[0].payload"
        assert stored == (0,)
    else:
        assert found == []
        assert refused is None
        assert stored == (1,)


@pytest.mark.parametrize(
    ("text", "unique"),
    [
        ("[" + ",".join(['{"a":1,"b":"x"}'] * 20000) + "]", True),
        ("[" + ",".join(['{"a":1,"b":"x"}'] * 20000) + ',{"q":1,"q":2}]', False),
        ('{"k":[' + ",".join(['{"a":1}'] * 20000) + '],"z":1,"k":2}', False),
        ('{"o":{"i":[' + ",".join(['{"a":1}'] * 20000) + ',{"d":{"r":1,"r":2}}]}}', False),
        ("[" + ",".join(['{"a\\u0000":1,"a":2}'] * 5000) + "]", True),
        ('{"a":"' + "y" * 100000 + '","b":{"c":"' + "z" * 70000 + '","c":1}}', False),
    ],
    ids=["clean", "small-element", "top-level", "deep-in-big", "nul-names", "big-strings"],
)
def test_large_payloads_are_checked_for_repeated_names_in_slices(
    db_dsn: str, text: str, unique: bool
) -> None:
    """Over 64 kB the repeated-name check takes the text apart (no whole jsonb): it
    finds a repeat at any depth and in any slice, and passes a clean text."""
    assert len(text) > 65536
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT cwstore._payload_problem(%s)", (text,)).fetchone()
    assert row is not None
    assert (row[0] is None) == unique, row


_SMALL_TEXTS = [
    ('{"a":1,"b":[2,3]}', None),
    ('{"a":1,"a":2}', "shape"),
    ('[{},[],{"a":[]},{"a":{}}]', None),
    ('[{"a":[],"a":{}}]', "shape"),
    ('{"x":[{}],"y":[[]],"z":[{"q":[]}]}', None),
    ('{"x":[{}],"y":[[]],"x":[{"q":[]}]}', "shape"),
    ('{"a":{"b":1},"c":{"b":2}}', None),
    ('{"a":{"b":1,"c":{"b":2,"b":3}}}', "shape"),
    ('{"t":true,"f":false,"n":null,"i":12}', None),
    ('{"t":true,"f":false,"x":1.50}', "shape"),
    ('{"t":true,"x":1e400}', "unrepresentable"),
    ('{"t":true,"x":12345678901234567}', "unrepresentable"),
    ('{"t":true,"x":1.5,"y":1e+21,"z":-0.5}', None),
    ('{"y":1e21}', "shape"),
    ('{"f":false,"x":-0}', "shape"),
    ('[true,false,"e",1E2]', "shape"),
    ("[" * 10000 + "]" * 10000, None),
    ("[" * 10001 + "]" * 10001, "unrepresentable"),
    ('{"a":' + "[" * 9998 + '{"é[{":"ü{["}' + "]" * 9998 + "}", None),
    ("[" + ",".join(["{}"] * 1200) + ',{"a":[],"b":{}}]', None),
    ("[" + ",".join(["{}"] * 1200) + ',{"a":[],"a":{}}]', "shape"),
    ('{"é":{"ü":1,"é":[{"ü":2,"ü":3}]}}', "shape"),
]


@pytest.mark.parametrize(("text", "code"), _SMALL_TEXTS)
def test_small_payloads_get_the_verdict_of_the_rules(
    db_dsn: str, text: str, code: str | None
) -> None:
    """Repeated names (counted as values, empty containers included) and numbers (read
    where one may need it, true and false aside) in texts under 64 kB: the SQL check
    refuses what the runtime's JSON.parse and JSON.stringify would not keep, with the
    code import gives it."""
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT cwstore._payload_problem(%s)", (text,)).fetchone()
    assert row is not None
    assert (row[0] or "|").split("|")[0] == (code or "")


def test_an_erasure_reason_has_one_limit_at_every_door(db_dsn: str) -> None:
    """The clients and the audit table refuse a reason past 1,000 bytes alike; the
    refused erasure erases nothing."""
    check_reason("r" * MAX_REASON_BYTES)
    with pytest.raises(InputError):
        check_reason("r" * (MAX_REASON_BYTES + 1))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT cwstore.ensure_graph_v1('reason-limit')")
        with pytest.raises(psycopg.Error) as err:
            conn.execute(
                "SELECT cwstore.erase_graph_v1('reason-limit', %s)", ("r" * (MAX_REASON_BYTES + 1),)
            )
        left = conn.execute(
            "SELECT count(*) FROM cwstore.graphs WHERE name = 'reason-limit'"
        ).fetchone()
    assert err.value.sqlstate == "23514"
    assert err.value.diag.constraint_name == "erasures_reason_check"
    assert left == (1,)
