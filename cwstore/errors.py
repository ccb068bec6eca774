"""Every exception cwstore raises.

One root, :class:`Error`, and a few leaves that carry data rather than prose: callers
write ``except cwstore.ConflictError as e`` and read ``e.actual_length``; tests assert
on fields, never on ``str(e)``.

The SQL functions raise their own SQLSTATEs (class ``CW``) with a JSON ``DETAIL``;
:func:`from_sqlstate` maps them back here, so asyncpg, psycopg and psql users all meet
the same rules. Every class is picklable (workers ship exceptions across processes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

__all__ = [
    "AppendOnlyError",
    "ChainConflictError",
    "ConflictError",
    "DatabaseError",
    "DivergedError",
    "Error",
    "GraphErasedError",
    "GraphExistsError",
    "InputError",
    "LengthConflictError",
    "MigrationError",
    "MissingExtraError",
    "PermissionDeniedError",
    "SchemaNotReadyError",
    "StoreTimeoutError",
    "UnknownGraphError",
    "ValidationError",
    "Violation",
    "from_sqlstate",
    "map_error",
    "renumber",
]


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule of a document or batch.

    ``code`` is one of the stable safeguard codes of SPEC section 6 (``version``,
    ``kind``, ``semantic_payload``, ``semantic_type``, ``duplicate_id``,
    ``missing_parent``, ``parent_order``, ``identity``, ``sequence``, ``created_at``,
    ``resource_chain``, ``frontier_reference``, ``unrepresentable``, ``shape``).
    ``index`` is the node's position in the list it came in (``None`` for
    document-level problems), ``node_id`` its ``id`` when it has a string one, and
    ``path`` a JSON path such as ``$.nodes[3].payload.args[0]``.
    """

    code: str
    index: int | None
    node_id: str | None
    path: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = f"node {self.index}" if self.index is not None else "document"
        if self.node_id:
            where += f" ({self.node_id})"
        return f"{self.code}: {where} at {self.path}: {self.message}"


class Error(Exception):
    """Root of every cwstore exception."""

    sqlstate: str | None = None
    """The SQLSTATE this class stands for (the server's own code on a :class:`DatabaseError`)."""
    _by_sqlstate: ClassVar[dict[str, type[Error]]] = {}

    def __init_subclass__(cls, sqlstate: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A leaf without a code of its own keeps its parent's (GraphErasedError is a
        # CW404 too) but is never what the code maps to: its parent picks it by DETAIL.
        if sqlstate is not None:
            cls.sqlstate = sqlstate
            Error._by_sqlstate[sqlstate] = cls

    def __init__(self, message: str | None = None) -> None:
        self.message = message or (type(self).__doc__ or type(self).__name__).strip()
        super().__init__(self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy()))

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        """Build the exception from a SQL error's message and JSON detail."""
        return cls(message)


def _rebuild(cls: type[Error], state: dict[str, Any]) -> Error:
    obj = cls.__new__(cls)
    Exception.__init__(obj, state.get("message", ""))
    obj.__dict__.update(state)
    return obj


class InputError(Error, ValueError):
    """A bad argument, or input that is not even a JSON document of the expected kind
    (also a :class:`ValueError`)."""


class ValidationError(Error, sqlstate="CW400"):
    """A document or batch broke the store's rules; nothing was written.

    ``violations`` lists every problem found, not only the first.
    """

    def __init__(self, violations: Iterable[Violation], message: str | None = None) -> None:
        self.violations: list[Violation] = list(violations)
        if message is None:
            n = len(self.violations)
            first = f": {self.violations[0]}" if self.violations else ""
            more = f" (and {n - 1} more)" if n > 1 else ""
            message = f"{n} violation{'s' if n != 1 else ''}{first}{more}"
        super().__init__(message)

    @property
    def codes(self) -> list[str]:
        return [v.code for v in self.violations]

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        items = detail.get("violations") or [detail]
        return cls(
            [
                Violation(
                    code=str(v.get("code", "shape")),
                    index=v.get("index"),
                    node_id=v.get("node_id"),
                    path=str(v.get("path", "$")),
                    message=str(v.get("message", message)),
                )
                for v in items
            ],
            message=message,
        )


class ConflictError(Error):
    """A concurrent writer got there first; nothing was written. Re-read and retry."""

    def __init__(self, message: str | None = None, *, graph: str | None = None) -> None:
        self.graph = graph
        super().__init__(message)


class DivergedError(ConflictError):
    """The saved state does not extend the stored graph (it branched off); nothing
    was written. ``position`` is the first sequence where they differ."""

    def __init__(
        self,
        message: str | None = None,
        *,
        graph: str | None = None,
        position: int | None = None,
        stored_length: int | None = None,
    ) -> None:
        self.position = position
        self.stored_length = stored_length
        super().__init__(
            message
            or f"state does not extend graph {graph!r}: it differs at sequence {position} "
            f"(stored length {stored_length})",
            graph=graph,
        )


