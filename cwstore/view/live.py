"""The view's live streams: one follower for every page, reads on the store's pool.

Each ``GET /api/live`` follows one graph the way :meth:`AsyncStore.tail` does (the
table is the truth, a notification only a wake-up), but holds no connection of its
own: it borrows one of the store's pool for each read and waits without one. A single
follower (the store's, as ``tail`` uses), open while at least one stream is open,
wakes the streams of the graph a notification names. So the view uses at most its
pool and one more connection however many pages follow, and a stream whose client
left (its task cancelled) holds nothing to give back.

What this writes: a follower that listens calls ``cwstore.listen_v1()``, which keeps
one row (its backend's pid) in ``cwstore.listeners`` while it is open, because appends
send their wake-up only while that table holds a row. ``unlisten_v1()`` deletes it when
the last stream ends (or the row goes with the backend, at the next ``listen_v1``).

On a hot standby (LISTEN is refused there and NOTIFY never arrives) and through a
transaction-mode pooler, the follower polls instead: it wakes every stream at each of
its polls (the store's ``poll_interval``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress

from cwstore import (
    AsyncStore,
    CausalNode,
    Error,
    GraphErasedError,
    UnknownGraphError,
    named_queries,
    node_from_row,
)

__all__ = ["Busy", "LiveHub"]

log = logging.getLogger("cwstore.view")

POLL_SECONDS = 5.0
"""A stream reads again after this long without a wake-up (a notification is a hint)."""
_BATCH = 1000
_BATCH_BYTES = 8 << 20
"""A read fetches at most this many bytes of payload past its first node."""
_Q = named_queries("cwstore.view")


class Busy(Error):
    """The view follows as many live streams as it may; try again later."""


class LiveHub:
    """Live streams of one view: at most ``max_streams`` at once, over ``store``'s pool,
    woken by one follower of the store that is open while any stream is open."""

    def __init__(self, store: AsyncStore, max_streams: int) -> None:
        self._store = store
        self.max_streams = max_streams
        self._waiting: dict[asyncio.Event, int] = {}
        self._streams = 0
        self._listening: asyncio.Task[None] | None = None

    @property
    def streams(self) -> int:
        """How many streams are open."""
        return self._streams

    def _wake(self, payloads: Sequence[str]) -> None:
        """Wake the streams of the graphs ``payloads`` name (``graph_id:...``); every
        stream when none is named (a poll, a timeout) or one is not a graph id."""
        graphs = {p.partition(":")[0] for p in payloads}
        everyone = not graphs or not all(g.isdigit() for g in graphs)
        for event, gid in self._waiting.items():
            if everyone or str(gid) in graphs:
                event.set()

    async def _listen(self) -> None:
        try:
            async with self._store.follower() as follower:
                while True:  # until cancelled by the last stream's end
                    self._wake(await follower.wait(POLL_SECONDS))
        except Error as exc:
            log.warning("live: cannot follow (%s); streams poll every %ss", exc, POLL_SECONDS)

    def _start(self) -> None:
        if self._listening is None or self._listening.done():
            self._listening = asyncio.get_running_loop().create_task(self._listen())

    def _stop(self) -> None:
        if self._streams == 0 and self._listening is not None:
            self._listening.cancel()
            self._listening = None

    async def close(self) -> None:
        """Stop listening (the streams end with the server)."""
        task, self._listening = self._listening, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def open(self) -> None:
        """Count a new stream in; raises :class:`Busy` when ``max_streams`` are open.
        Every :meth:`open` is followed by a :meth:`follow` (which counts it out)."""
        if self._streams >= self.max_streams:
            raise Busy(f"the view follows {self._streams} live streams, its most; retry later")
        self._streams += 1

    async def follow(self, graph: str, after: int) -> AsyncIterator[CausalNode]:
        """The nodes of ``graph`` after ``after``, then live ones, as
        :meth:`AsyncStore.tail` yields them (ending with :class:`GraphErasedError` when
        the graph's life is erased). Call :meth:`open` first."""
        woken = asyncio.Event()
        try:
            async with self._store.connection() as conn:
                g = await conn.fetchrow(_Q["view_graph"], graph)
            if g is None:
                raise UnknownGraphError(graph=graph)
            graph_id, incarnation, last = int(g["graph_id"]), int(g["incarnation"]), after
            self._waiting[woken] = graph_id
            self._start()
            while True:
                woken.clear()
                alive = True
                async with self._store.connection() as conn:
                    rows = await conn.fetch(
                        _Q["view_live_nodes"], graph_id, last, _BATCH, _BATCH_BYTES, incarnation
                    )
                    if not rows:
                        alive = bool(
                            await conn.fetchval(_Q["view_graph_alive"], graph_id, incarnation)
                        )
                for r in rows:
                    last = int(r["seq"])
                    yield node_from_row(r)
                if not alive:
                    raise GraphErasedError(graph=graph)
                if not rows:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), POLL_SECONDS)
        finally:
            self._waiting.pop(woken, None)
            self._streams -= 1
            self._stop()
