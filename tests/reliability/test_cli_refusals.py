"""Odd input at the command line and the API: a clear refusal, never a traceback.

Each case is one a hostile or careless user met: numbers Python will not convert,
nesting past the parser's recursion limit with an error at the bottom, bytes that are
not UTF-8 in an option, a lone surrogate where a node id goes, duplicate member names
outside payloads, and a pretty-printed export of a deep payload. The CLI runs as a
subprocess (``python -m cwstore``), as a user runs it; its exit code is 1 (refused) or
2 (not a document / bad option) and stderr is a message, not a traceback.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.documents import GraphBuilder

import cwstore
from cwstore import _jsontext
from cwstore.document import parse_document, validate

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str | bytes, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CWSTORE_DSN", None)
    return subprocess.run(
        [sys.executable, "-m", "cwstore", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def assert_refused(run: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    err = run.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-2000:]
    assert run.returncode in (1, 2), (run.returncode, err[-2000:])
    for needle in needles:
        assert needle in err, (needle, err[-2000:])
    return err


def _doc() -> dict[str, Any]:
    b = GraphBuilder()
    b.system("contract")
    b.goal("g")
    return b.state()


@pytest.fixture
def tmp_doc(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "doc.json"


def test_a_five_thousand_digit_integer_is_refused(tmp_doc: Path) -> None:
    text = _jsontext.dumps(_doc()).replace('"payload":"g"', '"payload":' + "9" * 5000)
    tmp_doc.write_text(text)
    err = assert_refused(cli("validate", str(tmp_doc)), "unrepresentable", "$.nodes[1].payload")
    assert "5000 digits" in err or "beyond" in err


def test_deep_nesting_with_a_bad_escape_is_refused(tmp_doc: Path) -> None:
    deep = "[" * 100_000 + '"\\q"' + "]" * 100_000
    text = _jsontext.dumps(_doc()).replace('"payload":"g"', '"payload":' + deep)
    tmp_doc.write_text(text)
    assert_refused(cli("validate", str(tmp_doc)), "escape")


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ('{"version":1', '{"version":1,"version":1', "$"),
        ('"frontier":', '"frontier":[],"frontier":', "$"),
        ('"frontier":', '"nodes":[],"frontier":', "$"),
        ('"kind":"goal"', '"kind":"goal","kind":"goal"', "$.nodes[1]"),
    ],
)
def test_duplicate_member_names_outside_payloads_are_refused(
    tmp_doc: Path, old: str, new: str, path: str
) -> None:
    text = _jsontext.dumps(_doc()).replace(old, new, 1)
    found = {(v.code, v.path) for v in validate(parse_document(text))}
    assert ("shape", path) in found, found
    tmp_doc.write_text(text)
    assert_refused(cli("validate", str(tmp_doc)), "shape", "repeats")


def test_non_utf8_option_bytes_are_refused(db_dsn: str) -> None:
    assert_refused(cli("history", "--dsn", db_dsn, "--graph", "g", "--key", b"\xff"), "--key")
    assert_refused(
        cli("init", "--dsn", db_dsn, "--roles", "--tenant", b"\xff=postgres"), "--tenant"
    )


def test_a_lone_surrogate_in_an_appended_frontier_is_refused(db_dsn: str, tmp_doc: Path) -> None:
    b = GraphBuilder()
    b.system("contract")
    node = dict(b.nodes[0])
    node.pop("sequence")
    tmp_doc.write_text(
        _jsontext.dumps({"nodes": [node], "frontier": ["x"]}).replace("x", "\\ud800")
    )
    err = assert_refused(cli("append", "--dsn", db_dsn, "--graph", "lone", str(tmp_doc)))
    assert "frontier" in err
    tmp_doc.write_text(_jsontext.dumps([{**node, "parents": [1]}]))
    assert_refused(cli("append", "--dsn", db_dsn, "--graph", "lone", str(tmp_doc)), "parents")


def test_export_indent_writes_numbers_as_the_runtime_and_any_depth(
    db_dsn: str, tmp_doc: Path
) -> None:
    b = GraphBuilder()
    b.system("contract")
    deep: Any = {"n": 1e-7, "m": 1e21}
    for _ in range(5000):
        deep = [deep]
    b.goal(deep)
    tmp_doc.write_text(_jsontext.dumps(b.state()))
    graph = f"indent-{os.getpid()}"
    run = cli("import", "--dsn", db_dsn, "--graph", graph, str(tmp_doc))
    assert run.returncode == 0, run.stderr.decode()
    run = cli("export", "--dsn", db_dsn, "--graph", graph, "--indent", "2")
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    out = run.stdout.decode()
    assert '"n": 1e-7' in out and '"m": 1e+21' in out
    assert _jsontext.dumps(_jsontext.loads(out)) == tmp_doc.read_text()


async def test_async_connect_takes_key_value_connection_strings(db_dsn: str) -> None:
    kv = make_conninfo("", **conninfo_to_dict(db_dsn))
    assert "://" not in kv
    store = await cwstore.connect(kv, migrate_schema=False, max_size=1)
    try:
        assert isinstance(await store.graphs(), list)
    finally:
        await store.close()
    sync = cwstore.connect_sync(kv, migrate_schema=False, max_size=1)
    sync.close()


async def test_a_tenant_text_cannot_hold_is_refused_at_connect(db_dsn: str) -> None:
    with pytest.raises(cwstore.InputError):
        await asyncio.wait_for(
            cwstore.connect(db_dsn, migrate_schema=False, tenant="\ud800"), timeout=10
        )

    def sync() -> None:
        cwstore.connect_sync(db_dsn, migrate_schema=False, tenant="\ud800")

    with pytest.raises(cwstore.InputError):
        await asyncio.wait_for(asyncio.to_thread(sync), timeout=10)