class LengthConflictError(ConflictError, sqlstate="CW409"):
    """The graph grew past the length the writer expected."""

    def __init__(
        self,
        message: str | None = None,
        *,
        graph: str | None = None,
        expected_length: int | None = None,
        actual_length: int | None = None,
    ) -> None:
        self.expected_length = expected_length
        self.actual_length = actual_length
        if message is None:
            message = (
                f"graph {graph!r} has length {actual_length}, the writer expected {expected_length}"
            )
        super().__init__(message, graph=graph)

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        return cls(
            message,
            graph=detail.get("graph"),
            expected_length=detail.get("expected_length"),
            actual_length=detail.get("actual_length"),
        )


class ChainConflictError(ConflictError, sqlstate="CW410"):
    """Two writers extended the same resource or semantic key from the same head.

    ``key`` is the resource key, ``linked_head`` the head the refused node linked to
    (``None`` when it started the key) and ``current_head`` the head now stored.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        graph: str | None = None,
        key: str | None = None,
        linked_head: str | None = None,
        current_head: str | None = None,
        node_id: str | None = None,
    ) -> None:
        self.key = key
        self.linked_head = linked_head
        self.current_head = current_head
        self.node_id = node_id
        if message is None:
            message = (
                f"key {key!r} moved on: the node links to {linked_head}, "
                f"the current head is {current_head}"
            )
        super().__init__(message, graph=graph)

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        return cls(
            message,
            graph=detail.get("graph"),
            key=detail.get("key"),
            linked_head=detail.get("linked_head"),
            current_head=detail.get("current_head"),
            node_id=detail.get("node_id"),
        )


class UnknownGraphError(Error, sqlstate="CW404"):
    """The graph does not exist (or belongs to a tenant the role may not read: the
    answer is the same, so it never tells that a name exists elsewhere)."""

    def __init__(self, message: str | None = None, *, graph: str | None = None) -> None:
        self.graph = graph
        super().__init__(message or f"graph {graph!r} does not exist")

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        if detail.get("erased") is True:
            return GraphErasedError(message, graph=detail.get("graph"))
        return cls(message, graph=detail.get("graph"))


class GraphErasedError(UnknownGraphError):
    """The life of the graph this call worked on was erased (``cwstore erase``,
    :meth:`AsyncStore.erase`); nothing more of it will be read or written.

    Raised by :meth:`AsyncStore.tail` when the graph it follows is erased (even when a
    new graph of the same name exists: the tail never delivers its nodes), and by a
    write that lost its graph to a concurrent erasure (SQLSTATE ``CW404`` whose DETAIL
    says ``"erased": true``); such a write wrote nothing. An :class:`UnknownGraphError`,
    so code that handles a missing graph handles this one too.
    """

    def __init__(self, message: str | None = None, *, graph: str | None = None) -> None:
        super().__init__(message or f"graph {graph!r} was erased", graph=graph)


class GraphExistsError(Error, sqlstate="CW412"):
    """Import refused: the graph already holds nodes."""

    def __init__(
        self, message: str | None = None, *, graph: str | None = None, length: int | None = None
    ) -> None:
        self.graph = graph
        self.length = length
        super().__init__(
            message or f"graph {graph!r} already holds {length} nodes; import needs an empty graph"
        )

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        return cls(message, graph=detail.get("graph"), length=detail.get("length"))


class PermissionDeniedError(Error, sqlstate="42501"):
    """The role may not do this: a write to another tenant's graph, a table or function
    its grants do not cover (a reader appending, a writer touching a table directly).

    ``graph`` and ``role`` are set when a write function refused a tenant's graph;
    nothing was written or locked.
    """

    def __init__(
        self, message: str | None = None, *, graph: str | None = None, role: str | None = None
    ) -> None:
        self.graph = graph
        self.role = role
        super().__init__(message or f"role {role!r} may not write graph {graph!r}")

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        return cls(message, graph=detail.get("graph"), role=detail.get("role"))


class AppendOnlyError(Error, sqlstate="CW403"):
    """History is append-only: the database refused an UPDATE, DELETE or TRUNCATE of
    ``table`` (and ``graph``, for a graph's row); nothing changed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        table: str | None = None,
        operation: str | None = None,
        graph: str | None = None,
    ) -> None:
        self.table = table
        self.operation = operation
        self.graph = graph
        super().__init__(message or f"cwstore.{table} is append-only: {operation} refused")

    @classmethod
    def from_detail(cls, message: str, detail: Mapping[str, Any]) -> Error:
        return cls(
            message,
            table=detail.get("table"),
            operation=detail.get("operation"),
            graph=detail.get("graph"),
        )


