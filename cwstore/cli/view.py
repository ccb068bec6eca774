"""``cwstore view``: serve the read-only history page (:mod:`cwstore.view`).

The command registers without importing the server's libraries (Starlette and uvicorn,
the optional extra ``view``); :func:`cmd_view` imports them when it runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InputError
from ._common import add_dsn, cli_dsn

__all__ = ["cmd_view", "register"]

DEFAULT_PORT = 8765
DEFAULT_MAX_LIVE = 100
DEFAULT_STATEMENT_TIMEOUT = 30


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
    if not 1 <= args.max_live <= 10_000:
        raise InputError(f"--max-live {args.max_live}: give 1 to 10000 streams")
    if not 1 <= args.statement_timeout <= 86_400:
        raise InputError(f"--statement-timeout {args.statement_timeout}: give 1 to 86400 s")
    hosts = [h.strip() for h in args.allow_host for h in h.split(",") if h.strip()]
    return serve(
        cli_dsn(args.dsn),
        graph=args.graph,
        host=args.host,
        port=args.port,
        open_browser=not args.no_browser,
        window=args.window,
        allow_hosts=hosts,
        max_live=args.max_live,
        statement_timeout=args.statement_timeout,
        pooler=args.pooler,
        listen_dsn=args.listen_dsn,
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
    env_hosts = os.environ.get("CWSTORE_VIEW_ALLOW_HOSTS")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[env_hosts] if env_hosts else [],
        metavar="NAME",
        help="also serve requests whose Host header is NAME (repeat, or comma-separated; "
        "env CWSTORE_VIEW_ALLOW_HOSTS); IP addresses and localhost are always served, any "
        "other name is refused (403), so a DNS-rebinding page cannot read the graphs",
    )
    p.add_argument(
        "--max-live",
        type=int,
        default=int(os.environ.get("CWSTORE_VIEW_MAX_LIVE") or DEFAULT_MAX_LIVE),
        help=f"most live streams (pages following a graph) at once; more get 503 "
        f"(default {DEFAULT_MAX_LIVE}; env CWSTORE_VIEW_MAX_LIVE)",
    )
    p.add_argument(
        "--statement-timeout",
        type=int,
        default=int(os.environ.get("CWSTORE_VIEW_STATEMENT_TIMEOUT") or DEFAULT_STATEMENT_TIMEOUT),
        metavar="SECONDS",
        help=f"longest a read may run; it then answers 503 (default "
        f"{DEFAULT_STATEMENT_TIMEOUT}; env CWSTORE_VIEW_STATEMENT_TIMEOUT)",
    )
    add_dsn(p)
    p.set_defaults(func=cmd_view)
