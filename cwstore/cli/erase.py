"""``cwstore erase`` and ``cwstore retention``: removing graphs for good (docs/erasure.md).

Both ask before they erase when stdin is a terminal, unless ``--yes``; without a
terminal and without ``--yes`` they refuse (exit 2) before connecting, so a script that
forgot the flag erases nothing. stdout is data: one JSON object per graph erased (or,
for ``retention --dry-run``, per graph that would be); stderr is the prompt and the
summary. Answering anything but ``y`` or ``yes`` erases nothing (exit 1).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import timedelta
from typing import Any

from ..errors import InputError
from ._common import EXIT_OK, EXIT_REFUSED, add_dsn, err, open_store

__all__ = ["parse_duration", "register"]

_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:\d+[wdhms])+")
_PART = re.compile(r"(\d+)([wdhms])")


def parse_duration(text: str) -> timedelta:
    """A duration such as ``90d``, ``12h``, ``30m``, ``2w`` or ``1d12h`` (weeks, days,
    hours, minutes, seconds) as a :class:`~datetime.timedelta` longer than zero.

    Raises :class:`InputError` for anything else, zero included.
    """
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise InputError(
            f"--idle {text!r}: give a duration such as 90d, 12h, 30m or 1d12h (w, d, h, m, s)"
        )
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(value))
    if seconds <= 0:
        raise InputError(f"--idle {text!r}: the duration must be longer than zero")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InputError(f"--idle {text!r}: the duration is too long") from None


def _must_confirm(args: argparse.Namespace) -> bool:
    """Whether to ask before erasing; refuses (InputError) when asking is impossible."""
    if args.yes:
        return False
    if not sys.stdin.isatty():
        raise InputError(
            "refusing to erase without confirmation: stdin is not a terminal "
            "(pass --yes to erase without being asked); nothing was erased"
        )
    return True


def _confirmed(question: str) -> bool:
    """Ask ``question`` on stderr; True only for an answer of ``y`` or ``yes``."""
    sys.stderr.write(f"{question} This cannot be undone. Erase? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return True
    err("nothing erased")
    return False


def _line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cmd_erase(args: argparse.Namespace) -> int:
    ask = _must_confirm(args)
    with open_store(args) as store:
        if args.graph is not None:
            if ask:
                length = store.length(args.graph)
                if not _confirmed(f"graph {args.graph!r} holds {_plural(length, 'node')}."):
                    return EXIT_REFUSED
            nodes = store.erase(args.graph, reason=args.reason)
            _line({"graph": args.graph, "nodes": nodes})
            err(f"erased graph {args.graph!r} ({_plural(nodes, 'node')})")
            return EXIT_OK
        if ask and not _confirmed(
            f"every graph of tenant {args.tenant!r}, and its memberships, will be erased."
        ):
            return EXIT_REFUSED
        erased = store.erase_tenant(args.tenant, reason=args.reason, batch=args.batch)
    for g in erased:
        _line({"graph": g.graph, "nodes": g.nodes})
    total = sum(g.nodes for g in erased)
    err(f"erased tenant {args.tenant!r}: {_plural(len(erased), 'graph')}, {_plural(total, 'node')}")
    return EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
    idle = parse_duration(args.idle)
    ask = False if args.dry_run else _must_confirm(args)
    with open_store(args) as store:
        if args.dry_run or ask:
            found = store.idle_graphs(idle, tenant=args.tenant)
            if args.dry_run:
                for g in found:
                    _line(
                        {
                            "graph": g.graph,
                            "tenant": g.tenant,
                            "length": g.length,
                            "last_write": g.last_write.isoformat(),
                        }
                    )
                err(
                    f"{_plural(len(found), 'graph')} idle for longer than {args.idle} "
                    "(dry run: nothing erased)"
                )
                return EXIT_OK
            if not found:
                err(f"no graph idle for longer than {args.idle}: nothing to erase")
                return EXIT_OK
            if not _confirmed(
                f"{_plural(len(found), 'graph')} idle for longer than {args.idle} "
                "will be erased (cwstore retention --dry-run lists them)."
            ):
                return EXIT_REFUSED
        erased = store.erase_idle(idle, tenant=args.tenant, reason=args.reason, batch=args.batch)
    for e in erased:
        _line(
            {
                "graph": e.graph,
                "tenant": e.tenant,
                "nodes": e.nodes,
                "last_write": e.last_write.isoformat(),
            }
        )
    err(
        f"erased {_plural(len(erased), 'graph')} idle for longer than {args.idle} "
        f"({_plural(sum(e.nodes for e in erased), 'node')})"
    )
    return EXIT_OK


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reason", help="why, kept in the audit record (cwstore.erasures)")
    p.add_argument(
        "--batch",
        type=int,
        default=100,
        help="graphs erased per transaction, for a tenant or retention (default 100)",
    )
    p.add_argument("--yes", action="store_true", help="erase without asking")
    add_dsn(p)


def register(sub: Any) -> None:
    """Add ``erase`` and ``retention`` to the ``cwstore`` parser."""
    p = sub.add_parser(
        "erase",
        help="erase a graph, or every graph of a tenant, for good (asks first)",
        description="Remove every row of a graph (or of every graph of a tenant) from "
        "every cwstore table, leaving an audit record without the name or content. "
        "Asks first on a terminal; without one, needs --yes.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--graph", help="the graph to erase")
    which.add_argument("--tenant", help="erase every graph of this tenant")
    _add_common(p)
    p.set_defaults(func=cmd_erase)

    p = sub.add_parser(
        "retention",
        help="erase the graphs idle for longer than a duration (--dry-run lists them)",
        description="Erase every graph last written longer ago than --idle (or, holding "
        "none, created then), in batches; a retention group (a LangGraph thread's "
        "namespaces) only as a whole, once every graph of it is idle; a graph a writer "
        "holds is skipped. Asks first on a terminal; without one, needs --yes. "
        "--dry-run lists and erases nothing.",
    )
    p.add_argument(
        "--idle", required=True, metavar="DURATION", help="e.g. 90d, 12h, 30m, 2w, 1d12h"
    )
    p.add_argument("--tenant", help="only this tenant's graphs (default: every tenant)")
    p.add_argument("--dry-run", action="store_true", help="list what would go; erase nothing")
    _add_common(p)
    p.set_defaults(func=cmd_retention)
