"""What the stores send, decided without I/O: the named queries, a batch to append, a
document to import (its rows, in slices), and the sizes that bound them.

With :mod:`cwstore._arg_checks` (arguments checked) and :mod:`cwstore._rows` (rows read back),
each store method is a few lines: check and prepare here, run a named query through its
driver, map rows back. Keeping these pure is what lets the two stores stay twins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any, LiteralString

from . import _jsontext
from ._sql import queries
from .document import (
    NODE_FIELDS,
    AgentState,
    CausalNode,
    Vocabulary,
    check_nodes,
    parse_document,
    sort_parents,
    validate_in_slices,
)
from .errors import (
    ValidationError,
    Violation,
)

__all__ = [
    "COPY_COLUMNS",
    "ImportPlan",
    "PreparedBatch",
    "js_now",
    "prepare_batch",
    "q",
]

_Q = queries()


def q(name: str) -> LiteralString:
    """A named query from ``sql/queries.sql``."""
    return _Q[name]


COPY_COLUMNS = (
    "graph_id",
    "seq",
    "id",
    "kind",
    "parents",
    "payload_text",
    "created_at_text",
    "resource_key",
)
"""The node table's columns, in the order of :meth:`ImportPlan.records`."""


TAIL_BATCH_BYTES = 8 << 20
"""A follower fetches at most this many bytes of payload past a batch's first node."""


def js_now() -> str:
    """``new Date().toISOString()``: UTC, milliseconds, ``Z``."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# --- documents and batches -----------------------------------------------------------


class ImportPlan:
    """A document to import, checked a slice at a time while the slices stream.

    :meth:`records` yields COPY rows for slices that passed, keeps checking after a
    violation without yielding more, and raises :class:`ValidationError` with every
    violation after the last slice, which aborts the COPY: nothing is written, and
    the database works on one slice while the next is checked.
    """

    SLICE = 5000

    def __init__(self, state: Any, vocabulary: Vocabulary | None = None) -> None:
        if isinstance(state, AgentState):
            state = state.to_obj()
        elif isinstance(state, str | bytes | bytearray):
            state = parse_document(bytes(state) if isinstance(state, bytearray) else state)
        self.doc: Any = state
        self.vocabulary = vocabulary or Vocabulary.dynamic()
        self.count = 0

    def records(self, graph_id: int) -> Iterator[tuple[Any, ...]]:
        violations: list[Violation] = []
        for part, found in validate_in_slices(self.doc, self.vocabulary, self.SLICE):
            violations.extend(found)
            if violations:
                continue
            for n in part:
                yield (
                    graph_id,
                    int(n["sequence"]),
                    n["id"],
                    n["kind"],
                    n["parents"],
                    _jsontext.dumps(n["payload"]),
                    n["createdAt"],
                    n.get("resourceKey"),
                )
            self.count += len(part)
        if violations:
            raise ValidationError(violations)

    def column_slices(self, graph_id: int) -> Iterator[list[list[Any]]]:
        """The rows of :meth:`records` as ``import_rows_v1`` takes them, a slice at a time.

        The import path of roles that may not COPY into ``cwstore.nodes``: each slice is
        the arguments after ``graph_id`` (sequences, ids, kinds, parents as array
        literals, payloads, createdAt texts, resource keys). Raises like :meth:`records`.
        """
        rows = self.records(graph_id)
        while chunk := list(islice(rows, self.SLICE)):
            cols = list(zip(*chunk, strict=True))
            yield [
                list(cols[1]),
                list(cols[2]),
                list(cols[3]),
                [array_literal(p) for p in cols[4]],
                list(cols[5]),
                list(cols[6]),
                list(cols[7]),
            ]

    @property
    def frontier(self) -> list[str]:
        return list(self.doc["frontier"])


def array_literal(items: Sequence[str]) -> str:
    """A PostgreSQL ``text[]`` literal of ``items``, every element quoted."""
    quoted = (i.replace("\\", "\\\\").replace('"', '\\"') for i in items)
    return "{" + ",".join(f'"{i}"' for i in quoted) + "}"


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """Nodes ready for ``append_v1``: ids computed or verified, parents sorted."""

    nodes: list[dict[str, Any]]
    json: str
    frontier_json: str | None


def _node_obj(node: Any) -> Any:
    if isinstance(node, CausalNode):
        return node.to_obj()
    return node


_BATCH_OPTIONAL = frozenset({"id", "sequence"})


def prepare_batch(
    nodes: Iterable[Any],
    frontier: Sequence[str] | None = None,
    vocabulary: Vocabulary | None = None,
) -> PreparedBatch:
    """Complete and check a batch of nodes for appending.

    A node may omit ``id`` and ``sequence`` (and ``createdAt``): its parents are sorted
    and deduplicated as the runtime does, its id computed by SPEC section 2, its
    ``createdAt`` set to now. A given ``id`` is verified. A given ``sequence`` is
    ignored: the database assigns it. Never adds a key's head to the parents: that
    would turn a lost race into a silent overwrite.

    Raises :class:`ValidationError` with every violation (codes as at import).
    """
    items = list(nodes)
    if not items:
        raise ValidationError([Violation("shape", None, None, "$", "the batch holds no nodes")])
    done: list[Any] = []
    for raw in items:
        node = _node_obj(raw)
        if not isinstance(node, dict):
            done.append(node)
            continue
        node = dict(node)
        parents = node.get("parents")
        if isinstance(parents, list) and all(isinstance(p, str) for p in parents):
            node["parents"] = sort_parents(parents)
        node.setdefault("createdAt", js_now())
        node.pop("sequence", None)
        done.append(node)
    # One pass checks every node and computes each missing id from the checked content
    # (fill_ids), so neither the payload walk nor the hash runs twice.
    found = check_nodes(
        done,
        vocabulary=vocabulary or Vocabulary.dynamic(),
        require_sequence=False,
        path="$",
        # The database assigns sequences; an id that could not be computed is left
        # out because what stopped it (a bad kind, parents or payload) is reported.
        optional_fields=_BATCH_OPTIONAL,
        fill_ids=True,
    )
    # Parents may be stored nodes the batch does not hold: the database checks them.
    # A node given twice in one batch is the same content (same id): appended once.
    violations = [v for v in found if v.code not in ("missing_parent", "duplicate_id")]
    if frontier is not None:
        if not isinstance(frontier, list | tuple) or not all(isinstance(f, str) for f in frontier):
            violations.append(
                Violation("shape", None, None, "$.frontier", "frontier must be a list of node ids")
            )
        elif any(_jsontext._bad_string(f) or "\x00" in f for f in frontier):
            violations.append(
                Violation(
                    "unrepresentable",
                    None,
                    None,
                    "$.frontier",
                    "a frontier id holds U+0000 or a lone surrogate",
                )
            )
        elif len(set(frontier)) != len(frontier):
            violations.append(
                Violation(
                    "frontier_reference", None, None, "$.frontier", "frontier lists an id twice"
                )
            )
    if violations:
        raise ValidationError(violations)
    done = [{k: n[k] for k in NODE_FIELDS if k in n} | n for n in done]
    return PreparedBatch(
        nodes=done,
        json=_jsontext.dumps(done),
        frontier_json=None if frontier is None else _jsontext.dumps(list(frontier)),
    )


BULK_ANALYZE_THRESHOLD = 10_000
"""Imports at least this large refresh the planner's statistics when they commit."""

IMPORT_CHUNK_ROWS = 20_000
"""An import COPYs its nodes in statements of this many rows, in one transaction: the
server derives one chunk (the nodes trigger) while the client checks the next."""
