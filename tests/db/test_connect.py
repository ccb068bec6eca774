"""``connect()`` and ``connect_sync()`` do only what they are asked: no DSN is an error
(nothing started), a database without the schema is an error naming ``cwstore init``,
and migrating is opt-in."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.documents import GraphBuilder

import cwstore


@pytest.fixture
def no_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ``CWSTORE_DSN``, and an empty ``CWSTORE_HOME`` an embedded server would fill."""
    monkeypatch.delenv("CWSTORE_DSN", raising=False)
    monkeypatch.setenv("CWSTORE_HOME", str(tmp_path))
    return tmp_path


def test_sync_without_a_dsn_is_refused_and_starts_nothing(no_dsn: Path) -> None:
    with pytest.raises(cwstore.InputError) as info:
        cwstore.connect_sync()
    assert isinstance(info.value, ValueError)
    assert "CWSTORE_DSN" in info.value.message and "embedded=True" in info.value.message
    assert list(no_dsn.iterdir()) == []


async def test_async_without_a_dsn_is_refused_and_starts_nothing(no_dsn: Path) -> None:
    with pytest.raises(ValueError):
        await cwstore.connect()
    assert list(no_dsn.iterdir()) == []


async def test_a_dsn_and_embedded_together_are_refused(no_dsn: Path, db_dsn: str) -> None:
    with pytest.raises(cwstore.InputError):
        await cwstore.connect(db_dsn, embedded=True)
    with pytest.raises(cwstore.InputError):
        cwstore.connect_sync(db_dsn, embedded=True)
    assert list(no_dsn.iterdir()) == []


async def test_the_environment_dsn_is_used(monkeypatch: pytest.MonkeyPatch, db_dsn: str) -> None:
    monkeypatch.setenv("CWSTORE_DSN", db_dsn)
    async with await cwstore.connect() as store:
        assert store.dsn == db_dsn
    with cwstore.connect_sync() as sync:
        assert sync.dsn == db_dsn


async def test_no_schema_names_cwstore_init_and_migrating_is_opt_in(empty_db_dsn: str) -> None:
    with pytest.raises(cwstore.SchemaNotReadyError) as info:
        await cwstore.connect(empty_db_dsn)
    assert "cwstore init" in info.value.message
    with pytest.raises(cwstore.SchemaNotReadyError):
        await asyncio.to_thread(cwstore.connect_sync, empty_db_dsn)
    async with await cwstore.connect(empty_db_dsn, migrate_schema=True) as store:
        assert await store.graphs() == []
    with cwstore.connect_sync(empty_db_dsn) as sync:
        assert sync.graphs() == []


_ONE_DRIVER = """
import asyncio, json, sys

sys.modules[sys.argv[1]] = None  # an environment where the other driver is not installed
if sys.argv[1] == "psycopg":
    sys.modules["psycopg_pool"] = None
import cwstore

dsn, state = sys.argv[2], json.loads(sys.stdin.read())


async def run_async() -> int:
    store = await cwstore.connect(dsn, migrate_schema=True)
    try:
        return len(await store.save("without-" + sys.argv[1], state))
    finally:
        await store.close()


def run_sync() -> int:
    with cwstore.connect_sync(dsn, migrate_schema=True) as store:
        return len(store.save("without-" + sys.argv[1], state))


saved = asyncio.run(run_async()) if sys.argv[1] == "psycopg" else run_sync()
loaded = sorted(m.split(".")[0] for m in sys.modules if sys.modules[m] is not None)
print(saved, sys.argv[1] in loaded)
"""


@pytest.mark.parametrize("missing", ["asyncpg"])
def test_a_client_needs_only_its_own_driver(db_dsn: str, missing: str) -> None:
    """The sync client runs where asyncpg cannot be imported. (The async client reads
    its DSN with libpq's parser, through psycopg, a dependency of cwstore.)"""
    b = GraphBuilder()
    b.system("one driver")
    b.goal("save without the other")
    dsn = db_dsn if missing == "asyncpg" else make_conninfo("", **conninfo_to_dict(db_dsn))
    done = subprocess.run(
        [sys.executable, "-c", _ONE_DRIVER, missing, dsn],
        input=json.dumps(b.state()),
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "False"]
