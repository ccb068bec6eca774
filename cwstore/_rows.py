"""The rows the named queries return, as the stores' results. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import jsontext
from ._args import check_read_length
from .document import AgentState, CausalNode, nodes_from_objs
from .results import ErasedGraph, ErasedIdleGraph, GraphInfo, IdleGraph, KeyVersion

__all__ = ["export_text", "key_version", "node_from_row", "state_from_text", "stored_nodes"]


def erased_graph(row: Sequence[Any]) -> ErasedGraph:
    """An ``erase_tenant`` row as an :class:`ErasedGraph`."""
    return ErasedGraph(row[0], int(row[1]))


def idle_graph(row: Sequence[Any]) -> IdleGraph:
    """An ``idle_graphs`` row as an :class:`IdleGraph`."""
    return IdleGraph(row[0], row[1], int(row[2]), row[3])


def erased_idle_graph(row: Sequence[Any]) -> ErasedIdleGraph:
    """An ``erase_idle`` row as an :class:`ErasedIdleGraph`."""
    return ErasedIdleGraph(row[0], row[1], int(row[2]), row[3])


def graph_info(row: Sequence[Any]) -> GraphInfo:
    """A ``graphs_list`` row as a :class:`GraphInfo`."""
    name, length, vocabulary, created_at, tenant = row
    return GraphInfo(
        name, int(length), None if vocabulary is None else tuple(vocabulary), created_at, tenant
    )


def node_from_row(
    seq: int,
    node_id: str,
    kind: str,
    parents: Sequence[str],
    payload_text: str,
    created_at: str,
    resource_key: str | None,
) -> CausalNode:
    """A stored row as the runtime's node (payload parsed from its exact text)."""
    return CausalNode.model_construct(
        id=node_id,
        kind=kind,
        parents=tuple(parents),
        payload=jsontext.loads(payload_text),
        created_at=created_at,
        sequence=int(seq),
        resource_key=resource_key,
    )


def stored_nodes(batch: list[dict[str, Any]], rows: Sequence[Any]) -> list[CausalNode]:
    """The nodes ``append_v1`` returned, as stored.

    A node this call wrote is the one sent; one the graph already held comes back with
    its stored ``createdAt`` and payload text (identity does not cover member order).
    """
    by_id = {n["id"]: n for n in batch}
    out: list[CausalNode] = []
    for seq, nid, created, _recorded, written, payload_text in rows:
        n = by_id[nid]
        out.append(
            CausalNode.model_construct(
                id=nid,
                kind=n["kind"],
                parents=tuple(n["parents"]),
                payload=n["payload"] if written else jsontext.loads(payload_text),
                created_at=created,
                sequence=int(seq),
                resource_key=n.get("resourceKey"),
            )
        )
    return out


def key_version(key: str, row: Sequence[Any]) -> KeyVersion:
    """A ``key_history`` row as a :class:`KeyVersion`."""
    version, seq, node_id, kind, created_at, recorded_at, payload_text = row
    return KeyVersion(
        key=key,
        version=int(version),
        sequence=int(seq),
        id=node_id,
        kind=kind,
        created_at=created_at,
        recorded_at=recorded_at,
        payload=jsontext.loads(payload_text),
    )


def export_rows(
    graph: str, seq: int | None, rows: Sequence[Sequence[Any]]
) -> tuple[str, list[str]]:
    """(nodes JSON array text, frontier) from the rows of query ``export``
    (``export_parts_v1``): the first row holds the length and the frontier, the others
    the nodes array's text in parts, so no single database value holds the whole graph.
    Raises :class:`InputError` for a read as of a sequence the graph does not hold."""
    head = rows[0]
    check_read_length(graph, seq, int(head[0]))
    return "[" + ",".join(r[3] for r in rows[1:]) + "]", list(head[4])


def export_text(nodes_array: str, frontier: Sequence[str]) -> str:
    """The AgentState v1 document from the nodes' JSON array text and the frontier."""
    return (
        '{"version":1,"nodes":'
        + nodes_array
        + ',"frontier":'
        + jsontext.dumps(list(frontier))
        + "}"
    )


def state_from_text(nodes_array: str, frontier: Sequence[str]) -> AgentState:
    """An :class:`AgentState` from the nodes' JSON array text (parsed once, in C)."""
    nodes = jsontext.loads_stored(nodes_array)
    return AgentState.model_construct(
        version=1, nodes=nodes_from_objs(nodes), frontier=tuple(frontier)
    )
