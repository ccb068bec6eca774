"""``cwstore langgraph-move``: move LangGraph threads written by LangGraph's PostgreSQL
saver into cwstore (:func:`cwstore.langgraph.move_threads`), where they go on.

Registers without importing LangGraph (the optional extra ``langgraph``, and
``langgraph-checkpoint-postgres`` for the source); :func:`cmd_move` imports them.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import InputError
from ._common import EXIT_OK, add_dsn, err, open_store

__all__ = ["cmd_move", "register"]


def cmd_move(args: argparse.Namespace) -> int:
    """Copy the threads; one line per thread on stdout (thread id, checkpoints)."""
    try:
        from langgraph.checkpoint.postgres import PostgresSaver

        from ..langgraph import CwstoreSaver, move_threads, postgres_thread_ids
    except ImportError as exc:
        raise InputError(
            f"cwstore langgraph-move needs the 'langgraph' extra and "
            f"langgraph-checkpoint-postgres ({exc.name} is missing): "
            "pip install 'cwstore[langgraph]' langgraph-checkpoint-postgres"
        ) from None
    with (
        open_store(args, migrate=True) as store,
        PostgresSaver.from_conn_string(args.source) as source,
    ):
        threads: Any = args.thread or postgres_thread_ids(source)
        for thread, count in move_threads(source, CwstoreSaver(store), threads):
            print(f"{thread}\t{count}", flush=True)
        err(f"moved {len(threads)} thread{'s' if len(threads) != 1 else ''}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``langgraph-move`` to the ``cwstore`` parser."""
    p = sub.add_parser(
        "langgraph-move",
        help="copy LangGraph threads from LangGraph's PostgreSQL saver into cwstore",
    )
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DSN",
        help="the database LangGraph's PostgresSaver wrote (left as it is)",
    )
    p.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        help="a thread to move (repeat; default: every thread of the source)",
    )
    add_dsn(p)
    p.set_defaults(func=cmd_move)
