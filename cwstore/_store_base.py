"""Code shared by the async and sync stores that does no I/O.

Each store method is then a few lines: prepare arguments here, run a named query
through its driver, map rows and errors back here. Keeping this pure is what lets the
two stores stay twins without duplicating logic.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, LiteralString, TypeAlias, cast

from . import jsontext
from ._sql import queries
from .document import (
    NODE_FIELDS,
    AgentState,
    CausalNode,
    Vocabulary,
    check_nodes,
    nodes_from_objs,
    parse_document,
    sort_parents,
    validate_in_slices,
)
from .errors import (
    InputError,
    ValidationError,
    Violation,
)
from .results import ErasedGraph, ErasedIdleGraph, GraphInfo, IdleGraph, KeyVersion

__all__ = [
    "COPY_COLUMNS",
    "POOLERS",
    "ImportPlan",
    "PreparedBatch",
    "check_graph_name",
    "check_poll_interval",
    "check_pooler",
    "export_text",
    "js_now",
    "key_version",
    "node_from_row",
    "prepare_batch",
    "q",
    "state_from_text",
    "stored_nodes",
]

_Q = queries()


def q(name: str) -> LiteralString:
    """A named query from ``cwstore/sql/queries.sql``."""
    return _Q[name]


StateLike: TypeAlias = "AgentState | Mapping[str, Any] | str | bytes | bytearray"
"""What a store takes as a whole state: an :class:`AgentState`, parsed AgentState v1
JSON (a dict), or its JSON text."""

NodeLike: TypeAlias = "CausalNode | Mapping[str, Any]"
"""What a store takes as a node to append: a :class:`CausalNode` or its JSON object (a
dict), in which ``id``, ``sequence`` and ``createdAt`` may be left out."""

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


MAX_SEQUENCE = 2**63 - 1
"""The largest sequence number or length (an SQL ``bigint``)."""


def _is_count(value: object) -> bool:
    """An ``int`` (not a ``bool``) from 0 to :data:`MAX_SEQUENCE`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SEQUENCE


def check_after(after: object) -> int:
    """A ``tail`` start position: a sequence number from 0 to 2**63 - 1, else
    :class:`InputError`."""
    if not _is_count(after):
        raise InputError(f"after must be a sequence number from 0 to 2**63 - 1, got {after!r}")
    return cast(int, after)


def check_expected_length(expected_length: object) -> int | None:
    """``None`` or a graph length from 0 to 2**63 - 1, else :class:`InputError` (a
    ``1.5`` or ``False`` is refused, never rounded or read as 0)."""
    if expected_length is not None and not _is_count(expected_length):
        raise InputError(
            "expected_length must be None or an integer from 0 to 2**63 - 1, "
            f"got {expected_length!r}"
        )
    return cast(int | None, expected_length)


def check_key(key: object) -> str:
    """A resource or semantic key: a non-empty string PostgreSQL text can hold (no
    U+0000, no lone surrogate), else :class:`InputError`."""
    if not isinstance(key, str) or not key:
        raise InputError(f"a key must be a non-empty string, got {key!r}")
    if "\x00" in key or jsontext._bad_string(key):
        raise InputError("a key cannot hold U+0000 or a lone surrogate")
    return key


def vocabulary_arg(vocab: Vocabulary) -> list[str] | None:
    """A vocabulary as ``begin_import`` takes it (``NULL`` = dynamic)."""
    return None if vocab.types is None else list(vocab.types)


TAIL_BATCH_BYTES = 8 << 20
"""A follower fetches at most this many bytes of payload past a batch's first node."""

MAX_GRAPH_NAME_BYTES = 2000
"""Longest graph name, in UTF-8 bytes (a btree index entry holds at most ~2,700)."""


def check_graph_name(graph: Any) -> str:
    """A graph name is any non-empty string PostgreSQL text can hold (no U+0000).

    Raises :class:`InputError` naming the problem; names are always bound parameters,
    so quotes, semicolons and any other character are just part of the name.
    """
    if not isinstance(graph, str) or not graph:
        raise InputError(f"a graph name must be a non-empty string, got {graph!r}")
    if "\x00" in graph or jsontext._bad_string(graph):
        raise InputError("a graph name cannot hold U+0000 or a lone surrogate")
    if len(graph.encode("utf-8")) > MAX_GRAPH_NAME_BYTES:
        raise InputError(
            f"a graph name is at most {MAX_GRAPH_NAME_BYTES} bytes of UTF-8 "
            f"(this one has {len(graph.encode('utf-8'))})"
        )
    return graph


