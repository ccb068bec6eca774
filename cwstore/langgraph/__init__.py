"""LangGraph checkpointers on cwstore (the ``langgraph`` extra).

Each LangGraph thread (and checkpoint namespace) is a cwstore graph: messages are
nodes written once, channel values keyed resource nodes, a checkpoint a small node
pointing at what it holds (docs/langgraph.md). :class:`AsyncCwstoreSaver` runs on an
:class:`~cwstore.AsyncStore`, :class:`CwstoreSaver` on a :class:`~cwstore.Store`.
:func:`move_threads` moves threads written by LangGraph's PostgreSQL saver over.
"""

from ._move import move_thread, move_threads, postgres_thread_ids
from ._saver_async import AsyncCwstoreSaver
from ._saver_sync import CwstoreSaver

__all__ = [
    "AsyncCwstoreSaver",
    "CwstoreSaver",
    "move_thread",
    "move_threads",
    "postgres_thread_ids",
]
