"""The LangGraph side of the agent-session comparison (row 5 of the table).

LangGraph keeps an agent's state as checkpoints: after every step the graph's channel
values are saved, and a ``MessagesState``'s ``messages`` channel (an ``add_messages``
reducer over a list) is stored whole, as one serialized blob per new channel version.
This module writes exactly that through the peer's own saver,
``langgraph.checkpoint.postgres.aio.AsyncPostgresSaver``, on one psycopg connection
opened with the settings its documentation asks for (``autocommit=True``,
``prepare_threshold=0``, ``row_factory=dict_row``), with its own ``setup()`` tables.

One ``aput`` per step, built with LangGraph's own ``empty_checkpoint`` and
``get_next_version``: the least a LangGraph agent writes to make a step durable (a real
``StateGraph`` run also saves an input checkpoint and each task's pending writes), so
this is a lower bound on LangGraph's cost, never an inflated one.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from _workload import Message

try:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    IMPORT_ERROR: str | None = None
except ImportError as exc:  # the row then says "not installed"
    IMPORT_ERROR = str(exc)

TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")


def to_langchain(system: str, msg: Message | None) -> Any:
    """The LangChain message for one workload message (``None``: the system prompt).

    Ids are set as ``add_messages`` sets them for messages that arrive without one.
    """
    mid = str(uuid.uuid4())
    if msg is None:
        return SystemMessage(content=system, id=mid)
    if msg.role == "user":
        return HumanMessage(content=msg.text, id=mid)
    if msg.role == "tool":
        return ToolMessage(content=msg.text, tool_call_id=msg.call_id, name=msg.tool, id=mid)
    calls = []
    if msg.tool is not None:
        calls = [{"name": msg.tool, "args": msg.args, "id": msg.call_id, "type": "tool_call"}]
    return AIMessage(content=msg.text, tool_calls=calls, id=mid)


class LangGraphSession:
    """One LangGraph thread whose ``messages`` channel grows every step."""

    def __init__(self, conn: Any, saver: Any, thread_id: str) -> None:
        self.conn = conn
        self.saver = saver
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
        }
        self.messages: list[Any] = []
        self.version: Any = None
        self.step = -1

    @classmethod
    async def open(cls, dsn: str, thread_id: str = "bench-thread") -> LangGraphSession:
        conn = await AsyncConnection.connect(
            dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = AsyncPostgresSaver(conn)
        await saver.setup()
        return cls(conn, saver, thread_id)

    async def close(self) -> None:
        await self.conn.close()

    async def put_step(self, new_messages: list[Any]) -> tuple[float, dict[str, Any]]:
        """Save the state after one step; returns (seconds, that checkpoint's config)."""
        self.messages = [*self.messages, *new_messages]
        self.step += 1
        self.version = self.saver.get_next_version(self.version, None)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": self.messages}
        checkpoint["channel_versions"] = {"messages": self.version}
        checkpoint["updated_channels"] = ["messages"]
        metadata = {"source": "loop", "step": self.step, "parents": {}}
        start = time.perf_counter()
        self.config = await self.saver.aput(
            self.config, checkpoint, metadata, {"messages": self.version}
        )
        return time.perf_counter() - start, self.config

    async def read(self, config: dict[str, Any]) -> tuple[float, int]:
        """Load the state as of an earlier checkpoint; returns (seconds, messages)."""
        start = time.perf_counter()
        found = await self.saver.aget_tuple(config)
        elapsed = time.perf_counter() - start
        if found is None:
            raise RuntimeError(f"LangGraph lost checkpoint {config}")
        return elapsed, len(found.checkpoint["channel_values"]["messages"])

    async def stored_bytes(self) -> int:
        """pg_total_relation_size (heap, TOAST and indexes) over the saver's tables."""
        async with self.conn.cursor() as cur:
            await cur.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS n "
                "FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                "WHERE s.nspname = 'public' AND c.relkind = 'r' AND c.relname = ANY(%s)",
                (list(TABLES),),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row else 0
