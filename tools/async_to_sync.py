#!/usr/bin/env python3
"""Generate the sync client from the async one, so the client is written once.

``cwstore/store_async.py`` is the source of ``cwstore/store.py``, and
``cwstore/_migrate_async.py`` of ``cwstore/_migrate_sync.py``; the outputs must not be
edited by hand. The rewrite works on tokens, so comments and layout survive:

- ``async`` before ``def``/``with``/``for`` and every ``await`` are dropped;
- names are renamed by :data:`NAMES` (``AsyncStore`` -> ``Store``,
  ``AsyncpgPool`` -> ``PsycopgPool``, ``AsyncIterator`` -> ``Iterator`` ...);
- string literals (docstrings, ``__all__``) get the substitutions of :data:`TEXT`;

then ruff sorts the imports and formats the result, and a DO-NOT-EDIT header goes on
top. The driver layer (``cwstore/drivers/``) is what makes this possible: the async
code calls only the protocol, whose sync twin has the same methods.

Usage::

    python tools/async_to_sync.py           # rewrite cwstore/store.py
    python tools/async_to_sync.py --check   # exit 1 if cwstore/store.py is stale

Modelled on psycopg's ``tools/async_to_sync.py`` (there an AST rewrite).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NAMES = {
    "AsyncStore": "Store",
    "connect": "connect_sync",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "AsyncConnection": "Connection",
    "AsyncListener": "Listener",
    "AsyncPool": "Pool",
    "AsyncpgPool": "PsycopgPool",
    "AsyncpgConnection": "PsycopgConnection",
    "asyncpg": "psycopg",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "migrate_dsn": "migrate_dsn_sync",
    "apply_migrations": "apply_migrations_sync",
}
"""Identifiers of the async modules and their sync names."""

TEXT = [
    ('"AsyncStore"', '"Store"'),
    ('"connect"', '"connect_sync"'),
    ('"apply_migrations"', '"apply_migrations_sync"'),
    ('"migrate_dsn"', '"migrate_dsn_sync"'),
    ('"status"', '"status_sync"'),
    ('"distribute"', '"distribute_sync"'),
    ('"citus_installed"', '"citus_installed_sync"'),
    ('"distributed"', '"distributed_sync"'),
    ('"setup"', '"setup_sync"'),
    ('"add_tenant_member"', '"add_tenant_member_sync"'),
    ('"install_roles"', '"install_roles_sync"'),
    ('"AsyncCwstoreSaver"', '"CwstoreSaver"'),
    (
        "generates\n:mod:`cwstore.langgraph._saver_sync` (:class:`CwstoreSaver`) from it.",
        "generated this module from it.",
    ),
    ("checkpointer interface (langgraph-checkpoint 4.x) on an", "checkpointer interface on a"),
    ("(async).", "(sync)."),
    ("generates :mod:`cwstore._roles_sync` (psycopg) from this", "generated this module from"),
    (
        "module; :mod:`cwstore.roles` exports both and says what the roles are.",
        ":mod:`cwstore._roles_async`; :mod:`cwstore.roles` exports both.",
    ),
    ("AsyncStore", "Store"),
    (":func:`connect`", ":func:`connect_sync`"),
    (":func:`apply_migrations`", ":func:`apply_migrations_sync`"),
    (":func:`setup`", ":func:`setup_sync`"),
    ("the asyncio client", "the synchronous client"),
    ("The async client", "The sync client"),
    (
        "over the driver layer's :class:`AsyncPool` (asyncpg)",
        "over the driver layer's :class:`Pool` (psycopg)",
    ),
    ("(asyncpg here)", "(psycopg here)"),
    (
        "(asyncpg here, psycopg for the ``_sync`` twin)",
        "(psycopg here, asyncpg for the async twin)",
    ),
    ("generates :mod:`cwstore._migrate_sync` (psycopg) from this", "generated this module from"),
    (
        "module; :mod:`cwstore.migrate` exports both.",
        ":mod:`cwstore._migrate_async`; :mod:`cwstore.migrate` exports both.",
    ),
]
"""Substitutions inside string literals, in order."""

PAIRS = [
    (
        ROOT / "cwstore" / "store_async.py",
        ROOT / "cwstore" / "store.py",
        {"_migrate_async": "_migrate_sync"},
    ),
    (
        ROOT / "cwstore" / "_migrate_async.py",
        ROOT / "cwstore" / "_migrate_sync.py",
        {
            "status": "status_sync",
            "distribute": "distribute_sync",
            "citus_installed": "citus_installed_sync",
            "distributed": "distributed_sync",
            "setup": "setup_sync",
            "_roles_async": "_roles_sync",
            "install_roles": "install_roles_sync",
        },
    ),
    (
        ROOT / "cwstore" / "_roles_async.py",
        ROOT / "cwstore" / "_roles_sync.py",
        {"install_roles": "install_roles_sync", "add_tenant_member": "add_tenant_member_sync"},
    ),
    (
        ROOT / "cwstore" / "langgraph" / "_saver_async.py",
        ROOT / "cwstore" / "langgraph" / "_saver_sync.py",
        {
            "AsyncCwstoreSaver": "CwstoreSaver",
            "aget_tuple": "get_tuple",
            "alist": "list",
            "aput": "put",
            "aput_writes": "put_writes",
            "adelete_thread": "delete_thread",
            "adelete_for_runs": "delete_for_runs",
            "acopy_thread": "copy_thread",
            "aprune": "prune",
            "store_async": "store",
        },
    ),
]
"""(source, generated file, extra renames for that module)."""

HEADER = (
    "# WARNING: this file is generated by tools/async_to_sync.py from {source}.\n"
    "# DO NOT EDIT: change {source} and run `python tools/async_to_sync.py`.\n\n"
)


def convert(source: str, extra: dict[str, str] | None = None) -> str:
    """The sync module for the async module text ``source`` (before ruff); ``extra``
    adds renames for this module only."""
    names = NAMES | (extra or {})
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(row: int, col: int) -> int:
        return offsets[row - 1] + col

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits: list[tuple[int, int, str]] = []
    for i, tok in enumerate(tokens):
        start, end = pos(*tok.start), pos(*tok.end)
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            following = tokens[i + 1]
            if tok.string == "async" and following.string not in ("def", "with", "for"):
                continue
            edits.append((start, pos(*following.start), ""))
        elif tok.type == tokenize.NAME and tok.string in names:
            edits.append((start, end, names[tok.string]))
        elif tok.type == tokenize.STRING:
            text = tok.string
            for old, new in TEXT:
                text = text.replace(old, new)
            if text != tok.string:
                edits.append((start, end, text))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    return out


def _ruff(args: list[str], text: str, filename: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(filename), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        sys.exit(f"ruff {' '.join(args)} failed on {filename}:\n{done.stderr}")
    return done.stdout


def generate(source: Path, target: Path, extra: dict[str, str]) -> str:
    """The full text ``target`` must hold."""
    text = convert(source.read_text(encoding="utf-8"), extra)
    text = HEADER.format(source=source.relative_to(ROOT).as_posix()) + text
    text = _ruff(["check", "--fix-only", "--exit-zero", "--select", "I,F401"], text, target)
    return _ruff(["format"], text, target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if a generated file is out of date"
    )
    args = parser.parse_args()
    stale = []
    for source, target, extra in PAIRS:
        wanted = generate(source, target, extra)
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if wanted == current:
            continue
        if args.check:
            stale.append(target.relative_to(ROOT).as_posix())
        else:
            target.write_text(wanted, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(
            f"out of date: {', '.join(stale)}; run `python tools/async_to_sync.py`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
