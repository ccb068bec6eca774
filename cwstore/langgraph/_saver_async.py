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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
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
    InputError,
    Row,
    UnknownGraphError,
    ValidationError,
    connect,
    named_queries,
    prepare_append,
)

from ._mapping import (
    CP_KIND,
    CheckpointState,
    Loaded,
    MessageMaker,
    PutPlan,
    Stored,
    checked_text,
    checkpoint_key,
    contains,
    decode_value,
    encode_big,
    fold_writes,
    graph_name,
    load_checkpoint,
    message_makers,
    missing_runs,
    read_checkpoints,
    thread_prefix,
    uses_delta_channel,
    write_index,
    writes_blobs,
    writes_key,
    writes_node,
)
from ._memo import MESSAGE_BYTES, GraphMemo, Memo
from ._parts import PARTS_PER_READ, Blob, join_parts, part_batches, part_bytes

__all__ = ["AsyncCwstoreSaver"]

_Q = named_queries("cwstore.langgraph")
_RETRIES = 8
_STAGED = "langgraph~"
"""The prefix of a graph's staged rewrite: what a prune keeps of the graph, written
before the graph is erased and erased in the transaction that writes it back."""
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


async def _graph_id(conn: AsyncConnection, graph: str) -> tuple[int | None, bool]:
    """The key of the graph named ``graph`` (``None``: no such graph), which every other
    query of the graph is given (on Citus that keeps each on the graph's worker), and
    whether its staged rewrite exists."""
    (row,) = await conn.fetch(_q("graph"), graph, _STAGED + graph)
    key = row["graph_id"]
    return (None if key is None else int(key)), bool(row["staged"])


def _ids(config: RunnableConfig) -> tuple[str, str, str | None]:
    """The thread id, namespace and checkpoint id (if any) the config names;
    :class:`~cwstore.InputError` for one PostgreSQL text cannot hold."""
    conf = config["configurable"]
    checkpoint_id = get_checkpoint_id(config)
    return (
        checked_text("thread_id", conf["thread_id"]),
        checked_text("checkpoint_ns", conf.get("checkpoint_ns", "")),
        None if checkpoint_id is None else checked_text("checkpoint_id", checkpoint_id),
    )


