"""How an OpenAI Agents SDK session is kept as a cwstore graph (pure: no I/O).

One session is one graph, ``openai-agents:<session_id>``, a chain of nodes each of which
has the node before it as a parent (and, after writers raced, every head of the
frontier: the chain forks where batches were written concurrently and joins again at
the next write):

- ``add_items(items)`` is one node holding the batch, payload ``{"items": [...]}``, of
  the kind of the batch's last item (:func:`item_kind`);
- ``pop_item()`` is a ``system`` node ``{"pop": {"node": <id>, "index": i}}`` naming the
  item it retracts (the node holding it is a parent too);
- ``clear_session()`` is a ``system`` node ``{"clear": true}`` on the key
  :data:`CLEAR_KEY` (so the latest clear is one index lookup).

The session's items are the items of the batch nodes after the latest clear, each pop
taking away the item that was the tail when it was written (:class:`Fold`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLEAR_KEY",
    "GRAPH_PREFIX",
    "Fold",
    "batch_node",
    "clear_node",
    "graph_name",
    "item_kind",
    "pop_node",
]

GRAPH_PREFIX = "openai-agents:"
"""What every session's graph name begins with."""
CLEAR_KEY = "openai-agents:clear"
"""The resource key of clear nodes."""


def graph_name(session_id: str) -> str:
    """The graph of a session."""
    return GRAPH_PREFIX + session_id


def item_kind(item: Mapping[str, Any]) -> str:
    """The cwstore kind of one Responses-API input item.

    A message is ``goal`` (user), ``answer`` (assistant) or ``system`` (system,
    developer); a ``*_call`` (function, computer, web search, MCP, ...) or an MCP
    approval request is ``tool_call``; its ``*_output`` (or an approval response, a
    tool listing) is ``tool_result``; reasoning, compaction and anything else is
    ``inference``.
    """
    kind = item.get("type")
    if kind is None or kind == "message":
        role = item.get("role")
        if role == "user":
            return "goal"
        if role == "assistant":
            return "answer"
        if role in ("system", "developer"):
            return "system"
        return "inference"
    if not isinstance(kind, str):
        return "inference"
    if kind.endswith("_output") or kind in ("mcp_approval_response", "mcp_list_tools"):
        return "tool_result"
    if kind.endswith("_call") or kind == "mcp_approval_request":
        return "tool_call"
    return "inference"


def _parents(after: Iterable[str], *more: str | None) -> list[str]:
    return sorted({*after, *(i for i in more if i is not None)})


def batch_node(items: Sequence[Mapping[str, Any]], after: Iterable[str]) -> dict[str, Any]:
    """The node of one ``add_items`` batch (non-empty), after the nodes ``after`` (the
    graph's last node and its frontier's heads, as the writer knows them)."""
    return {
        "kind": item_kind(items[-1]),
        "parents": _parents(after),
        "payload": {"items": list(items)},
    }


def pop_node(after: Iterable[str], node: str, index: int) -> dict[str, Any]:
    """The node retracting item ``index`` of batch node ``node``, after ``after``."""
    return {
        "kind": "system",
        "parents": _parents(after, node),
        "payload": {"pop": {"node": node, "index": index}},
    }


def clear_node(after: Iterable[str], previous_clear: str | None) -> dict[str, Any]:
    """The node clearing the session, after ``after`` and the previous clear node."""
    return {
        "kind": "system",
        "parents": _parents(after, previous_clear),
        "payload": {"clear": True},
        "resourceKey": CLEAR_KEY,
    }


@dataclass(slots=True)
class Fold:
    """The live items of a session, read from its newest node backwards.

    Feed it the nodes after the latest clear, newest first (:meth:`add`, in pages of
    any size); ``found`` holds the live items newest first, each as ``(item, node id,
    index)``. A pop node retracts the item that was the tail when it was written, so
    going backwards each pop skips the next live item.
    """

    limit: int | None
    found: list[tuple[Any, str, int]] = field(default_factory=list)
    skip: int = 0

    @property
    def full(self) -> bool:
        """True once ``limit`` items are found."""
        return self.limit is not None and len(self.found) >= self.limit

    def add(self, node_id: str, payload_text: str) -> None:
        """One node, older than every node added before."""
        if self.full:
            return
        payload = json.loads(payload_text)
        if "pop" in payload:
            self.skip += 1
            return
        items = payload.get("items")
        if not isinstance(items, list):
            return
        for index in range(len(items) - 1, -1, -1):
            if self.skip:
                self.skip -= 1
                continue
            self.found.append((items[index], node_id, index))
            if self.full:
                return

    def items(self) -> list[Any]:
        """The live items found, oldest first."""
        return [item for item, _, _ in reversed(self.found)]