def js_now() -> str:
    """``new Date().toISOString()``: UTC, milliseconds, ``Z``."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def as_of_args(as_of: int | datetime | None) -> tuple[int | None, datetime | None]:
    """``as_of`` checked and split into (sequence, time) query arguments, one of them set
    (or neither, for now). Raises :class:`InputError` for anything else."""
    if as_of is None:
        return None, None
    if isinstance(as_of, datetime):
        return None, check_time(as_of, "as_of")
    if not _is_count(as_of):
        raise InputError(
            f"as_of must be a sequence number from 0 to 2**63 - 1 or a datetime, got {as_of!r}"
        )
    return as_of, None


def check_time(t: datetime, name: str) -> datetime:
    """An aware datetime that has a UTC time (years 1 to 9999 there), as UTC, else
    :class:`InputError`: ``0001-01-01T00:00:00+14:00`` is before the first UTC time a
    :class:`~datetime.datetime` holds, and the drivers would fail on it each its own way."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise InputError(f"{name} time needs a time zone (RFC 3339 with an offset)")
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise InputError(
            f"{name} time {t.isoformat()} is out of range (years 1 to 9999 in UTC)"
        ) from None


def check_read_length(graph: str, seq: int | None, length: int) -> None:
    """Refuse a read as of a sequence the graph does not hold yet."""
    if seq is not None and seq > length:
        raise InputError(f"graph {graph!r} has {length} nodes; cannot read as of {seq}")


def check_tenant(tenant: Any) -> str:
    """A tenant name: a non-empty string without NUL or lone surrogates, else
    :class:`InputError`."""
    if (
        not isinstance(tenant, str)
        or not tenant
        or "\x00" in tenant
        or jsontext._bad_string(tenant)
    ):
        raise InputError(
            f"tenant must be a non-empty string without NUL or lone surrogates, got {tenant!r}"
        )
    return tenant


POOLERS = ("none", "transaction")
"""What may sit between a client and PostgreSQL: nothing (or a session-mode pooler),
or a transaction-mode pooler such as PgBouncer's ``pool_mode = transaction``."""


def check_pooler(pooler: str | None) -> bool:
    """Whether connections go through a transaction-mode pooler: ``pooler``, else the
    ``CWSTORE_POOLER`` environment variable, else ``"none"``.

    Raises :class:`InputError` for any other value than those of :data:`POOLERS`.
    """
    value = (os.environ.get("CWSTORE_POOLER") or "none") if pooler is None else pooler
    if value not in POOLERS:
        raise InputError(f"pooler must be one of {', '.join(POOLERS)}, got {value!r}")
    return value == "transaction"


def check_poll_interval(seconds: float) -> float:
    """A follower's polling interval: a positive number of seconds, at most an hour.

    Raises :class:`InputError` otherwise.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= 3600:
        raise InputError(f"poll_interval must be seconds in (0, 3600], got {seconds!r}")
    return float(seconds)


def tenant_settings(tenant: str | None) -> dict[str, str]:
    """The session settings for a store's ``tenant=`` option (``{}`` for none).

    Raises :class:`InputError` for a tenant that is not a non-empty string without NUL.
    """
    if tenant is None:
        return {}
    return {"cwstore.tenant": check_tenant(tenant)}


def timeout_settings(statement_timeout: float | None) -> dict[str, str]:
    """The session settings for a store's ``statement_timeout=`` option (seconds, more
    than 0 and at most a day; ``{}`` for none).

    Raises :class:`InputError` for anything else.
    """
    if statement_timeout is None:
        return {}
    if (
        isinstance(statement_timeout, bool)
        or not isinstance(statement_timeout, int | float)
        or not 0 < statement_timeout <= 86_400
    ):
        raise InputError(
            "statement_timeout is seconds, more than 0 and at most 86400, "
            f"got {statement_timeout!r}"
        )
    return {"statement_timeout": f"{max(1, round(statement_timeout * 1000))}ms"}


MAX_ERASE_BATCH = 2**31 - 1
"""The largest ``batch`` the erasure functions take (an SQL ``integer``)."""


def check_reason(reason: Any) -> str | None:
    """An erasure's reason: ``None`` or a string PostgreSQL text can hold, else
    :class:`InputError`."""
    if reason is None:
        return None
    if not isinstance(reason, str) or "\x00" in reason or jsontext._bad_string(reason):
        raise InputError(f"reason must be a string without NUL or lone surrogates, got {reason!r}")
    return reason


def check_batch(batch: Any) -> int:
    """A batch size of the erasure functions: an ``int`` from 1 to 2**31 - 1, else
    :class:`InputError`."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_ERASE_BATCH:
        raise InputError(f"batch must be an integer from 1 to {MAX_ERASE_BATCH}, got {batch!r}")
    return batch


def check_idle(idle: Any) -> timedelta:
    """A retention age: a :class:`~datetime.timedelta` longer than zero, else
    :class:`InputError`."""
    if not isinstance(idle, timedelta) or idle <= timedelta(0):
        raise InputError(f"idle must be a timedelta longer than zero, got {idle!r}")
    return idle


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
                    jsontext.dumps(n["payload"]),
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
        elif any(jsontext._bad_string(f) or "\x00" in f for f in frontier):
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
        json=jsontext.dumps(done),
        frontier_json=None if frontier is None else jsontext.dumps(list(frontier)),
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


BULK_ANALYZE_THRESHOLD = 10_000
"""Imports at least this large refresh the planner's statistics when they commit."""

IMPORT_CHUNK_ROWS = 20_000
"""An import COPYs its nodes in statements of this many rows, in one transaction: the
server derives one chunk (the nodes trigger) while the client checks the next."""
