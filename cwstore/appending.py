"""An append prepared for ``cwstore.append_v1``, without I/O: what :meth:`AsyncStore.append`
sends, for an integration to send in its own statement or transaction.

The store's own append is this function followed by one statement, so an integration
that calls ``append_v1`` with :attr:`PreparedAppend.args` sends exactly what the store
would: the same completed nodes (parents sorted, ids computed or verified, ``createdAt``
set), the same JSON text, the same checks of every argument.

The statement (``$1, $2`` placeholders, either driver)::

    SELECT seq, id, created_at, written, payload_text
      FROM cwstore.append_v1($1, $2::json, $3, $4::json, $5)

and, before it in the same transaction when :attr:`PreparedAppend.retention_group` is
not ``None``::

    SELECT pg_catalog.set_config('cwstore.retention_group', $1, true)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._arg_checks import (
    check_expected_length,
    check_graph_name,
    check_incarnation,
    check_retention_group,
)
from ._rows import stored_nodes
from ._store_base import prepare_batch
from .document import CausalNode, NodeLike
from .drivers._protocol import Row
from .errors import Error, renumber

__all__ = ["PreparedAppend", "prepare_append"]


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """The arguments of ``cwstore.append_v1`` for one batch, checked and completed.

    ``nodes`` are the batch's nodes as sent (dicts of AgentState v1 JSON, ids filled in,
    in batch order); ``nodes_json`` their JSON array text; ``frontier_json`` the declared
    frontier's JSON array text (``None``: the fold of SPEC section 4 applies).
    """

    graph: str
    nodes: list[dict[str, Any]]
    nodes_json: str
    expected_length: int | None
    frontier_json: str | None
    incarnation: int | None
    retention_group: str | None

    @property
    def args(self) -> tuple[str, str, int | None, str | None, int | None]:
        """``append_v1``'s five arguments in order: graph, nodes (JSON text), expected
        length, frontier (JSON text), incarnation."""
        return (
            self.graph,
            self.nodes_json,
            self.expected_length,
            self.frontier_json,
            self.incarnation,
        )

    @property
    def ids(self) -> list[str]:
        """The batch's node ids, in batch order."""
        return [n["id"] for n in self.nodes]

    def stored(self, rows: Sequence[Row]) -> list[CausalNode]:
        """The nodes as stored, from the rows ``append_v1`` returned (columns ``seq, id,
        created_at, written, payload_text``): what :meth:`AsyncStore.append` returns."""
        return stored_nodes(self.nodes, rows)

    def renumbered(self, error: Error) -> Error:
        """``error`` (raised by ``append_v1``) with each violation's ``index`` set to the
        node's position in this batch, as :meth:`AsyncStore.append` raises it."""
        return renumber(error, self.ids)


def prepare_append(
    graph: str,
    nodes: Iterable[NodeLike],
    *,
    expected_length: int | None = None,
    frontier: Sequence[str] | None = None,
    incarnation: int | None = None,
    retention_group: str | None = None,
) -> PreparedAppend:
    """Check and complete an append of ``nodes`` to ``graph`` (the arguments of
    :meth:`AsyncStore.append`, which means the same by each) for ``append_v1``.

    Raises :class:`InputError` for a bad graph name, ``expected_length``,
    ``incarnation`` or ``retention_group``, and :class:`ValidationError` for a batch the
    store would refuse before sending it (every violation); nothing is sent.
    """
    check_graph_name(graph)
    check_expected_length(expected_length)
    check_incarnation(incarnation)
    if retention_group is not None:
        check_retention_group(retention_group)
    batch = prepare_batch(nodes, frontier)
    return PreparedAppend(
        graph=graph,
        nodes=batch.nodes,
        nodes_json=batch.json,
        expected_length=expected_length,
        frontier_json=batch.frontier_json,
        incarnation=incarnation,
        retention_group=retention_group,
    )
