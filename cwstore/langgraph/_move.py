"""Moving LangGraph threads from another checkpointer (LangGraph's PostgreSQL saver,
``langgraph-checkpoint-postgres``) into a :class:`~cwstore.langgraph.CwstoreSaver`, so
they read the same and go on there.

Each thread is copied checkpoint by checkpoint, every namespace, oldest first: values,
metadata, parent ids and pending writes as the source gives them back. Channel
versions become integers (the source's ``"<number>.<random>"`` strings keep their
number), the versions a cwstore saver makes next: LangGraph compares versions, so a
thread cannot mix the two. The source is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from cwstore import InputError, named_queries

from ._mapping import checked_text
from ._saver_sync import CwstoreSaver

__all__ = ["move_threads", "postgres_thread_ids"]

_Q = named_queries("cwstore.langgraph")


def _version(value: Any) -> Any:
    """A channel version as an integer: LangGraph's PostgreSQL saver writes
    ``f"{n:032}.{random}"``; an integer (or anything else) is kept."""
    if isinstance(value, str):
        head = value.split(".", 1)[0]
        if head.isdigit():
            return int(head)
        raise InputError(f"a channel version cwstore cannot continue: {value!r}")
    return value


def _versions(versions: Mapping[str, Any]) -> dict[str, Any]:
    return {channel: _version(v) for channel, v in versions.items()}


def _checkpoint(tup: CheckpointTuple) -> Any:
    checkpoint: Any = dict(tup.checkpoint)
    checkpoint["channel_versions"] = _versions(checkpoint.get("channel_versions", {}))
    checkpoint["versions_seen"] = {
        node: _versions(seen) for node, seen in checkpoint.get("versions_seen", {}).items()
    }
    return checkpoint


def _ns(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"].get("checkpoint_ns", ""))


def move_thread(source: BaseCheckpointSaver[Any], target: CwstoreSaver, thread_id: str) -> int:
    """Copy one thread (every namespace) from ``source`` to ``target``; the number of
    checkpoints copied. :class:`~cwstore.InputError` when ``target`` already holds the
    thread (delete it there first) or a version cannot be made an integer."""
    thread = checked_text("thread_id", thread_id)
    everywhere: RunnableConfig = {"configurable": {"thread_id": thread}}
    if next(iter(target.list(everywhere, limit=1)), None) is not None:
        raise InputError(f"thread {thread!r} is already in cwstore: delete it there first")
    found = sorted(source.list(everywhere), key=lambda t: (t.checkpoint["id"], _ns(t)))
    versions: dict[tuple[str, str], dict[str, Any]] = {}
    for tup in found:
        ns = _ns(tup)
        checkpoint = _checkpoint(tup)
        parent = None if tup.parent_config is None else tup.parent_config["configurable"]
        parent_id = None if parent is None else parent.get("checkpoint_id")
        before = versions.get((ns, parent_id or ""), {})
        changed = {c: v for c, v in checkpoint["channel_versions"].items() if before.get(c) != v}
        config: RunnableConfig = {
            "configurable": {"thread_id": thread, "checkpoint_ns": ns}
            | ({} if parent_id is None else {"checkpoint_id": parent_id})
        }
        stored = target.put(config, checkpoint, tup.metadata, changed)
        versions[ns, checkpoint["id"]] = checkpoint["channel_versions"]
        for task, writes in groupby(tup.pending_writes or [], key=lambda w: w[0]):
            target.put_writes(stored, [(channel, value) for _, channel, value in writes], task)
    return len(found)


def move_threads(
    source: BaseCheckpointSaver[Any], target: CwstoreSaver, thread_ids: Iterable[str]
) -> list[tuple[str, int]]:
    """Copy the threads from ``source`` (LangGraph's PostgreSQL saver, or any saver
    whose ``list`` without ``checkpoint_ns`` gives every namespace) to ``target``, one
    after another (see :func:`move_thread`); each thread with its number of
    checkpoints."""
    if isinstance(thread_ids, str):
        raise InputError("thread_ids must be a sequence of thread ids, not a string")
    return [(str(t), move_thread(source, target, t)) for t in thread_ids]


def postgres_thread_ids(source: Any) -> Sequence[str]:
    """Every thread id a LangGraph PostgreSQL saver (``PostgresSaver``) holds."""
    with source._cursor() as cur:
        cur.execute(_Q["postgres_threads"])
        return [str(row["thread_id"]) for row in cur.fetchall()]
