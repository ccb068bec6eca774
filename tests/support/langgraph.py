"""LangGraph threads written through a saver as a LangGraph loop writes them."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6


def thread_config(thread: str) -> Any:
    """The config of a thread's root namespace, no checkpoint named."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def put_messages(
    saver: BaseCheckpointSaver[Any], config: Any, messages: list[BaseMessage], version: int
) -> Any:
    """Store a checkpoint after ``config`` whose ``messages`` channel holds ``messages``
    at ``version``; its config."""
    checkpoint: Any = {
        **empty_checkpoint(),
        "id": str(uuid6(clock_seq=-1)),
        "channel_values": {"messages": messages},
        "channel_versions": {"messages": version},
    }
    return saver.put(config, checkpoint, {"source": "loop", "step": version}, {"messages": version})
