"""LangGraph threads written through a saver as a LangGraph loop writes them."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
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


class Cipher:
    """A stream cipher good enough to show what is stored (SHA-256 in counter mode,
    XOR): the test needs no cryptography package."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def _stream(self, n: int) -> bytes:
        blocks = (
            hashlib.sha256(self.key + i.to_bytes(8, "big")).digest() for i in range(n // 32 + 1)
        )
        return b"".join(blocks)[:n]

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "toy", bytes(
            a ^ b for a, b in zip(plaintext, self._stream(len(plaintext)), strict=True)
        )

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "toy"
        return self.encrypt(ciphertext)[1]


def rows_holding(dsn: str, text: str) -> dict[str, int]:
    """How many rows of each cwstore table hold ``text`` anywhere (what a dump shows)."""
    found = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        tables = c.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'cwstore'"
        ).fetchall()
        for (table,) in tables:
            n = c.execute(
                f"SELECT count(*) FROM cwstore.{table} t WHERE t::text LIKE %s",
                (f"%{text}%",),
            ).fetchone()
            if n and n[0]:
                found[str(table)] = int(n[0])
    return found