class MissingExtraError(Error):
    """A feature needs an optional part of cwstore that is not installed; ``extra`` names
    it (``pip install 'cwstore[<extra>]'``)."""

    def __init__(self, message: str | None = None, *, extra: str | None = None) -> None:
        self.extra = extra
        super().__init__(
            message or f"this needs the {extra!r} extra: pip install 'cwstore[{extra}]'"
        )


class MigrationError(Error):
    """The schema cannot be brought up to date safely."""

    def __init__(self, message: str, version: int | None = None) -> None:
        self.version = version
        super().__init__(message)


class SchemaNotReadyError(MigrationError):
    """The database has no cwstore schema, or one older than this package: run
    ``cwstore init`` (or connect with ``migrate_schema=True``)."""


class StoreTimeoutError(Error):
    """A lock or statement timeout expired; nothing was written."""

    def __init__(self, message: str | None = None, *, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class DatabaseError(Error):
    """Any other error from PostgreSQL or the driver; ``__cause__`` is the original."""

    def __init__(
        self,
        message: str | None = None,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        constraint: str | None = None,
    ) -> None:
        self.sqlstate = sqlstate
        self.detail = detail
        self.constraint = constraint
        super().__init__(message)


def from_sqlstate(
    sqlstate: str | None,
    message: str,
    detail: str | None = None,
    constraint: str | None = None,
) -> Error:
    """Map a server error to the cwstore exception for its SQLSTATE.

    cwstore's SQL raises ``CWnnn`` codes with a JSON object in ``DETAIL``; the
    timeouts (``55P03`` lock, ``57014`` statement) become :class:`StoreTimeoutError`;
    anything else is a :class:`DatabaseError` keeping the code and detail.
    """
    cls = Error._by_sqlstate.get(sqlstate or "")
    if cls is not None:
        try:
            parsed = json.loads(detail) if detail else {}
        except ValueError:
            parsed = {}
        if not isinstance(parsed, dict):
            parsed = {}
        return cls.from_detail(message, parsed)
    if sqlstate in ("55P03", "57014"):
        return StoreTimeoutError(message, sqlstate=sqlstate)
    return DatabaseError(message, sqlstate=sqlstate, detail=detail, constraint=constraint)


_CONSTRAINT_CODES: Mapping[str, tuple[str, str]] = {
    "nodes_kind_check": ("kind", "$.kind"),
    "nodes_id_check": ("identity", "$.id"),
    "nodes_created_at_check": ("created_at", "$.createdAt"),
    "nodes_id_key": ("duplicate_id", "$.id"),
    "nodes_pkey": ("sequence", "$.sequence"),
    "nodes_seq_check": ("sequence", "$.sequence"),
    "nodes_resource_key_check": ("shape", "$.resourceKey"),
    "graphs_vocabulary_check": ("shape", "$.vocabulary"),
    "erasures_reason_check": ("shape", "$.reason"),
}
"""Named constraints of the node tables (and the rules of a node row the nodes trigger
refuses by such a name) and the safeguard code each one holds."""

_UNREPRESENTABLE = frozenset({"22P02", "22P05", "22021"})
"""Text the server cannot read as JSON or hold as text (invalid syntax, U+0000, a
character outside the encoding): the only text the store sends for casting is payloads."""

_BAD_TIME = frozenset({"22007", "22008", "22009"})
"""A ``createdAt`` the server cannot read as a time."""


def map_error(
    sqlstate: str | None,
    message: str,
    detail: str | None = None,
    constraint: str | None = None,
) -> Error:
    """The one map from a server error to a cwstore exception, by SQLSTATE and
    constraint name only (never by message text).

    A violated constraint of the node tables becomes a :class:`ValidationError` with
    the safeguard code it holds; unreadable JSON text or times likewise; everything else
    goes through :func:`from_sqlstate`.
    """
    if constraint is not None and constraint in _CONSTRAINT_CODES:
        code, path = _CONSTRAINT_CODES[constraint]
        return ValidationError([Violation(code, None, None, path, message)])
    if sqlstate in _UNREPRESENTABLE:
        return ValidationError([Violation("unrepresentable", None, None, "$.payload", message)])
    if sqlstate in _BAD_TIME:
        return ValidationError([Violation("created_at", None, None, "$.createdAt", message)])
    return from_sqlstate(sqlstate, message, detail, constraint)


def renumber(err: Error, batch_ids: Sequence[str]) -> Error:
    """``err`` with each violation's node index set to the node's position in the batch
    (found by its id), for errors the database raised about a batch it numbered itself."""
    if isinstance(err, ValidationError) and batch_ids:
        index = {nid: i for i, nid in enumerate(batch_ids)}
        err.violations = [
            Violation(v.code, index.get(v.node_id or "", v.index), v.node_id, v.path, v.message)
            for v in err.violations
        ]
    return err
