"""The public result types of the stores: frozen dataclasses, no I/O.

:class:`Projection` is the state a reader works from, now or as of any point (SPEC
section 8). The database computes it in one call (``cwstore.projection_v1``) from its materialized
tables: frontier spans, key versions and running counts, all index lookups, so the
cost does not grow with the graph's length. This module only turns that answer into
typed values; payloads travel as their exact JSON text and are parsed here.
:class:`GraphInfo` describes a graph, :class:`Cursor`, :class:`TailItem` and
:class:`ErasedItem` are the all-graphs feed's position and items; :class:`ErasedGraph`,
:class:`IdleGraph` and :class:`ErasedIdleGraph` are what erasure and retention report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._jsontext import loads_stored
from .document import CausalNode
from .errors import InputError

__all__ = [
    "Cursor",
    "ErasedGraph",
    "ErasedIdleGraph",
    "ErasedItem",
    "FrontierHead",
    "GraphInfo",
    "IdleGraph",
    "KeyVersion",
    "MemoryEntry",
    "NodeRef",
    "Projection",
    "ResourceHead",
    "TailItem",
]


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node of the projection: its id, sequence, kind and payload."""

    id: str
    sequence: int
    kind: str
    payload: Any


@dataclass(frozen=True, slots=True)
class FrontierHead(NodeRef):
    """One active head of the graph."""


@dataclass(frozen=True, slots=True)
class ResourceHead(NodeRef):
    """The newest version of a resource key; ``version`` counts from 1 along the chain."""

    key: str = ""
    version: int = 0


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """The newest value of one semantic key."""

    type: str
    key: str
    content: Any
    version: int
    sequence: int
    id: str


@dataclass(frozen=True, slots=True)
class KeyVersion:
    """One version of a key in its history (``cwstore history``)."""

    key: str
    version: int
    sequence: int
    id: str
    kind: str
    created_at: str
    recorded_at: datetime
    payload: Any


@dataclass(frozen=True, slots=True)
class Projection:
    """The graph as of ``length`` nodes.

    ``semantic`` is memory as type -> key -> content
    (``projection.semantic["memory"]["style"]``); ``memory`` keeps the same entries with
    their versions and nodes; ``resources`` maps each non-semantic resource key to its
    newest version.
    """

    graph: str
    length: int
    frontier: tuple[FrontierHead, ...]
    resources: dict[str, ResourceHead]
    semantic: dict[str, dict[str, Any]]
    memory: tuple[MemoryEntry, ...]
    latest_goal: NodeRef | None
    latest_answer: NodeRef | None
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_text(cls, graph: str, text: str) -> Projection:
        """Build from ``projection_v1``'s JSON text (payloads embedded verbatim)."""
        d: dict[str, Any] = loads_stored(text)
        memory = []
        for m in d["semantic"]:
            _, kind, key = m["key"].split(":", 2)
            payload = m["payload"]
            memory.append(
                MemoryEntry(
                    type=kind,
                    key=key,
                    content=payload.get("content") if isinstance(payload, dict) else None,
                    version=m["version"],
                    sequence=m["seq"],
                    id=m["id"],
                )
            )
        semantic: dict[str, dict[str, Any]] = {}
        for e in memory:
            semantic.setdefault(e.type, {})[e.key] = e.content
        return cls(
            graph=graph,
            length=d["length"],
            frontier=tuple(
                FrontierHead(f["id"], f["seq"], f["kind"], f["payload"]) for f in d["frontier"]
            ),
            resources={
                r["key"]: ResourceHead(
                    r["id"], r["seq"], r["kind"], r["payload"], key=r["key"], version=r["version"]
                )
                for r in d["resources"]
            },
            semantic=semantic,
            memory=tuple(memory),
            latest_goal=_ref(d["latest_goal"], "goal"),
            latest_answer=_ref(d["latest_answer"], "answer"),
            counts=d["counts"],
        )

    def to_json_obj(self) -> dict[str, Any]:
        """Plain JSON values, for ``cwstore project --json``."""
        return {
            "graph": self.graph,
            "length": self.length,
            "frontier": [
                {"id": f.id, "sequence": f.sequence, "kind": f.kind, "payload": f.payload}
                for f in self.frontier
            ],
            "resources": {
                k: {"version": r.version, "sequence": r.sequence, "id": r.id, "payload": r.payload}
                for k, r in self.resources.items()
            },
            "semantic": self.semantic,
            "latest_goal": _ref_obj(self.latest_goal),
            "latest_answer": _ref_obj(self.latest_answer),
            "counts": self.counts,
        }


