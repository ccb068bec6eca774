"""The thread as of a time by LangGraph's clock (docs/langgraph.md, "The thread as of a
time"): the query of the docs, read from the docs, finds the newest root checkpoint whose
``ts`` is at or before T, compared as instants whatever the offsets, and ``get_tuple``
reads it. The checkpoints' ``ts`` are chosen out of step with when they are stored (years
before, and not in storage order), so an answer by storage time, by storage order or by
``ts`` as text would differ. ``seq_at_time`` goes by the nodes' ``createdAt`` instead."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import cwstore
from cwstore.langgraph import CwstoreSaver
from cwstore.langgraph._mapping import graph_name

DOCS = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"
GRAPH = "'langgraph:my-thread'"
TIME = "'2026-01-01T10:00:00Z'"
THREAD = "as-of:1%"

# Stored in this order (checkpoint ids grow in it); ts out of step with it.
STORED = [
    ("a", "2020-03-01T10:00:00+00:00"),
    ("c", "2020-03-01T11:00:00.000001+00:00"),
    ("b", "2020-03-01T12:30:00+02:00"),  # 10:30Z
    ("d", "2020-03-01T09:00:00-05:00"),  # 14:00Z
    ("e", "2020-03-01T14:00:00+00:00"),  # the same instant as d, a later id
]
SUBGRAPH_TS = "2020-03-01T10:45:00+00:00"


def docs_query() -> str:
    """The first ```sql block after the heading "The thread as of a time", its graph and
    time made parameters."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("### The thread as of a time")
    block = text.index("```sql", start) + len("```sql")
    query = text[block : text.index("```", block)].strip().rstrip(";")
    assert query.count(GRAPH) == 1 and query.count(TIME) == 1
    return query.replace(GRAPH, "%(graph)s").replace(TIME, "%(t)s")


def _put(saver: CwstoreSaver, config: Any, name: str, ts: str, n: int) -> Any:
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=n)),
        "ts": ts,
        "channel_values": {
            "messages": [HumanMessage(content=f"m{i}", id=f"m{i}") for i in range(n + 1)],
            "name": name,
        },
        "channel_versions": {"messages": n + 1, "name": n + 1},
    }
    new: dict[str, str | int | float] = {"messages": n + 1, "name": n + 1}
    return saver.put(config, checkpoint, {"source": "loop", "step": n}, new)


@pytest.fixture(scope="module")
def thread(db_dsn: str) -> Iterator[tuple[CwstoreSaver, dict[str, str]]]:
    """The thread's root checkpoints as stored (name -> checkpoint id), and one
    checkpoint of a subgraph's namespace whose ts falls among them."""
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store)
        config: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        ids = {}
        for n, (name, ts) in enumerate(STORED):
            config = _put(saver, config, name, ts, n)
            ids[name] = config["configurable"]["checkpoint_id"]
        assert list(ids.values()) == sorted(ids.values())
        sub: Any = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "child:1"}}
        _put(saver, sub, "sub", SUBGRAPH_TS, len(STORED))
        yield saver, ids


@pytest.mark.parametrize(
    ("t", "want"),
    [
        ("2020-03-01T09:59:59.999999Z", None),  # before the first
        ("2020-03-01T10:00:00Z", "a"),  # at a's ts
        ("2020-03-01T12:29:59.999999+02:00", "a"),
        ("2020-03-01T10:30:00Z", "b"),  # at b's ts, written with another offset
        ("2020-03-01T10:50:00Z", "b"),  # the subgraph's checkpoint is not the root's
        ("2020-03-01T11:00:00Z", "b"),  # c is a microsecond later
        ("2020-03-01T11:00:00.000001Z", "c"),
        ("2020-03-01T08:59:59-05:00", "c"),
        ("2020-03-01T14:00:00Z", "e"),  # d and e at once: the later id
        ("2030-01-01T00:00:00Z", "e"),  # after the last
    ],
)
def test_docs_query_finds_the_checkpoint_by_its_ts(
    db_dsn: str, thread: tuple[CwstoreSaver, dict[str, str]], t: str, want: str | None
) -> None:
    saver, ids = thread
    at = datetime.fromisoformat(t)
    with psycopg.connect(db_dsn) as conn:
        found = conn.execute(docs_query(), {"graph": graph_name(THREAD, ""), "t": at}).fetchall()
        # Two statements: on Citus a function that reads the graphs table cannot run
        # inside a query over it.
        stored = conn.execute(
            "SELECT cwstore.seq_at_time(%s, %s)", (graph_name(THREAD, ""), at)
        ).fetchone()
        lengths = conn.execute(
            "SELECT length FROM cwstore.graphs WHERE name = %s", (graph_name(THREAD, ""),)
        ).fetchone()
    # By the nodes' createdAt (the saver's clock at each put, years after every ts before
    # 2030) the thread did not exist yet.
    assert stored is not None and lengths is not None
    stored_by_then, length = stored[0], lengths[0]
    assert stored_by_then == (0 if at < datetime.now(UTC) else length)
    if want is None:
        assert found == []
        return
    ((checkpoint_id, ts),) = found
    assert checkpoint_id == ids[want]
    config: Any = {
        "configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }
    got = saver.get_tuple(config)
    assert got is not None
    assert got.checkpoint["ts"] == ts == dict(STORED)[want]
    assert got.checkpoint["channel_values"]["name"] == want


def test_seq_at_time_goes_by_created_at_in_milliseconds(
    db_dsn: str, thread: tuple[CwstoreSaver, dict[str, str]]
) -> None:
    """What docs/langgraph.md says of seq_at_time: each node's createdAt is the saver's
    clock in UTC milliseconds, and the prefix it gives ends at the last node by it."""
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT seq, created_at_text, created_at FROM cwstore.node_view"
            " WHERE graph = %s ORDER BY seq",
            (graph_name(THREAD, ""),),
        ).fetchall()
        assert rows and all(re.fullmatch(r".{19}\.\d{3}Z", r[1]) for r in rows)
        for _seq, _text, created in rows:
            (got,) = conn.execute(
                "SELECT cwstore.seq_at_time(%s, %s)", (graph_name(THREAD, ""), created)
            ).fetchone() or (None,)
            assert got == max(s for s, _, c in rows if c <= created)
