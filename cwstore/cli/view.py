"""``cwstore view``: serve the read-only history page (:mod:`cwstore.view`).

The command registers without importing the server's libraries (Starlette and uvicorn,
the optional extra ``view``); :func:`cmd_view` imports them when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError
from ._common import add_dsn, cli_dsn

__all__ = ["cmd_view", "register"]

DEFAULT_PORT = 8765


def cmd_view(args: argparse.Namespace) -> int:
    """Serve the page until interrupted; 0 when stopped."""
    try:
        from ..view.serve import serve
    except ImportError as exc:
        raise InputError(
            f"cwstore view needs the 'view' extra ({exc.name} is missing): "
            "pip install 'cwstore[view]'"
        ) from None
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port}: give a port from 0 to 65535 (0 = any free one)")
    return serve(
        cli_dsn(args.dsn),
        graph=args.graph,
        host=args.host,
        port=args.port,
        open_browser=not args.no_browser,
        window=args.window,
    )


def register(sub: Any) -> None:
    """Add ``view`` to the ``cwstore`` parser."""
    p = sub.add_parser("view", help="browse the graphs' history in a local, read-only web page")
    p.add_argument("--graph", help="open this graph first (default: the list of graphs)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = any)"
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--no-browser", action="store_true", help="print the address, open nothing")
    p.add_argument(
        "--window",
        type=int,
        default=300,
        help="nodes drawn around the selected point (default 300, at most 2000)",
    )
    add_dsn(p)
    p.set_defaults(func=cmd_view)
