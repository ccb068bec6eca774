"""``cwstore project`` and ``cwstore history``: reading state in the terminal or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ..results import Projection
from ._common import add_dsn, as_of, open_store

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["print_projection", "register"]


def _short(value: Any, width: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_projection(p: Projection, console: Console | None = None) -> None:
    """A readable summary of a projection: tables for heads, resources and memory."""
    from rich.console import Console
    from rich.table import Table

    out = console or Console()
    out.print(f"[bold]{p.graph}[/bold] as of sequence [bold]{p.length}[/bold]")
    counts = ", ".join(f"{k}={v}" for k, v in sorted(p.counts.items()))
    out.print(f"nodes by kind: {counts or '(none)'}")
    if p.latest_goal:
        out.print(f"latest goal   #{p.latest_goal.sequence}: {_short(p.latest_goal.payload)}")
    if p.latest_answer:
        out.print(f"latest answer #{p.latest_answer.sequence}: {_short(p.latest_answer.payload)}")

    t = Table(title="frontier (active heads)", show_lines=False)
    for col in ("seq", "kind", "id", "payload"):
        t.add_column(col)
    for f in p.frontier:
        t.add_row(str(f.sequence), f.kind, f.id, _short(f.payload, 50))
    out.print(t)

    if p.resources:
        t = Table(title="resources (newest version of each key)")
        for col in ("key", "version", "seq", "payload"):
            t.add_column(col)
        for key, r in sorted(p.resources.items()):
            t.add_row(key, str(r.version), str(r.sequence), _short(r.payload, 50))
        out.print(t)

    if p.memory:
        t = Table(title="semantic memory")
        for col in ("type", "key", "version", "content"):
            t.add_column(col)
        for m in p.memory:
            t.add_row(m.type, m.key, str(m.version), _short(m.content, 50))
        out.print(t)


def cmd_project(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        p = store.project(args.graph, as_of=as_of(args))
    if args.json:
        sys.stdout.write(json.dumps(p.to_json_obj(), ensure_ascii=False) + "\n")
    else:
        print_projection(p)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    with open_store(args) as store:
        versions = store.history(args.graph, args.key)
    if args.json:
        for v in versions:
            sys.stdout.write(
                json.dumps(
                    {
                        "key": v.key,
                        "version": v.version,
                        "sequence": v.sequence,
                        "id": v.id,
                        "kind": v.kind,
                        "createdAt": v.created_at,
                        "recordedAt": v.recorded_at.isoformat(),
                        "payload": v.payload,
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
        return 0
    if not versions:
        print(f"key {args.key!r} has no versions in graph {args.graph!r}", file=sys.stderr)
        return 1
    t = Table(title=f"history of {args.key}")
    for col in ("version", "seq", "createdAt", "recorded", "node", "payload"):
        t.add_column(col)
    for v in versions:
        t.add_row(
            str(v.version),
            str(v.sequence),
            v.created_at,
            v.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
            v.id,
            _short(v.payload, 40),
        )
    Console().print(t)
    return 0


def register(sub: Any) -> None:
    """Add ``project`` and ``history`` to the ``cwstore`` parser."""
    p = sub.add_parser("project", help="the state now or as of a point: heads, resources, memory")
    p.add_argument("--graph", required=True)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--as-of", type=int, metavar="SEQ")
    g.add_argument("--as-of-time", metavar="RFC3339")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_dsn(p)
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("history", help="every version of a resource or semantic key")
    p.add_argument("--graph", required=True)
    p.add_argument("--key", required=True, help="e.g. src/config.js or semantic:memory:style")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    add_dsn(p)
    p.set_defaults(func=cmd_history)
