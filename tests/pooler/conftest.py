"""The pooler tests' DSN: ``CWSTORE_TEST_POOLER_DSN``, a transaction-mode pooler (PgBouncer)
in front of the server of ``CWSTORE_TEST_DSN``; the tests are skipped without one."""

from __future__ import annotations

import os

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@pytest.fixture(scope="module")
def pooled_dsn(db_dsn: str) -> str:
    """The module's database, reached through the pooler."""
    pooler = os.environ.get("CWSTORE_TEST_POOLER_DSN")
    if not pooler:
        pytest.skip("CWSTORE_TEST_POOLER_DSN is not set: no transaction-mode pooler")
    return make_conninfo(pooler, dbname=str(conninfo_to_dict(db_dsn)["dbname"]))
