"""``cwstore view`` in a real headless chromium against a real PostgreSQL.

The page's state as of a point is compared with ``cwstore project --as-of`` (the CLI,
another process), its ancestors with ``cwstore.ancestors`` in SQL; a node appended by a
writer must appear without a reload; a reader role sees only its tenant's graphs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support import EXAMPLE_FILE
from support.documents import GraphBuilder
from support.view import view_server

import cwstore

SCREENSHOT = Path(__file__).parent.parent.parent / "docs" / "view.png"
ANSWER = "cw_6d0d15b277b2afce06bbec28"


@pytest.fixture(scope="module")
def graphs(db_dsn: str) -> str:
    """Graph ``turn`` (the runtime's example turn, 16 nodes) and ``long`` (700 nodes)."""
    with cwstore.connect_sync(db_dsn) as store:
        store.import_state("turn", EXAMPLE_FILE.read_text(encoding="utf-8"))
        b = GraphBuilder()
        b.append("system", "start")
        for i in range(699):
            if i % 50 == 0:
                b.append(
                    "semantic",
                    {"type": "memory", "key": "step", "content": i},
                    resource_key="semantic:memory:step",
                )
            else:
                b.append("inference", {"i": i})
        store.import_state("long", {"version": 1, "nodes": b.nodes, "frontier": b.frontier})
    return db_dsn


@pytest.fixture(scope="module")
def server(graphs: str) -> Iterator[str]:
    with view_server(graphs, "--window", "200") as url:
        yield url


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 850})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield pg
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


def project(dsn: str, graph: str, at: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cwstore",
            "project",
            "--graph",
            graph,
            "--as-of",
            str(at),
            "--json",
            "--dsn",
            dsn,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def shown_state(page: Any) -> dict[str, Any]:
    return {
        "frontier": page.eval_on_selector_all("#frontier li", "els => els.map(e => e.dataset.id)"),
        "resources": page.eval_on_selector_all(
            "#resources tr", "els => els.map(e => [e.dataset.key, e.dataset.id])"
        ),
        "memory": sorted(
            page.eval_on_selector_all(
                "#memory tr",
                "els => els.map(e => "
                "[e.dataset.type, e.dataset.key, JSON.parse(e.dataset.content)])",
            )
        ),
    }


def expected_state(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "frontier": [f["id"] for f in p["frontier"]],
        "resources": sorted([k, r["id"]] for k, r in p["resources"].items()),
        "memory": sorted(
            [t, k, c] for t, entries in p["semantic"].items() for k, c in entries.items()
        ),
    }


def wait_at(page: Any, at: int) -> None:
    page.wait_for_function(f"document.getElementById('state-at').textContent === '{at}'")


def test_graph_list_and_search(server: str, page: Any) -> None:
    page.goto(server)
    page.wait_for_selector("#graphs tbody tr")
    rows = page.eval_on_selector_all("#graphs tbody tr", "els => els.map(e => e.dataset.graph)")
    assert rows == ["long", "turn"]
    cells = page.eval_on_selector_all(
        "#graphs tbody tr[data-graph=turn] td", "els => els.map(e => e.textContent)"
    )
    assert cells[1] == "16" and cells[2] != "\u2013"
    page.fill("#search", "TUR")
    page.wait_for_function("document.querySelectorAll('#graphs tbody tr').length === 1")
    assert page.eval_on_selector("#graphs tbody tr", "e => e.dataset.graph") == "turn"
    page.click("#graphs tbody tr a")
    wait_at(page, 16)
    assert page.inner_text("#length") == "16"


def test_two_slider_points_match_cwstore_project(server: str, graphs: str, page: Any) -> None:
    page.goto(server + "#/g/turn")
    wait_at(page, 16)
    # the slider, as a user drags it
    page.eval_on_selector("#slider", "e => { e.value = '9'; e.dispatchEvent(new Event('input')); }")
    wait_at(page, 9)
    at9 = shown_state(page)
    assert at9 == expected_state(project(graphs, "turn", 9))
    assert at9["frontier"] == ["cw_82ed6227c9133903c8415857"]
    # the sequence box
    page.fill("#seq", "13")
    page.press("#seq", "Enter")
    wait_at(page, 13)
    at13 = shown_state(page)
    assert at13 == expected_state(project(graphs, "turn", 13))
    assert at13 != at9
    # nodes after the point are drawn faded, the frontier marked
    faded = page.evaluate("cwView.cy.nodes('.future').map(n => n.data('seq'))")
    assert sorted(faded) == [14, 15, 16]
    marked = page.evaluate("cwView.cy.nodes('.frontier').map(n => n.id())")
    assert sorted(marked) == sorted(at13["frontier"])
    heads = page.evaluate("cwView.cy.nodes('.head').map(n => n.id())")
    memory_heads = page.eval_on_selector_all("#memory tr", "els => els.map(e => e.dataset.id)")
    assert sorted(heads) == sorted([r[1] for r in at13["resources"]] + memory_heads)
    assert memory_heads
    # a time: the last node lived at or before it
    page.fill("#time", "2026-12-02T14:38:31.386Z")
    page.click("#time-go")
    wait_at(page, 7)
    assert shown_state(page) == expected_state(project(graphs, "turn", 7))


def test_node_panel_ancestors_and_screenshot(
    server: str, graphs: str, page: Any, tmp_path: Path
) -> None:
    page.goto(server + "#/g/turn?at=16")
    wait_at(page, 16)
    page.click(f"#frontier li[data-id={ANSWER}]")
    page.wait_for_function(f"document.getElementById('node-id').textContent === '{ANSWER}'")
    page.wait_for_selector("#ancestors li[data-id]")
    shown = page.eval_on_selector_all(
        "#ancestors li[data-id]", "els => els.map(e => [e.dataset.id, +e.dataset.depth])"
    )
    with psycopg.connect(graphs) as conn:
        expected = conn.execute(
            "SELECT id, depth FROM cwstore.ancestors('turn', %s) ORDER BY depth, seq", (ANSWER,)
        ).fetchall()
        payload = conn.execute(
            "SELECT payload_text FROM cwstore.nodes WHERE id = %s", (ANSWER,)
        ).fetchone()
    assert payload is not None
    assert [tuple(x) for x in shown] == [tuple(x) for x in expected]
    assert page.inner_text("#payload") == payload[0]
    assert "cwstore.ancestors(:'graph', :'node')" in page.inner_text("#node-sql")
    # a resource node: its key's history
    page.click("#resources tr[data-key='src/config.js']")
    page.wait_for_selector("#history tr")
    versions = page.eval_on_selector_all("#history tr", "els => els.map(e => e.dataset.id)")
    assert len(versions) == 2
    shot = tmp_path / "view.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if os.environ.get("CWSTORE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, SCREENSHOT)


