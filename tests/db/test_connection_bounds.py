"""Every connection cwstore opens is bounded and goes where libpq would go.

The asyncpg client refuses, before connecting anywhere, a DSN holding a setting it cannot
honour as libpq does (a loopback listener records that nothing came); the settings it
accepts still reach the server. A follower's listening connection carries the store's
settings (statement timeout, tenant) and the client check, and a killed ``cwstore tail``
leaves no backend waiting on a lock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from support.documents import GraphBuilder

import cwstore
from cwstore.drivers._protocol import CLIENT_CHECK_INTERVAL

REFUSED = [
    "hostaddr=127.0.0.1",
    "require_auth=scram-sha-256",
    "requirepeer=postgres",
    "channel_binding=require",
    "gssencmode=require",
    "sslcertmode=require",
    "sslsni=0",
    "sslcrldir=/nonexistent",
    "keepalives=0",
    "tcp_user_timeout=1000",
    "load_balance_hosts=random",
]


class _Door:
    """A loopback listener that records every connection made to it."""

    def __init__(self) -> None:
        self.knocks = 0
        self.port = 0

    async def _knock(self, _r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.knocks += 1
        writer.close()


@pytest.fixture
async def door() -> AsyncIterator[_Door]:
    d = _Door()
    server = await asyncio.start_server(d._knock, "127.0.0.1", 0)
    d.port = server.sockets[0].getsockname()[1]
    async with server:
        yield d


@pytest.mark.parametrize("setting", REFUSED)
@pytest.mark.parametrize("form", ["key=value", "uri"])
async def test_the_async_client_refuses_what_it_cannot_honour_before_connecting(
    door: _Door, setting: str, form: str
) -> None:
    key, _, value = setting.partition("=")
    if form == "uri":
        dsn = f"postgresql://ada:secret@127.0.0.1:{door.port}/d?{key}={value}"
    else:
        dsn = f"host=127.0.0.1 port={door.port} dbname=d user=ada password=secret {setting}"
    with pytest.raises(cwstore.InputError) as info:
        await cwstore.connect(dsn)
    assert f'{key}="{value}"' in info.value.message
    with pytest.raises(cwstore.InputError):
        await cwstore.connect(dsn, listen_dsn=dsn, pooler="transaction")
    assert door.knocks == 0


async def test_the_async_client_refuses_a_variable_it_cannot_honour(
    door: _Door, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGREQUIREAUTH", "scram-sha-256")
    with pytest.raises(cwstore.InputError) as info:
        await cwstore.connect(f"host=127.0.0.1 port={door.port} dbname=d")
    assert "PGREQUIREAUTH" in info.value.message
    assert door.knocks == 0


async def test_the_settings_the_async_client_accepts_reach_the_server(db_dsn: str) -> None:
    dsn = make_conninfo(
        db_dsn,
        fallback_application_name="bounds-test",
        connect_timeout="10",
        client_encoding="UTF8",
        channel_binding="disable",
        gssencmode="disable",
        sslcertmode="allow",
        sslsni="1",
        load_balance_hosts="disable",
        options="-c work_mem=7MB",
    )
    async with await cwstore.connect(dsn) as store, store.connection() as conn:
        assert await conn.fetchval("SHOW application_name") == "bounds-test"
        assert await conn.fetchval("SHOW work_mem") == "7MB"


@pytest.mark.parametrize("client", ["asyncpg", "psycopg"])
async def test_a_followers_connection_carries_the_stores_bounds(db_dsn: str, client: str) -> None:
    """The listening connection of ``tail``/``tail_all`` (and the view's live streams)
    runs with the store's statement timeout and the client check, as the pool's do."""
    if client == "asyncpg":
        async with await cwstore.connect(db_dsn, statement_timeout=7) as store:
            async with store.follower() as listener:
                timeout = await listener.fetchval("SHOW statement_timeout")
                check = await listener.fetchval("SHOW client_connection_check_interval")
            async with store.connection() as conn:
                pooled = await conn.fetchval("SHOW statement_timeout")
    else:

        def sync() -> tuple[str, str, str]:
            with cwstore.connect_sync(db_dsn, statement_timeout=7) as store:
                with store.follower() as listener:
                    t = listener.fetchval("SHOW statement_timeout")
                    c = listener.fetchval("SHOW client_connection_check_interval")
                with store.connection() as conn:
                    return t, c, conn.fetchval("SHOW statement_timeout")

        timeout, check, pooled = await asyncio.to_thread(sync)
    assert (timeout, pooled) == ("7s", "7s")
    assert check == CLIENT_CHECK_INTERVAL


def _stuck_backends(admin: psycopg.Connection[tuple[object, ...]], holder: int) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))", (holder,)
    ).fetchall()
    return [int(str(r[0])) for r in rows]


def _wait_for(what: str, check: Callable[[], object], deadline: float = 60.0) -> None:
    """Poll ``check()`` until it is true; an AssertionError naming ``what`` after
    ``deadline`` seconds (a bound on the wait, not a measure of speed)."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline}s")
        time.sleep(0.1)


def test_a_killed_cli_tail_leaves_no_backend_waiting_on_a_lock(db_dsn: str) -> None:
    b = GraphBuilder()
    b.system("followed")
    with cwstore.connect_sync(db_dsn) as store:
        store.import_state("followed", b.state())
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    with (
        psycopg.connect(db_dsn, autocommit=True) as admin,
        psycopg.connect(db_dsn) as holder,
    ):
        holder_pid = holder.info.backend_pid
        holder.execute("LOCK TABLE cwstore.nodes IN ACCESS EXCLUSIVE MODE")
        tail = subprocess.Popen(
            [sys.executable, "-m", "cwstore", "tail", "--graph", "followed", "--dsn", db_dsn],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            _wait_for("the tail waits on the lock", lambda: _stuck_backends(admin, holder_pid))
            stuck = _stuck_backends(admin, holder_pid)
        finally:
            tail.send_signal(signal.SIGKILL)
            tail.wait()

        def gone() -> bool:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY (%s)", (stuck,)
            ).fetchone()
            return row is not None and row[0] == 0

        try:
            _wait_for("the killed tail's backend ends while the lock is held", gone)
        finally:
            holder.rollback()
