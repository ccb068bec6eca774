"""``cwstore view --pooler transaction`` through a transaction-mode pooler (PgBouncer):
the page's reads, and a live stream that polls and sees nodes appended meanwhile.

Needs ``CWSTORE_TEST_POOLER_DSN`` (conftest.py); skipped without one.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid

import pytest
from support.view import sse_events, view_server

import cwstore

pytest.importorskip("starlette")


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
            for event, data in sse_events(live):
                assert event == "node"
                seen.append(data["seq"])
                if len(seen) == 1:
                    store.append(
                        graph, [{"kind": "goal", "parents": store.frontier(graph), "payload": 2}]
                    )
                if len(seen) == 2:
                    break
    assert seen == [1, 2]
