"""The rows the named queries return, as the stores' results. No I/O.

Each column is read by its name in ``sql/queries.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _jsontext
from ._arg_checks import check_read_length
from .document import AgentState, CausalNode, nodes_from_objs
from .drivers._protocol import Row
from .results import ErasedGraph, ErasedIdleGraph, GraphInfo, IdleGraph, KeyVersion

__all__ = ["export_text", "key_version", "node_from_row", "state_from_text", "stored_nodes"]


def erased_graph(row: Row) -> ErasedGraph:
    """An ``erase_tenant`` row as an :class:`ErasedGraph`."""
    return ErasedGraph(row["graph"], int(row["nodes"]))


def idle_graph(row: Row) -> IdleGraph:
    """An ``idle_graphs`` row as an :class:`IdleGraph`."""
    return IdleGraph(
        row["graph"], row["tenant"], int(row["length"]), row["last_write"], row["retention_group"]
    )


def erased_idle_graph(row: Row) -> ErasedIdleGraph:
    """An ``erase_idle`` row as an :class:`ErasedIdleGraph`."""
    return ErasedIdleGraph(
        row["graph"], row["tenant"], int(row["nodes"]), row["last_write"], row["retention_group"]
    )


def graph_info(row: Row) -> GraphInfo:
    """A ``graphs_list`` row as a :class:`GraphInfo`."""
    vocabulary = row["vocabulary"]
    return GraphInfo(
        row["name"],
        int(row["length"]),
        None if vocabulary is None else tuple(vocabulary),
        row["created_at"],
        row["tenant"],
        int(row["incarnation"]),
    )


def node_from_row(row: Row) -> CausalNode:
    """A stored node as the runtime's :class:`CausalNode`, from a row holding the columns
    of ``cwstore.nodes`` (or ``cwstore.node_view``) by these names: ``seq``, ``id``,
    ``kind``, ``parents`` (``text[]``), ``payload_text`` (the exact JSON text stored),
    ``created_at_text`` and ``resource_key``; other columns are ignored.

    The payload is parsed from its exact text (numbers and member order as stored); the
    node is not validated again (the database checked it when it was written). A row
    without one of the columns raises the driver's lookup error (``KeyError`` or
    ``IndexError``): a query error, not bad data."""
    return CausalNode.model_construct(
        id=row["id"],
        kind=row["kind"],
        parents=tuple(row["parents"]),
        payload=_jsontext.loads(row["payload_text"]),
        created_at=row["created_at_text"],
        sequence=int(row["seq"]),
        resource_key=row["resource_key"],
    )


def stored_nodes(batch: list[dict[str, Any]], rows: Sequence[Row]) -> list[CausalNode]:
    """The nodes ``append_v1`` returned, as stored.

    A node this call wrote is the one sent; one the graph already held comes back with
    its stored ``createdAt`` and payload text (identity does not cover member order).
    """
    by_id = {n["id"]: n for n in batch}
    out: list[CausalNode] = []
    for r in rows:
        n = by_id[r["id"]]
        out.append(
            CausalNode.model_construct(
                id=r["id"],
                kind=n["kind"],
                parents=tuple(n["parents"]),
                payload=n["payload"] if r["written"] else _jsontext.loads(r["payload_text"]),
                created_at=r["created_at"],
                sequence=int(r["seq"]),
                resource_key=n.get("resourceKey"),
            )
        )
    return out


def key_version(key: str, row: Row) -> KeyVersion:
    """A ``key_history`` row as a :class:`KeyVersion`."""
    return KeyVersion(
        key=key,
        version=int(row["version"]),
        sequence=int(row["seq"]),
        id=row["id"],
        kind=row["kind"],
        created_at=row["created_at_text"],
        recorded_at=row["recorded_at"],
        payload=_jsontext.loads(row["payload_text"]),
    )


def export_rows(graph: str, seq: int | None, rows: Sequence[Row]) -> tuple[str, list[str]]:
    """(nodes JSON array text, frontier) from the rows of query ``export``
    (``export_parts_v1``): the first row holds the length and the frontier, the others
    the nodes array's text in parts, so no single database value holds the whole graph.
    Raises :class:`InputError` for a read as of a sequence the graph does not hold."""
    head = rows[0]
    check_read_length(graph, seq, int(head["length"]))
    return "[" + ",".join(r["nodes"] for r in rows[1:]) + "]", list(head["frontier"])


def export_text(nodes_array: str, frontier: Sequence[str]) -> str:
    """The AgentState v1 document from the nodes' JSON array text and the frontier."""
    return (
        '{"version":1,"nodes":'
        + nodes_array
        + ',"frontier":'
        + _jsontext.dumps(list(frontier))
        + "}"
    )


def state_from_text(nodes_array: str, frontier: Sequence[str]) -> AgentState:
    """An :class:`AgentState` from the nodes' JSON array text (parsed once, in C)."""
    nodes = _jsontext.loads_stored(nodes_array)
    return AgentState.model_construct(
        version=1, nodes=nodes_from_objs(nodes), frontier=tuple(frontier)
    )
