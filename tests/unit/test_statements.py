"""``cwstore._migration_plan.statements`` splits a script where psql would, and only there.

The migration runner sends each statement of a migration on its own (Citus refuses
several statements in one query that changes a distributed table): a semicolon inside a
string, a quoted identifier, a dollar-quoted body or a comment must not split it.
"""

from __future__ import annotations

import pytest

from cwstore._migration_plan import statements
from cwstore._sql import migrations, schema


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
        ("SELECT 1;;\n;", ["SELECT 1"]),
        ("SELECT 'a;b''c;'; SELECT 2", ["SELECT 'a;b''c;'", "SELECT 2"]),
        ("SELECT E'x\\';y'; SELECT 2", ["SELECT E'x\\';y'", "SELECT 2"]),
        ("SELECT 'x\\'; SELECT 2", ["SELECT 'x\\'", "SELECT 2"]),
        ('SELECT "q;""x" FROM t; SELECT 2', ['SELECT "q;""x" FROM t', "SELECT 2"]),
        ("-- a; b\nSELECT 1; -- c;\n", ["-- a; b\nSELECT 1"]),
        ("SELECT /* a /* b; */ c; */ 1; SELECT 2", ["SELECT /* a /* b; */ c; */ 1", "SELECT 2"]),
        (
            "CREATE FUNCTION f() AS $body$ a; $$ b; $$ c; $body$; DO $$ x; $$;",
            ["CREATE FUNCTION f() AS $body$ a; $$ b; $$ c; $body$", "DO $$ x; $$"],
        ),
        ("SELECT $1; SELECT a$b$c; SELECT 3", ["SELECT $1", "SELECT a$b$c", "SELECT 3"]),
        ("SELECT 1 -- no newline; at the end", ["SELECT 1 -- no newline; at the end"]),
        ("", []),
        ("-- only a comment;\n/* and; another */", []),
    ],
)
def test_split_points(script: str, expected: list[str]) -> None:
    assert statements(script) == expected


def test_the_shipped_scripts_split_into_whole_statements() -> None:
    """Every piece of every migration and schema file is one statement: it ends where a
    statement of its kind ends, and no function body is cut in two."""
    for name, sql in [(m.filename, m.sql) for m in migrations()] + [
        (f"schema/{f.name}", f.sql) for f in schema()
    ]:
        pieces = statements(sql)
        assert pieces, name
        for piece in pieces:
            code = "\n".join(
                line for line in piece.splitlines() if not line.lstrip().startswith("--")
            ).strip()
            assert code, (name, piece)
            assert code.count("$$") % 2 == 0, (name, piece[:200])
            assert code.count("$body$") % 2 == 0, (name, piece[:200])
