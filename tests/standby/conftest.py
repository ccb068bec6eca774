"""Fixtures for reading on a hot standby: the module's database written on the primary
(``CWSTORE_TEST_DSN``) and read on a streaming standby of it.

Needs ``CWSTORE_TEST_STANDBY_DSN``, a DSN of a hot standby of that server (its
database name is replaced by the module's); skipped without one. ``.ci/run`` makes
one with ``pg_basebackup -R`` on 127.0.0.1:5442.
"""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.replica import caught_up


@pytest.fixture(scope="module")
def standby_dsn(db_dsn: str) -> str:
    """The module's database on the standby, once the standby holds it."""
    standby = os.environ.get("CWSTORE_TEST_STANDBY_DSN")
    if not standby:
        pytest.skip("CWSTORE_TEST_STANDBY_DSN is not set: no hot standby")
    dsn = make_conninfo(standby, dbname=str(conninfo_to_dict(db_dsn)["dbname"]))
    with psycopg.connect(standby, autocommit=True) as conn:
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    assert row and row[0], "CWSTORE_TEST_STANDBY_DSN is not a standby"
    caught_up(db_dsn, standby)
    return dsn
