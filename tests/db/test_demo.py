"""``cwstore demo``: worker processes share one graph; what they leave is a valid graph.

Runs the real command (spawned worker processes, real chain races) on a small scale and
checks the graph it wrote the way an importer would: gapless sequences, every id
recomputed, every rule of SPEC section 6 (``cwstore.validate`` over ``replay``).
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest

import cwstore
from cwstore import cli, compute_id, connect_sync, validate


@pytest.fixture(scope="module")
def demo_run(db_dsn: str) -> tuple[int, str, str]:
    """Run the demo once for the module: (exit code, stdout+stderr, graph name).

    Output is captured by redirection, not capsys, which is function-scoped.
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = cli.main(["demo", "--workers", "3", "--steps", "4", "--dsn", db_dsn])
    out = buf.getvalue()
    with connect_sync(db_dsn, migrate_schema=False) as store:
        names = [g.name for g in store.graphs() if g.name.startswith("demo-")]
    assert len(names) == 1, (names, out)
    return code, out, names[0]


def test_demo_exits_zero_and_explains_itself(demo_run: tuple[int, str, str]) -> None:
    code, out, graph = demo_run
    assert code == 0, out
    assert "SELECT" in out and "cwstore.ancestors(" in out
    assert "psql " in out
    assert "conflicts retried" in out
    assert re.search(r"\d+ chain conflicts retried", out), out
    assert f"cwstore project --graph {graph}" in out
    assert out.rstrip().splitlines()[-1].startswith(f"cwstore view --graph {graph}"), out
    assert "Traceback" not in out


def test_demo_graph_is_gapless_and_content_addressed(
    demo_run: tuple[int, str, str], db_dsn: str
) -> None:
    _, _, graph = demo_run
    with connect_sync(db_dsn, migrate_schema=False) as store:
        state = store.replay(graph)
        n = store.length(graph)
    # 1 system node + 3 workers x 4 steps x 9 nodes a step.
    assert n == 1 + 3 * 4 * 9
    assert [node.sequence for node in state.nodes] == list(range(1, n + 1))
    for node in state.nodes:
        assert compute_id(node.kind, list(node.parents), node.payload, node.resource_key) == (
            node.id
        )
    assert validate(state.to_obj()) == []


def test_demo_shared_keys_chain_through_every_worker(
    demo_run: tuple[int, str, str], db_dsn: str
) -> None:
    _, _, graph = demo_run
    with connect_sync(db_dsn, migrate_schema=False) as store:
        app = store.history(graph, "src/app.py")
        team = store.history(graph, "semantic:memory:team.convention")
        proj = store.project(graph)
    # One version per worker step, each on top of the previous: no write was lost.
    assert [v.version for v in app] == list(range(1, 13))
    assert {v.payload["worker"] for v in app} == {1, 2, 3}
    assert len(team) == 12
    assert proj.resources["src/app.py"].version == 12
    assert set(proj.semantic["memory"]) == {
        "team.convention",
        "worker-1.progress",
        "worker-2.progress",
        "worker-3.progress",
    }
    assert proj.counts["answer"] == 12


def test_demo_refuses_a_graph_that_holds_nodes(
    demo_run: tuple[int, str, str], db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, graph = demo_run
    code = cli.main(["demo", "--workers", "1", "--steps", "1", "--graph", graph, "--dsn", db_dsn])
    err = capsys.readouterr().err
    assert code == 2
    assert "already holds" in err and "Traceback" not in err


def test_demo_rejects_bad_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--workers", "0", "--dsn", "postgresql://unused"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_error_classes_are_public() -> None:
    # The demo's retry loop relies on these two being what append raises.
    assert issubclass(cwstore.ChainConflictError, cwstore.ConflictError)
    assert cwstore.ChainConflictError.sqlstate == "CW410"
