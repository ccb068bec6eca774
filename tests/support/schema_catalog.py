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

# Every query takes the schema name and returns rows whose first column is the object's
# name; the whole row becomes one line, "section name: column=value, ...", the function's
# body last (it spans lines).
_SECTIONS: Final[dict[str, str]] = {
    "schema": """
        SELECT n.nspname, n.nspacl::text AS acl, obj_description(n.oid, 'pg_namespace') AS comment
          FROM pg_namespace n WHERE n.nspname = %(s)s""",
    "relation": """
        SELECT c.relname, c.relkind AS kind, c.relpersistence AS persistence,
               c.reloptions::text AS options, c.relrowsecurity AS rls,
               c.relforcerowsecurity AS force_rls, c.relacl::text AS acl,
               obj_description(c.oid, 'pg_class') AS comment
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind <> 'i'""",
    "column": """
        SELECT c.relname || '.' || a.attname,
               rank() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
               pg_get_expr(d.adbin, d.adrelid) AS default, a.attgenerated AS generated,
               a.attidentity AS identity, co.collname AS collation, a.attacl::text AS acl,
               col_description(c.oid, a.attnum) AS comment
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
                                      AND co.collname <> 'default'
         WHERE c.relnamespace = %(s)s::regnamespace AND a.attnum > 0
           AND NOT a.attisdropped AND c.relkind IN ('r', 'v', 'm', 'p', 'f')""",
    "constraint": """
        SELECT c.conrelid::regclass::text || '.' || c.conname, c.contype AS type,
               pg_get_constraintdef(c.oid) AS def, c.condeferrable AS deferrable,
               c.condeferred AS deferred, obj_description(c.oid, 'pg_constraint') AS comment
          FROM pg_constraint c WHERE c.connamespace = %(s)s::regnamespace""",
    "index": """
        SELECT c.relname, pg_get_indexdef(c.oid) AS def, c.reloptions::text AS options,
               obj_description(c.oid, 'pg_class') AS comment
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind = 'i'""",
    "sequence": """
        SELECT c.relname, format_type(s.seqtypid, NULL) AS type, s.seqstart AS start,
               s.seqincrement AS increment, s.seqmax AS max, s.seqmin AS min,
               s.seqcache AS cache, s.seqcycle AS cycle
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = %(s)s::regnamespace""",
    "trigger": """
        SELECT t.tgrelid::regclass::text || '.' || t.tgname, pg_get_triggerdef(t.oid) AS def,
               t.tgenabled AS enabled, obj_description(t.oid, 'pg_trigger') AS comment
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal""",
    "policy": """
        SELECT p.tablename || '.' || p.policyname, p.permissive, p.roles::text AS roles,
               p.cmd, p.qual AS using, p.with_check
          FROM pg_policies p WHERE p.schemaname = %(s)s""",
    "view": """
        SELECT c.relname, pg_get_viewdef(c.oid) AS def
          FROM pg_class c
         WHERE c.relnamespace = %(s)s::regnamespace AND c.relkind IN ('v', 'm')""",
    "function": """
        SELECT p.oid::regprocedure::text, p.prokind AS kind, l.lanname AS language,
               pg_get_function_arguments(p.oid) AS args,
               pg_get_function_result(p.oid) AS returns, p.provolatile AS volatility,
               p.proisstrict AS strict, p.prosecdef AS security_definer,
               p.proleakproof AS leakproof, p.proparallel AS parallel, p.procost AS cost,
               p.prorows AS rows,
               (SELECT array_agg(x ORDER BY x) FROM unnest(p.proconfig) x)::text AS settings,
               p.proacl::text AS acl, obj_description(p.oid, 'pg_proc') AS comment,
               coalesce(pg_get_function_sqlbody(p.oid), p.prosrc) AS body
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = %(s)s::regnamespace""",
    "type": """
        SELECT t.typname, t.typtype AS kind, format_type(t.typbasetype, t.typtypmod) AS base,
               t.typnotnull AS not_null, t.typdefault AS default,
               obj_description(t.oid, 'pg_type') AS comment
          FROM pg_type t
         WHERE t.typnamespace = %(s)s::regnamespace AND t.typtype IN ('d', 'e', 'r', 'm')""",
}


def _line(section: str, columns: list[str], row: tuple[Any, ...]) -> str:
    name, *rest = row
    fields = ", ".join(
        f"{c}={'NULL' if v is None else v}" for c, v in zip(columns, rest, strict=True)
    )
    return f"{section} {name}: {fields}"


def snapshot(conn: psycopg.Connection[Any], schema: str = SCHEMA) -> list[str]:
    """Every object of ``schema`` as one text line each, sorted by section and name.

    Function bodies span several lines: a line is the whole definition, newlines
    included, so a difference shows up as the one object that differs.
    """
    lines: list[str] = []
    for section, query in _SECTIONS.items():
        cur = conn.execute(query, {"s": schema})
        columns = [d.name for d in cur.description or []][1:]
        lines.extend(sorted(_line(section, columns, tuple(r)) for r in cur.fetchall()))
    return lines


def diff(expected: list[str], actual: list[str], *, names: tuple[str, str]) -> str:
    """A unified diff of two snapshots, object by object; empty when they are equal."""
    a = [ln + "\n" for obj in expected for ln in obj.splitlines()] if expected else []
    b = [ln + "\n" for obj in actual for ln in obj.splitlines()] if actual else []
    return "".join(difflib.unified_diff(a, b, fromfile=names[0], tofile=names[1], n=2))
