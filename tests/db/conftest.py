"""Fixtures for the tests of the database plumbing itself: the embedded server and the
migration runner. The server and database fixtures they build on live in
``tests/conftest.py``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cwstore._sql import Migration, migrations

# Three small migrations in the shape of real ones: each opens with its comment, the
# first creates the schema the way the real 0001 must (it already exists by then).
SCRATCH_MIGRATIONS = {
    "0001_first_table.sql": """
-- What: a table. Why: tests of the runner. Safe with live writers: yes.
CREATE SCHEMA IF NOT EXISTS cwstore;
CREATE TABLE cwstore.scratch_one (id integer PRIMARY KEY, note text);
INSERT INTO cwstore.scratch_one VALUES (1, 'a literal % sign and $1 stay as they are');
""",
    "0002_a_function.sql": """
-- What: a function with a dollar-quoted body. Safe with live writers: yes.
CREATE FUNCTION cwstore.scratch_answer() RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    RETURN 42;  -- semicolons inside the body must not split the script
END
$$;
""",
    "0003_second_table.sql": """
-- What: a second table referencing the first. Safe with live writers: yes.
CREATE TABLE cwstore.scratch_two (
    id integer PRIMARY KEY REFERENCES cwstore.scratch_one (id)
);
""",
}


def write_sql_dir(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` into ``root/migrations`` and return ``root``."""
    (root / "migrations").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / "migrations" / name).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def scratch_migrations(tmp_path: Path) -> list[Migration]:
    """The three scratch migrations, read through the real loader."""
    return migrations(write_sql_dir(tmp_path / "sql", SCRATCH_MIGRATIONS))


@pytest.fixture
def server_home() -> Iterator[Path]:
    """An empty home folder for an embedded server; any server in it is stopped after.

    Made with mkdtemp rather than tmp_path: the server's socket lives in the folder and
    Unix socket paths must stay short (about 100 bytes).
    """
    from cwstore.server import stop_server

    home = Path(tempfile.mkdtemp(prefix="cwstore-home-"))
    try:
        yield home
    finally:
        stop_server(home)
        shutil.rmtree(home, ignore_errors=True)
