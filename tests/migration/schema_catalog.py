"""A database's cwstore schema as plain text lines, from the catalog, for comparing two
databases object by object (see ``test_schema_matches_migrations.py``).

Each section lists one kind of object, one line per object (or per column), sorted, so
two databases built differently (the schema files at once, or the migration chain step
by step) compare equal exactly when they hold the same objects with the same
definitions, settings, grants and comments. What a catalog records that is not part of
a definition (OIDs, creation order, owner names) is left out; function settings are
sorted, since ``SET a ... SET b`` and ``SET b ... SET a`` define the same function.
"""

from __future__ import annotations

import difflib
from typing import Any, Final

import psycopg

SCHEMA: Final = "cwstore"

# Every query takes the schema name as $1 and returns rows whose first column is the
# object's name; the whole row becomes one line.
_SECTIONS: Final[dict[str, str]] = {
    "schema": """
        SELECT n.nspname, n.nspacl::text, obj_description(n.oid, 'pg_namespace')
          FROM pg_namespace n WHERE n.nspname = %(s)s""",
    "relation": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions::text,
               c.relrowsecurity, c.relforcerowsecurity, c.relacl::text,
               obj_description(c.oid, 'pg_class')
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind <> 'i'""",
    "column": """
        SELECT c.relname || '.' || a.attname,
               rank() OVER (PARTITION BY c.oid ORDER BY a.attnum),
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attgenerated, a.attidentity,
               co.collname, a.attacl::text, col_description(c.oid, a.attnum)
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
                                      AND co.collname <> 'default'
         WHERE c.relnamespace = %(s)s::regnamespace AND a.attnum > 0
           AND NOT a.attisdropped AND c.relkind IN ('r', 'v', 'm', 'p', 'f')""",
    "constraint": """
        SELECT c.conrelid::regclass::text || '.' || c.conname, c.contype,
               pg_get_constraintdef(c.oid), c.condeferrable, c.condeferred,
               obj_description(c.oid, 'pg_constraint')
          FROM pg_constraint c WHERE c.connamespace = %(s)s::regnamespace""",
    "index": """
        SELECT c.relname, pg_get_indexdef(c.oid), c.reloptions::text,
               obj_description(c.oid, 'pg_class')
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind = 'i'""",
    "sequence": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
               s.seqmax, s.seqmin, s.seqcache, s.seqcycle
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = %(s)s::regnamespace""",
    "trigger": """
        SELECT t.tgrelid::regclass::text || '.' || t.tgname, pg_get_triggerdef(t.oid),
               t.tgenabled, obj_description(t.oid, 'pg_trigger')
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal""",
    "policy": """
        SELECT p.tablename || '.' || p.policyname, p.permissive, p.roles::text, p.cmd,
               p.qual, p.with_check
          FROM pg_policies p WHERE p.schemaname = %(s)s""",
    "view": """
        SELECT c.relname, pg_get_viewdef(c.oid)
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('v', 'm')""",
    "function": """
        SELECT p.oid::regprocedure::text, p.prokind, l.lanname,
               pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
               p.provolatile, p.proisstrict, p.prosecdef, p.proleakproof, p.proparallel,
               p.procost, p.prorows, p.proretset,
               (SELECT array_agg(x ORDER BY x) FROM unnest(p.proconfig) x)::text,
               p.proacl::text, obj_description(p.oid, 'pg_proc'),
               coalesce(pg_get_function_sqlbody(p.oid), p.prosrc)
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = %(s)s::regnamespace""",
    "type": """
        SELECT t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod),
               t.typnotnull, t.typdefault, obj_description(t.oid, 'pg_type')
          FROM pg_type t
         WHERE t.typnamespace = %(s)s::regnamespace AND t.typtype IN ('d', 'e', 'r', 'm')""",
}


def _line(section: str, row: tuple[Any, ...]) -> str:
    name, *rest = row
    return f"{section} {name}: " + " | ".join("NULL" if v is None else str(v) for v in rest)


def snapshot(conn: psycopg.Connection[Any], schema: str = SCHEMA) -> list[str]:
    """Every object of ``schema`` as one text line each, sorted by section and name.

    Function bodies span several lines: a line is the whole definition, newlines
    included, so a difference shows up as the one object that differs.
    """
    lines: list[str] = []
    for section, query in _SECTIONS.items():
        rows = conn.execute(query, {"s": schema}).fetchall()
        lines.extend(sorted(_line(section, tuple(r)) for r in rows))
    return lines


def diff(expected: list[str], actual: list[str], *, names: tuple[str, str]) -> str:
    """A unified diff of two snapshots, object by object; empty when they are equal."""
    a = [ln + "\n" for obj in expected for ln in obj.splitlines()] if expected else []
    b = [ln + "\n" for obj in actual for ln in obj.splitlines()] if actual else []
    return "".join(difflib.unified_diff(a, b, fromfile=names[0], tofile=names[1], n=2))
