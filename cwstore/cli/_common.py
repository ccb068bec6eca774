"""What the ``cwstore`` commands share: exit codes, reading input, flags, opening a store."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from .._arg_checks import POOLERS
from .._dsn import resolve_dsn
from ..document import Vocabulary, parse_document
from ..errors import InputError

if TYPE_CHECKING:
    from ..store import Store

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def err(msg: str) -> None:
    print(msg, file=sys.stderr)


def read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    p = Path(path)
    try:
        if p.is_dir():
            raise InputError(f"{path}: is a directory, expected a JSON file")
        return p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def vocabulary(args: argparse.Namespace) -> Vocabulary | None:
    """The vocabulary the flags ask for, or None when no flag was given."""
    if getattr(args, "node_types", None):
        raw = read_input(args.node_types)
        try:
            value = parse_document(raw)
        except InputError as exc:
            raise InputError(f"--node-types {args.node_types}: {exc.message}") from None
        return Vocabulary.from_node_types(value, source=f"--node-types {args.node_types}")
    if getattr(args, "fixed_vocabulary", False):
        return Vocabulary.builtin()
    return None


def add_vocab_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--node-types",
        metavar="FILE",
        help="fixed vocabulary from a JSON list of {name, description} (max 32)",
    )
    g.add_argument(
        "--fixed-vocabulary",
        action="store_true",
        help="fixed built-in vocabulary: memory, preference, wisdom, artifact",
    )


def add_dsn(p: argparse.ArgumentParser, *, pooler: bool = True) -> None:
    """``--dsn``; with ``pooler``, ``--pooler`` and ``--listen-dsn`` too (the commands
    that open a store)."""
    p.add_argument(
        "--dsn",
        default=os.environ.get("CWSTORE_DSN"),
        help="PostgreSQL DSN (env CWSTORE_DSN); default: the embedded server in CWSTORE_HOME",
    )
    if not pooler:
        return
    p.add_argument(
        "--pooler",
        choices=POOLERS,
        default=os.environ.get("CWSTORE_POOLER") or "none",
        help="'transaction' when the DSN leads to a transaction-mode pooler such as "
        "PgBouncer (env CWSTORE_POOLER; default none)",
    )
    p.add_argument(
        "--listen-dsn",
        default=os.environ.get("CWSTORE_LISTEN_DSN"),
        help="a direct DSN to the primary where `tail` listens (env CWSTORE_LISTEN_DSN); "
        "without it, tail polls through a pooler or on a standby",
    )


def cli_dsn(dsn: str | None) -> str:
    """The CLI's database: ``--dsn``, else ``CWSTORE_DSN``, else the embedded server
    (the CLI's default, unlike the library's)."""
    return resolve_dsn(dsn, embedded=None)


def open_store(args: argparse.Namespace, *, migrate: bool = False) -> Store:
    """A sync store on ``--dsn`` (see :func:`cli_dsn`).

    ``migrate``: bring the schema up to date first, for the commands that add data
    (``import``, ``append``), so that a new user's first one works. Every other command
    never changes a database: one whose schema is missing or behind this client is
    refused with :class:`SchemaNotReadyError` naming ``cwstore init``, by the rule
    :func:`~cwstore.connect` applies (:func:`cwstore.migrate.check_schema`).
    """
    from ..store import connect_sync

    dsn = cli_dsn(args.dsn)
    return connect_sync(
        dsn,
        min_size=1,
        max_size=2,
        migrate_schema=migrate,
        statement_timeout=None if migrate else read_timeout(),
        pooler=args.pooler,
        listen_dsn=args.listen_dsn,
    )


def read_timeout() -> float:
    """Seconds any one statement of a command that only reads may run:
    ``CWSTORE_STATEMENT_TIMEOUT``, else 300 (an export of a 1 GB graph takes about 25).
    A command cut short says so and exits 1, and nothing is left running on the server."""
    text = os.environ.get("CWSTORE_STATEMENT_TIMEOUT", "300")
    try:
        return float(text)
    except ValueError:
        raise InputError(f"CWSTORE_STATEMENT_TIMEOUT is seconds, got {text!r}") from None


def as_of(args: argparse.Namespace) -> int | datetime | None:
    if getattr(args, "as_of", None) is not None and getattr(args, "as_of_time", None):
        raise InputError("give --as-of or --as-of-time, not both")
    if getattr(args, "as_of_time", None):
        text = args.as_of_time
        try:
            t = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise InputError(f"--as-of-time {text!r} is not an RFC 3339 timestamp") from None
        if t.tzinfo is None:
            raise InputError(f"--as-of-time {text!r} needs a zone (Z or +hh:mm)")
        return t
    seq: int | None = getattr(args, "as_of", None)
    return seq
