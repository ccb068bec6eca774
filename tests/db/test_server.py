"""The embedded server on this machine: start, reuse, stop, restart with data kept, and
many processes asking for it at once. Each test runs its own server in a temporary home
(about a second to initialise), separate from the session's test server.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import asyncpg
import psycopg

from cwstore import server


def test_start_reuse_stop_restart(server_home: Path) -> None:
    assert server.server_status(server_home)["running"] is False
    assert server.stop_server(server_home) is False

    dsn = server.ensure_server(server_home)
    assert dsn.startswith("postgresql://postgres@/cwstore?host=")
    status = server.server_status(server_home)
    assert status["running"] is True
    assert status["version"] == 18
    assert status["dsn"] == dsn
    pid = status["pid"]

    with psycopg.connect(dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None and int(version[0]) >= 180000
        assert conn.execute("SELECT current_database()").fetchone() == ("cwstore",)
        conn.execute("CREATE TABLE kept (x text)")
        conn.execute("INSERT INTO kept VALUES ('still here')")

    assert server.ensure_server(server_home) == dsn
    assert server.server_status(server_home)["pid"] == pid  # reused, not restarted

    assert server.stop_server(server_home) is True
    assert server.server_status(server_home)["running"] is False
    assert server.stop_server(server_home) is False

    dsn = server.ensure_server(server_home)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [("still here",)]


async def test_asyncpg_takes_the_dsn(server_home: Path) -> None:
    dsn = server.ensure_server(server_home)
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_database()") == "cwstore"
        assert (await conn.fetchval("SELECT version()")).startswith("PostgreSQL 18")
    finally:
        await conn.close()
    admin = server.ensure_server(server_home, database="postgres")
    conn = await asyncpg.connect(admin)
    try:
        assert await conn.fetchval("SELECT current_database()") == "postgres"
    finally:
        await conn.close()


def test_many_processes_at_once(server_home: Path) -> None:
    # spawn, not fork: each child is a fresh interpreter, as separate CLI calls would be.
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        dsns = pool.map(server.ensure_server, [server_home] * 4)
    assert len(set(dsns)) == 1
    with psycopg.connect(dsns[0]) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert server.server_status(server_home)["running"] is True


def test_temporary_server_applies_settings_and_cleans_up() -> None:
    with server.temporary_server() as dsn:
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SHOW fsync").fetchone() == ("off",)
            assert conn.execute("SELECT current_database()").fetchone() == ("postgres",)
        host = psycopg.conninfo.conninfo_to_dict(dsn)["host"]
        home = Path(str(host)).parent
        assert home.is_dir()
    assert not home.exists()
