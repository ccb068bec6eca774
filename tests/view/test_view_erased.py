"""``cwstore view`` of a graph that gets erased while it is open.

The live stream ends with an ``erased`` event (the page then says "this graph was
erased" instead of an error), and the API's 404 for an erased graph has a type of its
own (``graph_erased``). The stream and the API are read over HTTP; the page itself in
the headless chromium of ``conftest.py`` (skipped without one, outside CI).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.view import sse_events, view_server

import cwstore
from cwstore.view.app import _problem_of


def _graph(dsn: str, nodes: int = 3) -> str:
    name = f"v-{uuid.uuid4().hex[:10]}"
    with cwstore.connect_sync(dsn) as store:
        for i in range(nodes):
            store.append(name, [{"kind": "goal", "parents": [], "payload": i}])
    return name


@pytest.fixture(scope="module")
def server(db_dsn: str) -> Iterator[str]:
    with view_server(db_dsn) as url:
        yield url


def test_live_stream_ends_with_an_erased_event(db_dsn: str, server: str) -> None:
    g = _graph(db_dsn)
    url = server + "api/live?" + urllib.parse.urlencode({"graph": g, "after": 0})
    got: list[tuple[str, dict[str, Any]]] = []
    for event, data in sse_events(url):
        got.append((event, data))
        if len(got) == 3:
            with cwstore.connect_sync(db_dsn) as store:
                assert store.erase(g) == 3
    assert [e for e, _ in got] == ["node", "node", "node", "erased"]
    assert got[-1][1]["type"] == "graph_erased" and got[-1][1]["graph"] == g

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server + "api/state?" + urllib.parse.urlencode({"graph": g}))
    assert caught.value.code == 404
    assert json.loads(caught.value.read())["error"]["type"] == "unknown_graph"


def test_graph_erased_is_a_404_of_its_own_type() -> None:
    erased = _problem_of(cwstore.GraphErasedError(graph="g"))
    unknown = _problem_of(cwstore.UnknownGraphError(graph="g"))
    assert (erased.status, erased.kind) == (404, "graph_erased")
    assert (unknown.status, unknown.kind) == (404, "unknown_graph")


def test_the_page_says_the_graph_was_erased(db_dsn: str, server: str, browser: Any) -> None:
    g = _graph(db_dsn)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(server + "#/g/" + urllib.parse.quote(g))
        page.wait_for_function("document.getElementById('live-status').textContent === 'live'")
        with cwstore.connect_sync(db_dsn) as store:
            store.erase(g)
        page.wait_for_selector("#erased:not([hidden])")
        assert "this graph was erased" in page.inner_text("#erased")
        assert page.is_hidden("#error"), page.inner_text("#error")
        # Moving the slider now reads a graph that is gone: still the same message.
        page.evaluate("document.getElementById('seq').value = '1'")
        page.dispatch_event("#seq", "change")
        page.wait_for_timeout(500)
        assert page.is_hidden("#error")
        assert page.is_visible("#erased")
        assert page.inner_text("#live-status") == "erased"
    finally:
        context.close()
    assert errors == []
