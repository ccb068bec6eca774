"""What a saver remembers of the graphs it wrote, so a put in a running thread reads
nothing back: the states of the last checkpoints it stored and the heads of the keys it
knows; the key of each graph it used, so a read makes one query; and the messages it
wrote or read (their makers), so a read fetches only the messages it has not seen (a
node's id is the hash of its content, so a message remembered for an id never goes
stale). Only a hint: a put that finds it stale (another process moved a key on) gets a
chain conflict from the database, forgets the graph and plans again from what is stored;
a read by a key the graph's name has left reads nothing, and looks the key up again."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._mapping import CheckpointState, MessageMaker

__all__ = ["GraphMemo", "Memo"]

_STATES = 8
_GRAPHS = 512
_KEYS = 4096
MESSAGE_BYTES = 32 * 1024 * 1024
"""The default bound of what a saver remembers of messages and checkpoint states
(about, in bytes)."""


@dataclass
class GraphMemo:
    """One graph: checkpoint id -> state (the latest few) and about how many bytes
    they take, key -> head (``None``: the key has no version)."""

    states: OrderedDict[str, tuple[CheckpointState, int]] = field(default_factory=OrderedDict)
    heads: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    state_bytes: int = 0

    def state(self, checkpoint_id: str) -> CheckpointState | None:
        found = self.states.get(checkpoint_id)
        return None if found is None else found[0]

    def _keep(self, checkpoint_id: str, state: CheckpointState, size: int) -> None:
        old = self.states.pop(checkpoint_id, None)
        if old is not None:
            self.state_bytes -= old[1]
        self.states[checkpoint_id] = (state, size)
        self.state_bytes += size
        while len(self.states) > _STATES:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, size) = self.states.popitem(last=False)
        self.state_bytes -= size


class Memo:
    """The graphs a saver remembers, the most recently used kept: what it wrote to
    them, and (apart, so that reading many threads does not push out what a put needs)
    their keys."""

    def __init__(self, message_bytes: int = MESSAGE_BYTES) -> None:
        self._graphs: OrderedDict[str, GraphMemo] = OrderedDict()
        self._keys: OrderedDict[str, int] = OrderedDict()
        self._messages: OrderedDict[str, dict[str, MessageMaker]] = OrderedDict()
        self._message_bytes = 0
        self._state_bytes = 0
        self._message_limit = message_bytes

    def key(self, name: str) -> int | None:
        """The graph's key as last found, ``None`` when not known."""
        return self._keys.get(name)

    def keep_key(self, name: str, key: int | None) -> None:
        """Remember the graph's key (``None``: drop it)."""
        if key is None:
            self._keys.pop(name, None)
            return
        self._keys[name] = key
        self._keys.move_to_end(name)
        while len(self._keys) > _KEYS:
            self._keys.popitem(last=False)

    def graph(self, name: str) -> GraphMemo:
        memo = self._graphs.get(name)
        if memo is None:
            memo = self._graphs[name] = GraphMemo()
            while len(self._graphs) > _GRAPHS:
                _, gone = self._graphs.popitem(last=False)
                self._state_bytes -= gone.state_bytes
        else:
            self._graphs.move_to_end(name)
        return memo

    def wrote(
        self,
        name: str,
        checkpoint_id: str,
        state: CheckpointState,
        heads: Mapping[str, tuple[str, int]],
    ) -> None:
        """Remember what a put wrote to the graph: the heads, and the checkpoint's
        state within the bound (which states and messages share: the least recently
        used graphs' are dropped first, then this graph's older states; a state larger
        than the bound is not kept, and a put from it reads it back)."""
        memo = self.graph(name)
        memo.heads.update(heads)
        size = state.size()
        before = memo.state_bytes
        memo._keep(checkpoint_id, state, size)
        self._state_bytes += memo.state_bytes - before
        self._fit(name)

    def _fit(self, name: str) -> None:
        """Drop what is remembered until it is within the bound, the graph ``name``'s
        latest state last."""
        while self._used() > self._message_limit:
            other = next((g for g in self._messages if g != name), None)
            if other is not None:
                self._drop_messages(other)
                continue
            other = next((g for g, m in self._graphs.items() if g != name and m.states), None)
            if other is not None:
                self._drop_states(self._graphs[other])
                continue
            if name in self._messages:
                self._drop_messages(name)
                continue
            memo = self._graphs.get(name)
            if memo is None or not memo.states:
                return
            before = memo.state_bytes
            memo._drop_oldest()
            self._state_bytes += memo.state_bytes - before

    def _used(self) -> int:
        return self._message_bytes + self._state_bytes

    def _drop_states(self, memo: GraphMemo) -> None:
        self._state_bytes -= memo.state_bytes
        memo.states.clear()
        memo.state_bytes = 0

    def messages(self, name: str) -> Mapping[str, MessageMaker]:
        """The messages remembered of the graph, by node id."""
        messages = self._messages.get(name)
        if messages is None:
            return {}
        self._messages.move_to_end(name)
        return messages

    def keep_messages(self, name: str, makers: Mapping[str, MessageMaker]) -> None:
        """Remember messages of the graph, within the bound: the least recently used
        graphs' are dropped first; past it, a graph's messages are not kept."""
        if self._message_limit <= 0 or not makers:
            return
        kept = self._messages.get(name)
        if kept is None:
            kept = self._messages[name] = {}
        self._messages.move_to_end(name)
        for node_id, maker in makers.items():
            if node_id in kept:
                continue
            while (
                self._used() + maker.size > self._message_limit
                and next(iter(self._messages)) != name
            ):
                self._drop_messages(next(iter(self._messages)))
            if self._used() + maker.size > self._message_limit:
                return
            kept[node_id] = maker
            self._message_bytes += maker.size

    def _drop_messages(self, name: str) -> None:
        messages = self._messages.pop(name, None) or {}
        self._message_bytes -= sum(m.size for m in messages.values())

    def forget(self, name: str) -> None:
        """Forget the graph: what was written, its key, its messages."""
        gone = self._graphs.pop(name, None)
        if gone is not None:
            self._state_bytes -= gone.state_bytes
        self._keys.pop(name, None)
        self._drop_messages(name)