def test_large_graph_is_drawn_in_a_window(server: str, graphs: str, page: Any) -> None:
    page.goto(server + "#/g/long")
    wait_at(page, 700)
    drawn = page.evaluate("cwView.cy.nodes().filter(n => n.data('seq') !== undefined).length")
    assert drawn == 200
    assert page.evaluate("cwView.cy.getElementById('__before').length") == 1
    page.fill("#seq", "120")
    page.press("#seq", "Enter")
    wait_at(page, 120)
    seqs = page.evaluate("cwView.cy.nodes().map(n => n.data('seq')).filter(s => s)")
    assert min(seqs) <= 120 <= max(seqs) and len(seqs) == 200
    assert page.evaluate("cwView.cy.getElementById('__after').length") == 1
    assert shown_state(page) == expected_state(project(graphs, "long", 120))


def test_live_append_appears_without_reload(server: str, graphs: str, page: Any) -> None:
    page.goto(server + "#/g/turn")
    wait_at(page, 16)
    page.wait_for_function("document.getElementById('live-status').textContent === 'live'")
    page.evaluate("window.notReloaded = true")
    with cwstore.connect_sync(graphs) as store:
        frontier = store.frontier("turn")
        [node] = store.append("turn", [{"kind": "goal", "parents": frontier, "payload": "next"}])
    page.wait_for_function("document.getElementById('length').textContent === '17'")
    assert page.evaluate(f"cwView.cy.getElementById('{node.id}').length") == 1
    wait_at(page, 17)
    assert shown_state(page)["frontier"] == [node.id]
    assert page.evaluate("window.notReloaded") is True


def test_errors_are_json(server: str, page: Any) -> None:
    for path, status in (
        ("api/state?graph=nope", 404),
        ("api/state?graph=turn&at=x", 400),
        ("api/node?graph=turn&id=cw_000000000000000000000000", 404),
        ("api/window?graph=turn&size=1", 400),
        ("api/nothing", 404),
    ):
        r = page.request.get(server + path)
        assert r.status == status, path
        assert set(r.json()["error"]) == {"type", "message"}
    page.goto(server + "#/g/nope")
    page.wait_for_selector("#error:not([hidden])")
    assert "nope" in page.inner_text("#error")


def test_reader_role_sees_only_its_tenant(graphs: str, login_role: Any, page: Any) -> None:
    reader = login_role("cwstore_reader", "acme")
    with cwstore.connect_sync(graphs, tenant="acme") as store:
        store.import_state("acme-turn", EXAMPLE_FILE.read_text(encoding="utf-8"))
    with view_server(reader) as url:
        page.goto(url)
        page.wait_for_selector("#graphs tbody tr")
        rows = page.eval_on_selector_all("#graphs tbody tr", "els => els.map(e => e.dataset.graph)")
        assert rows == ["acme-turn"]
        assert page.is_visible("#graphs th.tenant-col")
        page.click("#graphs tbody tr a")
        wait_at(page, 16)
        assert shown_state(page) == expected_state(project(graphs, "acme-turn", 16))
        r = page.request.get(url + "api/window?graph=turn")
        assert r.status == 404


def test_cli_refusals(graphs: str) -> None:
    for args, code, text in (
        (["--graph", "nope"], 1, "nope"),
        (["--port", "70000"], 2, "--port"),
        (["--window", "5"], 2, "--window"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "cwstore", "view", "--dsn", graphs, "--no-browser", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == code, (args, out.stderr)
        assert text in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")
def test_the_sql_to_copy_runs_in_psql(graphs: str, server: str, page: Any) -> None:
    name = "it's a \\ graph"
    with cwstore.connect_sync(graphs) as store:
        store.import_state(name, EXAMPLE_FILE.read_text(encoding="utf-8"))
    node = page.request.get(server + "api/node", params={"graph": name, "id": ANSWER}).json()
    state = page.request.get(server + "api/state", params={"graph": name, "at": "9"}).json()
    for script, expected in (
        (node["sql"], ANSWER),
        (state["sql"], "cw_82ed6227c9133903c8415857"),
    ):
        out = subprocess.run(
            ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", graphs],
            input=script,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert expected in out.stdout