def _tuple(serde: SerializerProtocol, thread_id: str, ns: str, loaded: Loaded) -> CheckpointTuple:
    p = loaded.payload
    checkpoint: Any = decode_value(serde, p["checkpoint"])
    checkpoint.update(id=p["checkpoint_id"], ts=p["ts"], channel_values=loaded.channel_values)
    parent = p["parent_checkpoint_id"]
    writes = [
        (task, channel, decode_value(serde, value, loaded.datas))
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
        About how much memory what the saver remembers may take (32 MiB by default):
        the messages it wrote or read, so that reading a checkpoint fetches only the
        messages it has not seen, and the states of the last checkpoints it stored in
        each thread, so that a put reads nothing back. With 0 none are kept (each put
        reads its parent checkpoint). A thread it deletes, it forgets.

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
        since) reads nothing, and the caller looks the key up again. A graph missing
        while its staged rewrite exists (a prune stopped between erasing the graph and
        writing it again) is written again first."""
        key = self._memo.key(graph)
        if key is None:
            key, staged = await _graph_id(conn, graph)
            if key is None and staged:
                await self._finish_staged(graph)
                key, _ = await _graph_id(conn, graph)
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
            datas = await self._parts(conn, graph, graph_id, stored)
            if messages is not None and datas is not None:
                return [load_checkpoint(self.serde, item, messages, datas) for item in stored]
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

    async def _parts(
        self, conn: AsyncConnection, graph: str, graph_id: int, stored: Sequence[Stored]
    ) -> dict[str, bytes] | None:
        """The bytes of the values the checkpoints hold in parts, by parts key, read a
        few parts a query; ``None`` when one is gone (the graph erased)."""
        out: dict[str, bytes] = {}
        for item in stored:
            for ref in item.part_refs():
                key, count = ref[0], ref[1]
                if key in out:
                    continue
                chunks: list[bytes] = []
                for first in range(1, count + 1, PARTS_PER_READ):
                    last = min(first + PARTS_PER_READ - 1, count)
                    rows = await conn.fetch(_q("parts"), graph_id, graph, key, first, last)
                    if len(rows) != last - first + 1:
                        return None
                    chunks += [part_bytes(str(r["payload_text"])) for r in rows]
                out[key] = join_parts(ref, chunks)
        return out

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
        """The checkpoints of a thread, as LangGraph's PostgreSQL saver lists them:
        of the namespace ``checkpoint_ns`` names, or of every namespace of the thread
        when the config has no ``checkpoint_ns`` (merged newest first by checkpoint
        id), only the one its ``checkpoint_id`` names if it names one; whose metadata
        contains ``filter`` (as ``jsonb @>`` decides), before the checkpoint ``before``
        names, at most ``limit``. With ``config=None``, every thread's, one namespace
        after another (each newest first), not merged across threads."""
        before_id = None if before is None else get_checkpoint_id(before)
        if limit is not None and limit <= 0:
            return
        async with self.store.connection() as conn:
            if config is None:
                rows = await conn.fetch(_q("all_graphs"), _STAGED)
                for thread_id, ns in _graphs_of(rows):
                    async for item in self._list_graph(
                        conn, thread_id, ns, None, before_id, filter
                    ):
                        yield item
                        if limit is not None:
                            limit -= 1
                            if limit <= 0:
                                return
                return
            thread_id, ns, checkpoint_id = _ids(config)
            if "checkpoint_ns" in config["configurable"]:
                namespaces = [ns]
            else:
                rows = await conn.fetch(_q("thread_lengths"), [thread_prefix(thread_id)], _STAGED)
                namespaces = [ns for _, ns in _graphs_of(rows)]
            heads: list[tuple[CheckpointTuple, AsyncIterator[CheckpointTuple]]] = []
            for ns in namespaces:
                it = self._list_graph(conn, thread_id, ns, checkpoint_id, before_id, filter)
                first = await anext(it, None)
                if first is not None:
                    heads.append((first, it))
            while heads:
                at = max(range(len(heads)), key=lambda i: heads[i][0].checkpoint["id"])
                item, it = heads[at]
                yield item
                if limit is not None:
                    limit -= 1
                    if limit <= 0:
                        return
                following = await anext(it, None)
                if following is None:
                    del heads[at]
                else:
                    heads[at] = (following, it)

    async def _list_graph(
        self,
        conn: AsyncConnection,
        thread_id: str,
        ns: str,
        checkpoint_id: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The checkpoints of one namespace for :meth:`alist`, newest first: a page of
        them read at a time (a listing holds at most a page, every message of each,
        however long the thread)."""
        graph = graph_name(thread_id, ns)
        wanted = None if not filter else json.dumps(filter)
        below = None
        while True:
            found = await self._checkpoints(
                conn,
                graph,
                checkpoint_id,
                before=before_id,
                wanted=wanted,
                limit=_LIST_PAGE,
                below=below,
            )
            for loaded in found:
                item = _tuple(self.serde, thread_id, ns, loaded)
                if before_id is not None and item.checkpoint["id"] >= before_id:
                    continue
                if filter and not contains(item.metadata, filter):
                    continue
                yield item
            if checkpoint_id is not None or len(found) < _LIST_PAGE:
                return
            below = found[-1].seq

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
        checked_text("checkpoint id", checkpoint["id"])
        graph = graph_name(thread_id, ns)
        md = get_serializable_checkpoint_metadata(config, metadata)
        for attempt in range(_RETRIES):
            memo = self._memo.graph(graph)
            parent = None if parent_id is None else memo.state(parent_id)
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
                await self._append(
                    graph,
                    plan.blobs,
                    plan.nodes,
                    [plan.state.node_id or ""],
                    _group_if_new(memo, thread_prefix(thread_id)),
                )
            except (ChainConflictError, UnknownGraphError):
                self._memo.forget(graph)
                continue
            except ValidationError as exc:
                if not _stale(exc):
                    raise
                self._memo.forget(graph)
                continue
            self._memo.wrote(graph, checkpoint["id"], plan.state, plan.written)
            self._memo.keep_messages(graph, message_makers(self.serde, plan.texts))
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
        task, path = checked_text("task_id", task_id), checked_text("task_path", task_path)
        blobs: list[Blob] = []
        encoded = []
        for i, (channel, value) in enumerate(writes):
            members, blob = encode_big(self.serde, value)
            if blob is not None:
                blobs.append(blob)
            encoded.append([write_index(channel, i), channel, members])
        payload = {"checkpoint_id": checkpoint_id, "task": task, "path": path, "writes": encoded}
        await self._append_writes(graph, thread_prefix(thread_id), checkpoint_id, payload, blobs)

    async def _append(
        self,
        graph: str,
        blobs: Sequence[Blob],
        nodes: Sequence[Any],
        frontier: Sequence[str] | None,
        group: str | None,
    ) -> None:
        """Append ``nodes`` (declaring ``frontier``) after the parts of ``blobs``: one
        append when there are none, else one transaction of a few parts an append (so
        neither the client nor the backend holds more than a few parts' worth at once),
        all or nothing."""
        if not blobs:
            await self.store.append(graph, nodes, frontier=frontier, retention_group=group)
            return
        async with self.store.transaction() as conn:
            if group is not None:
                await conn.execute(_q("set_retention_group"), group)
            await _append_in(conn, graph, blobs, nodes, frontier)

    async def _append_writes(
        self,
        graph: str,
        group: str,
        checkpoint_id: str,
        payload: Any,
        blobs: Sequence[Blob] = (),
    ) -> None:
        key, cp = writes_key(checkpoint_id), checkpoint_key(checkpoint_id)
        for attempt in range(_RETRIES):
            memo = self._memo.graph(graph)
            unknown = [k for k in (key, cp) if k not in memo.heads]
            if unknown and (attempt or not _only(unknown, key)):
                memo.heads.update(await self._heads(graph, unknown))
            node, head = writes_node(checkpoint_id, payload, memo.heads, blobs)
            try:
                await self._append(graph, blobs, [node], None, _group_if_new(memo, group))
            except (ChainConflictError, UnknownGraphError):
                self._memo.forget(graph)
                continue
            except ValidationError as exc:
                if not _stale(exc):
                    raise
                self._memo.forget(graph)
                continue
            memo.heads[key] = head
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
        """Erase every graph of the thread (every namespace) in one transaction:
        cwstore's erasure, not hidden rows (docs/erasure.md)."""
        await self._erase_threads([checked_text("thread_id", thread_id)], "langgraph delete_thread")

    async def _read_all(self, conn: AsyncConnection, graph: str) -> _LoadedList:
        """Every checkpoint of a graph, oldest first."""
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
                payload, blobs = writes_blobs(batch, item.datas)
                await self._append_writes(
                    graph, thread_prefix(thread_id), tup.checkpoint["id"], payload, blobs
                )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of a thread (every namespace) to
        another thread, in the same order."""
        source = checked_text("source_thread_id", source_thread_id)
        target = checked_text("target_thread_id", target_thread_id)
        for graph in await self._thread_graphs(source):
            _, ns = _split(graph)
            async with self.store.connection() as conn:
                loaded = await self._read_all(conn, graph)
            await self._write_back(target, ns, loaded)

    async def _rewrite_threads(
        self, thread_ids: Sequence[str], decide: _Decide, reason: str
    ) -> None:
        """Rewrite each thread: its graphs are read (every checkpoint of every
        namespace, oldest first, on one snapshot), ``decide`` says per graph what to
        keep (absent: leave the graph as it is; a list, maybe empty: erase the graph
        and write those checkpoints to it again, a parent not kept dropped), and each
        graph is replaced by :meth:`_replace`. A graph written meanwhile (its erasure
        finds more nodes than were read) makes the thread read again."""
        for thread_id in thread_ids:
            root = thread_prefix(thread_id)
            for _ in range(_RETRIES):
                async with self.store.snapshot() as conn:
                    rows = await conn.fetch(_q("thread_lengths"), [root], _STAGED)
                    lengths = {str(r["name"]): int(r["length"]) for r in rows}
                    live = [g for g in lengths if not g.startswith(_STAGED)]
                    for graph in live:
                        self._memo.forget(graph)
                    loaded = {g: await self._read_all(conn, g) for g in live}
                left = [g.removeprefix(_STAGED) for g in lengths if g.startswith(_STAGED)]
                if left:  # a rewrite stopped half-way: finish (or drop) it first
                    for graph in left:
                        await self._finish_staged(graph)
                    continue
                try:
                    for graph, keep in decide(loaded).items():
                        await self._replace(graph, lengths[graph], keep, reason)
                except _Moved:
                    continue
                break
            else:
                raise ChainConflictError(graph=root)

    async def _replace(self, graph: str, length: int, keep: Sequence[Loaded], reason: str) -> None:
        """Erase the graph (of ``length`` nodes when read) and write the checkpoints
        ``keep`` to it again, so that no failure loses them: they are written to the
        graph's staged rewrite first, then the graph is erased, then one transaction
        writes them back and erases the staged rewrite (which a reader finding the graph
        missing finishes, see :meth:`_graph_key`). :class:`_Moved` when the graph
        changed since it was read (nothing erased)."""
        thread_id, ns = _split(graph)
        batches = rewrite_batches(self.serde, thread_id, ns, keep)
        staged = _STAGED + graph
        try:
            if batches:
                async with self.store.transaction() as conn:
                    await conn.execute(_q("set_retention_group"), thread_prefix(thread_id))
                    for blobs, nodes, frontier in batches:
                        await _append_in(conn, staged, blobs, nodes, frontier)
            try:
                async with self.store.transaction() as conn:
                    erased = await conn.fetchval(_q("erase_graph"), graph, reason)
                    if erased != length:
                        raise _Moved
            except (_Moved, UnknownGraphError):
                if batches:
                    await self._erase(staged, reason)
                raise _Moved from None
            if batches:
                await self._write_staged(graph, batches, reason)
        finally:
            self._memo.forget(graph)
            self._memo.forget(staged)

    async def _write_staged(self, graph: str, batches: _Batches, reason: str) -> None:
        """Write the batches of the graph's staged rewrite to the graph and erase the
        staged rewrite, in one transaction."""
        thread_id, _ = _split(graph)
        try:
            async with self.store.transaction() as conn:
                await conn.execute(_q("set_retention_group"), thread_prefix(thread_id))
                for blobs, nodes, frontier in batches:
                    await _append_in(conn, graph, blobs, nodes, frontier)
                await conn.fetchval(_q("erase_graph"), _STAGED + graph, reason)
        except UnknownGraphError:  # another reader finished it first
            pass
        self._memo.forget(graph)
        self._memo.forget(_STAGED + graph)

    async def _finish_staged(self, graph: str) -> None:
        """Finish the graph's staged rewrite: write it to the graph when the graph is
        missing (erased by the rewrite), else only erase it (the rewrite stopped before
        erasing the graph)."""
        staged = _STAGED + graph
        async with self.store.snapshot() as conn:
            exists, _ = await _graph_id(conn, graph)
            loaded = [] if exists is not None else await self._read_all(conn, staged)
        if exists is not None:
            await self._erase(staged, "langgraph prune: unfinished rewrite")
            return
        thread_id, ns = _split(graph)
        batches = rewrite_batches(self.serde, thread_id, ns, loaded)
        await self._write_staged(graph, batches, "langgraph prune: rewrite finished")

    async def _refuse_delta_threads(self, thread_ids: Sequence[str]) -> None:
        async with self.store.connection() as conn:
            rows = await conn.fetch(
                _q("thread_metadata"), [thread_prefix(t) for t in thread_ids], CP_KIND
            )
        delta = sorted(
            {
                _split(str(r["name"]))[0]
                for r in rows
                if uses_delta_channel(decode_value(self.serde, json.loads(r["metadata"])))
            }
        )
        if delta:
            raise NotImplementedError(
                "keep_latest can't prune threads that use a DeltaChannel: " + ", ".join(delta)
            )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads, as LangGraph's PostgreSQL saver does. ``delete``: erase
        them, every namespace, in one transaction. ``keep_latest``: keep each
        namespace's latest checkpoint with its pending writes (a kept checkpoint whose
        parent goes is left with no parent), and erase a subgraph call's namespace
        (``node:task``) with the root checkpoint its call started from; each thread in
        one transaction, the graph erased and what is kept written to it again.

        Raises :class:`cwstore.InputError` when ``thread_ids`` is a string,
        :class:`ValueError` for an unknown strategy, and :class:`NotImplementedError`
        (nothing pruned) when ``keep_latest`` is asked of a thread using a
        ``DeltaChannel``, whose latest value is rebuilt from older checkpoints."""
        if isinstance(thread_ids, str):
            raise InputError(
                f"prune: thread_ids must be a sequence of thread ids, not the string {thread_ids!r}"
            )
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        threads = [checked_text("thread_id", t) for t in thread_ids]
        if not threads:
            return
        if strategy == "delete":
            await self._erase_threads(threads, "langgraph prune")
            return
        await self._refuse_delta_threads(threads)
        await self._rewrite_threads(threads, self._keep_latest, "langgraph prune")

    async def _erase_threads(self, thread_ids: Sequence[str], reason: str) -> None:
        """Erase every graph of the threads (and staged rewrites) in one transaction."""
        names: _Names = []
        try:
            async with self.store.transaction() as conn:
                rows = await conn.fetch(
                    _q("thread_lengths"), [thread_prefix(t) for t in thread_ids], _STAGED
                )
                names = [str(r["name"]) for r in rows]
                for graph in names:
                    await conn.fetchval(_q("erase_graph"), graph, reason)
        finally:
            for graph in names:
                self._memo.forget(graph)

    def _keep_latest(self, loaded: Mapping[str, _LoadedList]) -> _Plan:
        """What ``keep_latest`` keeps of one thread's graphs (see :meth:`_rewrite_threads`)."""
        for items in loaded.values():
            for item in items:
                if uses_delta_channel(decode_value(self.serde, item.payload["metadata"])):
                    raise NotImplementedError(
                        "keep_latest can't prune threads that use a DeltaChannel"
                    )
        root = next((g for g in loaded if not _split(g)[1]), None)
        root_ids = {i.payload["checkpoint_id"] for i in loaded.get(root or "", [])}
        root_kept = {i.payload["checkpoint_id"] for i in loaded.get(root or "", [])[-1:]}
        plan: _Plan = {}
        for graph, items in loaded.items():
            if not items:
                continue
            latest = items[-1]
            _, ns = _split(graph)
            if ":" in ns:
                parents = decode_value(self.serde, latest.payload["metadata"]).get("parents")
                started = parents.get("") if isinstance(parents, dict) else None
                if started in root_ids and started not in root_kept:
                    plan[graph] = []
                    continue
            if len(items) > 1 or latest.payload["parent_checkpoint_id"] is not None:
                plan[graph] = [latest]
        return plan

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase the checkpoints (and their writes) whose metadata ``run_id`` is one of
        ``run_ids``: each thread holding one is rewritten in one transaction, its
        other checkpoints kept (one whose parent goes is left with no parent)."""
        if isinstance(run_ids, str):
            raise InputError(
                "delete_for_runs: run_ids must be a sequence of run ids, "
                f"not the string {run_ids!r}"
            )
        if not run_ids:
            return
        runs = {checked_text("run_id", r) for r in run_ids}
        async with self.store.connection() as conn:
            graphs = [
                str(r["name"]) for r in await conn.fetch(_q("run_graphs"), sorted(runs), CP_KIND)
            ]
        threads = sorted({_split(g)[0] for g in graphs})

        def drop_runs(loaded: Mapping[str, _LoadedList]) -> _Plan:
            plan: _Plan = {}
            for graph, items in loaded.items():
                keep = [
                    item
                    for item in items
                    if decode_value(self.serde, item.payload["metadata"]).get("run_id") not in runs
                ]
                if len(keep) < len(items):
                    plan[graph] = keep
            return plan

        await self._rewrite_threads(threads, drop_runs, "langgraph delete_for_runs")


class _Moved(Exception):
    """A graph being rewritten was written meanwhile (the transaction rolls back)."""


_Plan = dict[str, list[Loaded]]
_Batches = list[tuple[list[Blob], list[dict[str, Any]], list[str] | None]]
_Decide = Callable[[Mapping[str, list[Loaded]]], _Plan]


def rewrite_batches(
    serde: SerializerProtocol, thread_id: str, ns: str, keep: Sequence[Loaded]
) -> _Batches:
    """The append batches (nodes, frontier) that store the checkpoints ``keep`` (read
    back, oldest first) in a new graph as :meth:`AsyncCwstoreSaver.aput` and
    :meth:`AsyncCwstoreSaver.aput_writes` would have: a parent not among them is
    dropped."""
    heads: dict[str, tuple[str, int] | None] = {}
    states: dict[str, CheckpointState] = {}
    out: _Batches = []
    for item in keep:
        tup = _tuple(serde, thread_id, ns, item)
        checkpoint = tup.checkpoint
        parent = item.payload["parent_checkpoint_id"]
        state = states.get(parent) if parent is not None else None
        plan = PutPlan(
            serde,
            checkpoint,
            tup.metadata,
            checkpoint["channel_versions"],
            parent if state is not None else None,
            state or CheckpointState(None),
        )
        plan.build(heads)
        heads.update(plan.written)
        states[checkpoint["id"]] = plan.state
        out.append((plan.blobs, plan.nodes, [plan.state.node_id or ""]))
        for batch in item.write_batches:
            payload, blobs = writes_blobs(batch, item.datas)
            node, head = writes_node(checkpoint["id"], payload, heads, blobs)
            heads[writes_key(checkpoint["id"])] = head
            out.append((blobs, [node], None))
    return out


async def _append_in(
    conn: AsyncConnection,
    graph: str,
    blobs: Sequence[Blob],
    nodes: Sequence[Any],
    frontier: Sequence[str] | None,
) -> None:
    """Append, in the caller's transaction, the parts of ``blobs`` a few an append,
    then ``nodes`` declaring ``frontier``."""
    for batch in part_batches(blobs):
        await _send(conn, graph, batch, None)
    await _send(conn, graph, nodes, frontier)


async def _send(
    conn: AsyncConnection, graph: str, nodes: Sequence[Any], frontier: Sequence[str] | None
) -> None:
    prepared = prepare_append(graph, nodes, frontier=frontier)
    try:
        await conn.fetch(_q("append"), *prepared.args)
    except ValidationError as exc:
        raise prepared.renumbered(exc) from exc.__cause__


def _stale(exc: ValidationError) -> bool:
    """Whether an append was refused for parents that are gone: the saver remembered
    nodes of a graph erased since (another saver deleted or pruned the thread), so it
    forgets the graph and plans again from what is stored."""
    return "missing_parent" in exc.codes


def _only(unknown: Sequence[str], key: str) -> bool:
    """Whether the only unknown head is ``key``, a key new to the graph unless another
    process wrote it (a new checkpoint's, the first pending writes of a checkpoint this
    saver stored): the first attempt assumes it has none and does not ask (a wrong guess
    is a chain conflict, and the retry asks)."""
    return list(unknown) == [key]


def _graphs_of(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """The (thread id, namespace) of each graph named in the rows (column ``name``), a
    staged rewrite's as its graph's (reading the graph finishes it), in order, once."""
    names = dict.fromkeys(str(r["name"]).removeprefix(_STAGED) for r in rows)
    return [_split(name) for name in names]


def _split(graph: str) -> tuple[str, str]:
    """The thread id and namespace of a LangGraph graph's name."""
    rest = graph.removeprefix("langgraph:")
    thread, _, ns = rest.partition(":")
    return thread.replace("%3A", ":").replace("%25", "%"), ns
