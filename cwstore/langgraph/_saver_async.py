"""The LangGraph checkpointer interface (langgraph-checkpoint 4.x) on a cwstore store
(:class:`~cwstore.AsyncStore`).

The mapping (which nodes a put writes, how branches are kept apart) is pure and lives
in :mod:`cwstore.langgraph._mapping`; this module only reads and appends. Writes go
through the store's public :meth:`~cwstore.AsyncStore.append` (each namespace's graph
in the thread's retention group, named as the thread's root graph, so retention keeps
or erases a thread whole) and :meth:`~cwstore.AsyncStore.erase`; reads are the named queries of
``cwstore/langgraph/queries.sql`` over cwstore's documented tables.

The saver is written once: ``tools/async_to_sync.py`` generates
``cwstore/langgraph/_saver_sync.py`` from ``cwstore/langgraph/_saver_async.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, LiteralString, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from cwstore import (
    AsyncConnection,
    AsyncStore,
    ChainConflictError,
    DatabaseError,
    UnknownGraphError,
    compute_id,
    connect,
    named_queries,
)

from ._mapping import (
    CP_KIND,
    CheckpointState,
    Loaded,
    MessageMaker,
    PutPlan,
    Stored,
    checkpoint_key,
    decode_value,
    encode_value,
    fold_writes,
    graph_name,
    load_checkpoint,
    message_makers,
    missing_runs,
    read_checkpoints,
    thread_prefix,
    write_index,
    writes_key,
)
from ._memo import MESSAGE_BYTES, GraphMemo, Memo

__all__ = ["AsyncCwstoreSaver"]

_Q = named_queries("cwstore.langgraph")
_RETRIES = 8
_LIST_PAGE = 16
"""Checkpoints read by one query of a listing."""

# The sync saver's method ``list`` hides the builtin inside the class body, so the
# class's annotations use these names.
_Names = list[str]
_LoadedList = list[Loaded]


def _q(name: str) -> LiteralString:
    return _Q[name]


def _group_if_new(memo: GraphMemo, group: str) -> str | None:
    """The thread's retention group for an append that may create the graph: only when
    the saver knows of nothing in the graph (no checkpoint written or read, no key with
    a version): a graph's group is set when it is created, and naming it costs the
    append a transaction of its own."""
    if memo.states or any(head is not None for head in memo.heads.values()):
        return None
    return group


async def _graph_id(conn: AsyncConnection, graph: str) -> int | None:
    """The key of the graph named ``graph`` (``None``: no such graph), which every other
    query of the graph is given: on Citus that keeps each on the graph's worker."""
    rows = await conn.fetch(_q("graph"), graph)
    return int(rows[0]["graph_id"]) if rows else None


def _ids(config: RunnableConfig) -> tuple[str, str, str | None]:
    conf = config["configurable"]
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), get_checkpoint_id(config)


def _tuple(serde: SerializerProtocol, thread_id: str, ns: str, loaded: Loaded) -> CheckpointTuple:
    p = loaded.payload
    checkpoint: Any = decode_value(serde, p["checkpoint"])
    checkpoint.update(id=p["checkpoint_id"], ts=p["ts"], channel_values=loaded.channel_values)
    parent = p["parent_checkpoint_id"]
    writes = [
        (task, channel, decode_value(serde, value))
        for _path, task, channel, _idx, value in fold_writes(loaded.write_batches)
    ]
    return CheckpointTuple(
        config={
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": p["checkpoint_id"],
            }
        },
        checkpoint=checkpoint,
        metadata=decode_value(serde, p["metadata"]),
        parent_config=None
        if parent is None
        else {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}
        },
        pending_writes=writes,
    )


class AsyncCwstoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer keeping each thread as a cwstore graph.

    Parameters
    ----------
    store:
        An open :class:`~cwstore.AsyncStore`; the saver does not close it (use
        :meth:`from_dsn` for a saver that owns its store).
    serde:
        LangGraph's serializer for values JSON cannot hold exactly (default: its
        ``JsonPlusSerializer``).
    message_cache_bytes:
        About how much memory the messages the saver wrote or read may take (32 MiB by
        default; 0: none are kept), so that reading a checkpoint fetches only the
        messages it has not seen; a thread it deletes, it forgets.

    Errors are cwstore's (:class:`cwstore.Error`), e.g. :class:`cwstore.DatabaseError`
    when the server cannot be reached.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        serde: SerializerProtocol | None = None,
        message_cache_bytes: int = MESSAGE_BYTES,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self._memo = Memo(message_cache_bytes)

    @classmethod
    @asynccontextmanager
    async def from_dsn(cls, dsn: str, *, setup: bool = False) -> AsyncIterator[Self]:
        """A saver on its own store, closed on leaving the block; ``setup=True`` brings
        the schema up to date first (what ``cwstore init`` does)."""
        store = await connect(dsn, migrate_schema=setup)
        try:
            yield cls(store)
        finally:
            await store.close()

    async def setup(self) -> None:
        """Create or upgrade cwstore's schema (what ``cwstore init`` does; idempotent)."""
        await self.store.migrate_schema()

    # --- reading ------------------------------------------------------------------------

    async def _graph_key(self, conn: AsyncConnection, graph: str) -> int | None:
        """The key of the graph named ``graph`` as this saver remembers it, else looked
        up (see :func:`_graph_id`; ``None``: no such graph). Every query given a key
        also checks the name: a remembered key the name has left (its graph erased
        since) reads nothing, and the caller looks the key up again."""
        key = self._memo.key(graph)
        if key is None:
            key = await _graph_id(conn, graph)
            self._memo.keep_key(graph, key)
        return key

    async def _checkpoints(
        self,
        conn: AsyncConnection,
        graph: str,
        checkpoint_id: str | None,
        *,
        before: str | None = None,
        wanted: str | None = None,
        limit: int | None = None,
        below: int | None = None,
    ) -> _LoadedList:
        """The checkpoint ``checkpoint_id`` names in the graph ``graph``, or (``None``)
        the graph's checkpoints newest first, stored before sequence ``below``, before
        the checkpoint id ``before``, whose metadata holds ``wanted`` (JSON text), at
        most ``limit``; one query, values included, and one for the messages this saver
        has not seen (again, and a look-up of the graph's key, when a remembered key
        reads nothing or the graph was erased between the two)."""
        for _ in range(3):
            remembered = self._memo.key(graph) is not None
            graph_id = await self._graph_key(conn, graph)
            if graph_id is None:
                return []
            rows = await conn.fetch(
                _q("checkpoint_rows"),
                graph_id,
                graph,
                writes_key(""),
                None if checkpoint_id is None else checkpoint_key(checkpoint_id),
                CP_KIND,
                below,
                before,
                wanted,
                limit,
            )
            if not rows:
                if not remembered:
                    return []
                self._memo.keep_key(graph, None)
                continue
            stored = read_checkpoints(rows)
            messages = await self._messages(conn, graph, graph_id, stored)
            if messages is not None:
                return [load_checkpoint(self.serde, item, messages) for item in stored]
            self._memo.forget(graph)
        raise DatabaseError(f"{graph}: erased and written again while read, three times")

    async def _messages(
        self, conn: AsyncConnection, graph: str, graph_id: int, stored: Sequence[Stored]
    ) -> Mapping[str, MessageMaker] | None:
        """The messages of the checkpoints: those remembered, the others read (and
        remembered); ``None`` when one is gone (the graph erased)."""
        known = self._memo.messages(graph)
        if all(i in known for item in stored for i in item.message_ids):
            return known
        keys, firsts, counts = missing_runs(stored, known)
        rows = await conn.fetch(_q("payloads"), graph_id, graph, keys, firsts, counts)
        found = {str(r["id"]): MessageMaker(self.serde, str(r["payload_text"])) for r in rows}
        wanted = {i for item in stored for i in item.message_ids}
        if any(i not in known and i not in found for i in wanted):
            return None
        self._memo.keep_messages(graph, found)
        return {i: found[i] if i in found else known[i] for i in wanted}

    async def _load(
        self, conn: AsyncConnection, graph: str, checkpoint_id: str | None
    ) -> Loaded | None:
        found = await self._checkpoints(conn, graph, checkpoint_id, limit=1)
        return found[0] if found else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest; ``None`` if none."""
        thread_id, ns, checkpoint_id = _ids(config)
        async with self.store.connection() as conn:
            loaded = await self._load(conn, graph_name(thread_id, ns), checkpoint_id)
        return None if loaded is None else _tuple(self.serde, thread_id, ns, loaded)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The checkpoints of a thread's namespace (of every thread when ``config`` is
        ``None``), newest first, whose metadata holds ``filter``, before the checkpoint
        ``before`` names, at most ``limit``."""
        before_id = None if before is None else get_checkpoint_id(before)
        wanted = None if not filter else json.dumps(filter)
        async with self.store.connection() as conn:
            if config is None:
                targets = [_split(str(r["name"])) for r in await conn.fetch(_q("all_graphs"))]
            else:
                thread_id, ns, _ = _ids(config)
                targets = [(thread_id, ns)]
            for thread_id, ns in targets:
                graph = graph_name(thread_id, ns)
                # A page of checkpoints at a time: a listing holds at most a page of
                # them (every message of each) however long the thread.
                below = None
                while limit is None or limit > 0:
                    page = _LIST_PAGE if limit is None else min(limit, _LIST_PAGE)
                    found = await self._checkpoints(
                        conn,
                        graph,
                        None,
                        before=before_id,
                        wanted=wanted,
                        limit=page,
                        below=below,
                    )
                    for loaded in found:
                        yield _tuple(self.serde, thread_id, ns, loaded)
                    if limit is not None:
                        limit -= len(found)
                    if len(found) < page:
                        break
                    below = found[-1].seq
                if limit is not None and limit <= 0:
                    return

    # --- writing ------------------------------------------------------------------------

    async def _heads(self, graph: str, keys: Sequence[str]) -> dict[str, tuple[str, int] | None]:
        found: dict[str, tuple[str, int] | None] = dict.fromkeys(keys)
        async with self.store.connection() as conn:
            graph_id = await self._graph_key(conn, graph)
            if graph_id is not None:
                for r in await conn.fetch(_q("heads"), graph_id, graph, list(keys)):
                    found[r["key"]] = (r["head_id"], int(r["version"]))
        return found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (one append: its new values and messages, then its node);
        returns the config that names it."""
        thread_id, ns, parent_id = _ids(config)
        graph = graph_name(thread_id, ns)
        md = get_serializable_checkpoint_metadata(config, metadata)
        for attempt in range(_RETRIES):
            memo = self._memo.graph(graph)
            parent = None if parent_id is None else memo.states.get(parent_id)
            if parent_id is not None and parent is None:
                async with self.store.connection() as conn:
                    loaded = await self._load(conn, graph, parent_id)
                parent = loaded.state if loaded else CheckpointState(None)
            plan = PutPlan(
                self.serde, checkpoint, md, new_versions, parent_id, parent or CheckpointState(None)
            )
            keys = plan.keys()
            unknown = [k for k in keys if k not in memo.heads]
            if unknown and (attempt or not _only(unknown, checkpoint_key(plan.checkpoint_id))):
                memo.heads.update(await self._heads(graph, unknown))
            plan.build(memo.heads)
            try:
                await self.store.append(
                    graph,
                    plan.nodes,
                    frontier=[plan.state.node_id or ""],
                    retention_group=_group_if_new(memo, thread_prefix(thread_id)),
                )
            except (ChainConflictError, UnknownGraphError):
                self._memo.forget(graph)
                continue
            memo.wrote(checkpoint["id"], plan.state, plan.written)
            self._memo.keep_messages(graph, message_makers(self.serde, plan.nodes))
            break
        else:
            raise ChainConflictError(graph=graph)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names; one node,
        whether or not that checkpoint is stored yet."""
        thread_id, ns, checkpoint_id = _ids(config)
        assert checkpoint_id is not None, "put_writes needs a checkpoint_id"
        graph = graph_name(thread_id, ns)
        payload = {
            "checkpoint_id": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "writes": [
                [write_index(channel, i), channel, encode_value(self.serde, value)]
                for i, (channel, value) in enumerate(writes)
            ],
        }
        await self._append_writes(graph, thread_prefix(thread_id), checkpoint_id, payload)

    async def _append_writes(
        self, graph: str, group: str, checkpoint_id: str, payload: Any
    ) -> None:
        key, cp = writes_key(checkpoint_id), checkpoint_key(checkpoint_id)
        for attempt in range(_RETRIES):
            memo = self._memo.graph(graph)
            unknown = [k for k in (key, cp) if k not in memo.heads]
            if unknown and (attempt or not _only(unknown, key)):
                memo.heads.update(await self._heads(graph, unknown))
            head, cp_head = memo.heads.get(key), memo.heads.get(cp)
            parents = sorted({h[0] for h in (head, cp_head) if h is not None})
            node_id = compute_id("resource", parents, payload, key)
            node = {
                "id": node_id,
                "kind": "resource",
                "parents": parents,
                "payload": payload,
                "resourceKey": key,
            }
            try:
                await self.store.append(graph, [node], retention_group=_group_if_new(memo, group))
            except (ChainConflictError, UnknownGraphError):
                self._memo.forget(graph)
                continue
            memo.heads[key] = (node_id, head[1] + 1 if head else 1)
            return
        raise ChainConflictError(graph=graph, key=key)

    # --- deleting, copying, pruning ----------------------------------------------------

    async def _thread_graphs(self, thread_id: str) -> _Names:
        async with self.store.connection() as conn:
            rows = await conn.fetch(_q("thread_graphs"), thread_prefix(thread_id))
        return [str(r["name"]) for r in rows]

    async def _erase(self, graph: str, reason: str) -> None:
        self._memo.forget(graph)
        with suppress(UnknownGraphError):
            await self.store.erase(graph, reason=reason)
        self._memo.forget(graph)

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase every graph of the thread (every namespace): cwstore's erasure, not
        hidden rows (docs/erasure.md)."""
        for graph in await self._thread_graphs(thread_id):
            await self._erase(graph, "langgraph delete_thread")

    async def _read_all(self, graph: str) -> _LoadedList:
        """Every checkpoint of a graph, oldest first."""
        async with self.store.connection() as conn:
            return list(reversed(await self._checkpoints(conn, graph, None)))

    async def _write_back(self, thread_id: str, ns: str, kept: Sequence[Loaded]) -> None:
        """Store checkpoints read by :meth:`_read_all` (their values, metadata, parents
        and pending writes) in the thread's namespace ``ns``, oldest first."""
        graph = graph_name(thread_id, ns)
        for item in kept:
            tup = _tuple(self.serde, thread_id, ns, item)
            parent = item.payload["parent_checkpoint_id"]
            conf: RunnableConfig = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns}
                | ({} if parent is None else {"checkpoint_id": parent})
            }
            versions = tup.checkpoint["channel_versions"]
            await self.aput(conf, tup.checkpoint, tup.metadata, versions)
            for batch in item.write_batches:
                await self._append_writes(
                    graph, thread_prefix(thread_id), tup.checkpoint["id"], batch
                )

    async def _rewrite(self, graph: str, keep: Sequence[Loaded], reason: str) -> None:
        thread_id, ns = _split(graph)
        await self._erase(graph, reason)
        await self._write_back(thread_id, ns, keep)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of a thread (every namespace) to
        another thread, in the same order."""
        for graph in await self._thread_graphs(source_thread_id):
            _, ns = _split(graph)
            await self._write_back(target_thread_id, ns, await self._read_all(graph))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint (with its writes);
        ``delete``: erase the threads. What goes is erased: the graph is erased and
        what is kept is written to it again."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        for thread_id in thread_ids:
            for graph in await self._thread_graphs(thread_id):
                if strategy == "delete":
                    await self._erase(graph, "langgraph prune")
                    continue
                loaded = await self._read_all(graph)
                if len(loaded) > 1:
                    await self._rewrite(graph, loaded[-1:], "langgraph prune")

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints (and their writes) whose metadata ``run_id`` is one of
        ``run_ids``: each graph holding one is erased and its other checkpoints are
        written to it again."""
        if not run_ids:
            return
        runs = {str(r) for r in run_ids}
        async with self.store.connection() as conn:
            graphs = [
                str(r["name"]) for r in await conn.fetch(_q("run_graphs"), sorted(runs), CP_KIND)
            ]
        for graph in graphs:
            loaded = await self._read_all(graph)
            keep = [
                item
                for item in loaded
                if decode_value(self.serde, item.payload["metadata"]).get("run_id") not in runs
            ]
            await self._rewrite(graph, keep, "langgraph delete_for_runs")


def _only(unknown: Sequence[str], key: str) -> bool:
    """Whether the only unknown head is ``key``, a key new to the graph unless another
    process wrote it (a new checkpoint's, the first pending writes of a checkpoint this
    saver stored): the first attempt assumes it has none and does not ask (a wrong guess
    is a chain conflict, and the retry asks)."""
    return list(unknown) == [key]


def _split(graph: str) -> tuple[str, str]:
    """The thread id and namespace of a LangGraph graph's name."""
    rest = graph.removeprefix("langgraph:")
    thread, _, ns = rest.partition(":")
    return thread.replace("%3A", ":").replace("%25", "%"), ns
