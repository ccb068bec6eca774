"""``cwstore view --pooler transaction`` through a transaction-mode pooler (PgBouncer):
the page's reads, and a live stream that polls and sees nodes appended meanwhile.

Needs ``CWSTORE_TEST_POOLER_DSN`` (see test_pooler.py); skipped without one.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.view import view_server

import cwstore

pytest.importorskip("starlette")


@pytest.fixture(scope="module")
def pooled_dsn(db_dsn: str) -> str:
    pooler = os.environ.get("CWSTORE_TEST_POOLER_DSN")
    if not pooler:
        pytest.skip("CWSTORE_TEST_POOLER_DSN is not set: no transaction-mode pooler")
    return make_conninfo(pooler, dbname=str(conninfo_to_dict(db_dsn)["dbname"]))


def _events(url: str) -> Iterator[tuple[str, dict[str, Any]]]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        event, data = "message", ""
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line == "" and data:
                yield event, json.loads(data)
                event, data = "message", ""


def test_the_view_reads_and_follows_through_the_pooler(pooled_dsn: str) -> None:
    graph = "view-pooled-" + uuid.uuid4().hex[:8]
    with cwstore.connect_sync(pooled_dsn, pooler="transaction") as store:
        store.append(graph, [{"kind": "goal", "parents": [], "payload": "first"}])
        with view_server(pooled_dsn, "--pooler", "transaction") as server:
            with urllib.request.urlopen(server + "api/graphs", timeout=60) as resp:
                names = [g["name"] for g in json.load(resp)["graphs"]]
            assert graph in names
            query = urllib.parse.urlencode({"graph": graph})
            with urllib.request.urlopen(server + "api/state?" + query, timeout=60) as resp:
                assert json.load(resp)["length"] == 1
            live = server + "api/live?" + urllib.parse.urlencode({"graph": graph, "after": 0})
            seen = []
            for event, data in _events(live):
                assert event == "node"
                seen.append(data["seq"])
                if len(seen) == 1:
                    store.append(
                        graph, [{"kind": "goal", "parents": store.frontier(graph), "payload": 2}]
                    )
                if len(seen) == 2:
                    break
    assert seen == [1, 2]
