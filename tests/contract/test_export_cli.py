"""The ``cwstore`` command line against a real database, through a subprocess.

``python -m cwstore`` with ``CWSTORE_DSN`` pointing at the module's throwaway database:
import, export (whole, as of a sequence, as of a time), graphs, and the refusals (a
second import, a broken document, an unknown graph) with their exit codes and stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_FILE

from cwstore import _jsontext
from cwstore.document import fold_frontier, validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = EXAMPLE_FILE


@pytest.fixture(scope="module")
def cli(db_dsn: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli(*args)`` runs ``python -m cwstore *args`` on the module's database."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["CWSTORE_DSN"] = db_dsn
    env.pop("CWSTORE_HOME", None)

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cwstore", *args],
            input=stdin,
            capture_output=True,
            text=True,
            encoding="utf-8",
            env=env,
            cwd=ROOT,
            timeout=120,
        )

    return run


@pytest.fixture(scope="module")
def imported(cli: Callable[..., Any]) -> str:
    """A graph holding the runtime's example, imported through the command line."""
    name = f"cli-{uuid.uuid4().hex}"
    done = cli("import", str(EXAMPLE), "--graph", name)
    assert done.returncode == 0, done.stderr
    assert "16" in done.stderr and name in done.stderr
    assert done.stdout == ""
    return name


def example() -> dict[str, Any]:
    return _jsontext.loads(EXAMPLE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def prefix(doc: dict[str, Any], s: int) -> str:
    nodes = doc["nodes"][:s]
    frontier = doc["frontier"] if s == len(doc["nodes"]) else fold_frontier(nodes)
    return _jsontext.dumps({"version": 1, "nodes": nodes, "frontier": frontier})


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "Traceback" not in done.stdout


def test_export_equals_the_input(cli: Callable[..., Any], imported: str) -> None:
    done = cli("export", "--graph", imported)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _jsontext.dumps(example()) + "\n"
    with EXAMPLE.open(encoding="utf-8") as f:
        assert done.stdout.rstrip("\n") == json.dumps(
            json.load(f), separators=(",", ":"), ensure_ascii=False
        )


def test_import_again_is_refused(cli: Callable[..., Any], imported: str) -> None:
    done = cli("import", str(EXAMPLE), "--graph", imported)
    assert done.returncode == 1
    no_traceback(done)
    assert imported in done.stderr
    assert "16" in done.stderr  # how many nodes it already holds
    assert cli("export", "--graph", imported).stdout == _jsontext.dumps(example()) + "\n"


def test_export_as_of_a_sequence(cli: Callable[..., Any], imported: str) -> None:
    done = cli("export", "--graph", imported, "--as-of", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout == prefix(example(), 5) + "\n"
    assert validate(_jsontext.loads(done.stdout)) == []
    done = cli("export", "--graph", imported, "--as-of", "0")
    assert done.stdout == '{"version":1,"nodes":[],"frontier":[]}\n'


def test_export_as_of_a_time(cli: Callable[..., Any], imported: str) -> None:
    done = cli("export", "--graph", imported, "--as-of-time", "2026-12-02T14:38:31.386Z")
    assert done.returncode == 0, done.stderr
    assert len(_jsontext.loads(done.stdout)["nodes"]) == 7
    assert done.stdout == prefix(example(), 7) + "\n"
    same = cli("export", "--graph", imported, "--as-of-time", "2026-12-02T16:38:31.386+02:00")
    assert same.stdout == done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--as-of", "17"],
        ["--as-of", "-1"],
        ["--as-of-time", "2026-12-02T14:38:31.386"],
        ["--as-of-time", "not a time"],
    ],
)
def test_export_bad_as_of(cli: Callable[..., Any], imported: str, args: list[str]) -> None:
    done = cli("export", "--graph", imported, *args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    no_traceback(done)
    assert done.stdout == ""
    assert done.stderr.strip()


def test_broken_document_lists_every_violation_and_writes_nothing(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    doc = example()
    doc["version"] = 2
    doc["nodes"][2]["createdAt"] = "2026-12-02T14:38:31.383"
    doc["nodes"][13]["payload"] = "changed"
    doc["nodes"][4]["extra"] = True
    doc["frontier"].append("cw_" + "0" * 24)
    expected = validate(doc)
    assert {v.code for v in expected} == {
        "version", "created_at", "identity", "shape", "frontier_reference",
    }  # fmt: skip
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    name = f"cli-{uuid.uuid4().hex}"

    done = cli("import", str(path), "--graph", name)
    assert done.returncode == 1
    no_traceback(done)
    lines = [line.split("\t") for line in done.stderr.splitlines() if "\t" in line]
    assert sorted((f[0], f[1]) for f in lines) == sorted(
        (v.code, f"node={'-' if v.index is None else v.index}") for v in expected
    )
    listing = cli("graphs", "--json")
    assert listing.returncode == 0, listing.stderr
    assert name not in {g["name"] for g in json.loads(listing.stdout)}
    missing = cli("export", "--graph", name)
    assert missing.returncode == 1


def test_import_from_stdin(cli: Callable[..., Any]) -> None:
    name = f"cli-{uuid.uuid4().hex}"
    done = cli("import", "-", "--graph", name, stdin=EXAMPLE.read_text(encoding="utf-8"))
    assert done.returncode == 0, done.stderr
    assert cli("export", "--graph", name).stdout == _jsontext.dumps(example()) + "\n"


def test_unknown_graph(cli: Callable[..., Any]) -> None:
    name = f"cli-missing-{uuid.uuid4().hex}"
    for args in (["export", "--graph", name], ["export", "--graph", name, "--as-of", "1"]):
        done = cli(*args)
        assert done.returncode == 1
        no_traceback(done)
        assert name in done.stderr
        assert done.stdout == ""


def test_graphs(cli: Callable[..., Any], imported: str) -> None:
    done = cli("graphs")
    assert done.returncode == 0, done.stderr
    rows = dict(line.split("\t") for line in done.stdout.splitlines())
    assert rows[imported] == "16"
    as_json = cli("graphs", "--json")
    assert as_json.returncode == 0, as_json.stderr
    entry = {g["name"]: g for g in json.loads(as_json.stdout)}[imported]
    assert entry == {"name": imported, "length": 16, "vocabulary": None, "tenant": "default"}
