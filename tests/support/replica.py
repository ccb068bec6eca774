"""Waiting for a hot standby to replay what the primary wrote (tests/standby)."""

from __future__ import annotations

import time

import psycopg


def caught_up(primary_dsn: str, standby_dsn: str, timeout: float = 30.0) -> None:
    """Return once the standby has replayed everything the primary wrote until now."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    deadline = time.monotonic() + timeout
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        while True:
            done = conn.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)
            ).fetchone()
            if done and done[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {row[0]} in time")
            time.sleep(0.05)
