"""``cwstore demo``: its options here, the demo itself in :mod:`cwstore.demo`, imported
when the command runs (it renders with rich, the ``cli`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import add_dsn


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(args.dsn, args.workers, args.steps, args.graph)


def register(sub: Any) -> None:
    """Add ``demo`` to the ``cwstore`` parser."""
    p = sub.add_parser(
        "demo",
        help="agent workers in separate processes share one graph, live; then SQL over it",
    )
    p.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    p.add_argument("--steps", type=int, default=25, help="steps per worker (default 25)")
    p.add_argument(
        "--graph", default=None, help="graph to write, must be new (default demo-<timestamp>)"
    )
    add_dsn(p, pooler=False)
    p.set_defaults(func=cmd_demo)