def _ref(value: Any, kind: str) -> NodeRef | None:
    if not value:
        return None
    return NodeRef(value["id"], value["seq"], kind, value["payload"])


def _ref_obj(ref: NodeRef | None) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"id": ref.id, "sequence": ref.sequence, "payload": ref.payload}


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """A graph's name, length, semantic vocabulary (``None`` = dynamic), tenant and
    life: ``incarnation`` tells this graph from a later one of the same name (after an
    erasure); :meth:`AsyncStore.append` can name it, to write this life or nothing."""

    name: str
    length: int
    vocabulary: tuple[str, ...] | None
    created_at: datetime
    tenant: str = "default"
    incarnation: int = 0


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A position in the all-graphs feed (:meth:`AsyncStore.tail_all`).

    Opaque to users; ``str(cursor)`` and :meth:`parse` round-trip it so a consumer can
    persist where it stopped.
    """

    xid: int = 0
    graph_id: int = 0
    seq: int = 0

    def __str__(self) -> str:
        return f"{self.xid}:{self.graph_id}:{self.seq}"

    @classmethod
    def parse(cls, text: str | Cursor | None) -> Cursor:
        if text is None:
            return cls()
        if isinstance(text, Cursor):
            return text
        try:
            a, b, c = (int(x) for x in str(text).split(":"))
        except ValueError:
            raise InputError(f"cursor {text!r} is not of the form XID:GRAPH:SEQ") from None
        return cls(a, b, c)


@dataclass(frozen=True, slots=True)
class TailItem:
    """One node of the all-graphs feed, with the cursor to resume after it."""

    cursor: Cursor
    graph: str
    node: CausalNode


@dataclass(frozen=True, slots=True)
class ErasedItem:
    """An erasure in the all-graphs feed: every node of the graph with key ``graph_id``
    that the feed delivered before this item is erased; forget them.

    It comes after every node of the erased life of the graph and before any node of a
    new life of the same name. It carries no name (the database keeps none of an erased
    graph): a follower knows the name from the :class:`TailItem` objects it received
    with this ``graph_id``. ``cursor`` resumes the feed after it.
    """

    cursor: Cursor
    graph_id: int


@dataclass(frozen=True, slots=True)
class ErasedGraph:
    """A graph :meth:`AsyncStore.erase_tenant` erased, and how many nodes it held."""

    graph: str
    nodes: int


@dataclass(frozen=True, slots=True)
class IdleGraph:
    """A graph idle for longer than asked (:meth:`AsyncStore.idle_graphs`): its tenant,
    its length, when it was last written (``last_write``: the time of the last statement
    of its last write; its creation, for a graph holding no node) and its retention
    group (``None``: none; a group is idle only when all its graphs are)."""

    graph: str
    tenant: str
    length: int
    last_write: datetime
    retention_group: str | None = None


@dataclass(frozen=True, slots=True)
class ErasedIdleGraph:
    """A graph :meth:`AsyncStore.erase_idle` erased: its tenant, the nodes it held,
    when it was last written and its retention group (as :class:`IdleGraph`)."""

    graph: str
    tenant: str
    nodes: int
    last_write: datetime
    retention_group: str | None = None
