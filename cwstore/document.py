"""AgentState v1: the runtime's document as typed values, and where its rules are found.

The models read and write exactly the runtime's JSON (SPEC section 1): node fields in
the order ``id, kind, parents, payload, createdAt, sequence, resourceKey``;
``resourceKey`` absent, never ``null``, when a node has none; payload members in
their order; frontier in its order. Python attribute names are snake_case, the JSON
names are the runtime's camelCase aliases. Parsing goes through :func:`validate`
first, so malformed input is a :class:`cwstore.ValidationError` listing every
violation, never a pydantic traceback.

:data:`NodeLike` and :data:`StateLike` name what a store takes as a node and as a whole
state.

The rules (pure, no I/O) are written in :mod:`cwstore._rules` and imported from here:

* :func:`validate` checks every safeguard of SPEC section 6 and reports **every**
  violation (code, node index, node id, JSON path, message). It takes parsed JSON (or
  an :class:`AgentState`), so malformed input becomes ``shape`` violations, not
  exceptions.
* :func:`fold_frontier` is SPEC section 4's default frontier fold.
* :func:`check_nodes` is the per-node part, reused for append batches against an
  existing graph's ids and key heads.
* :class:`Vocabulary` is a graph's semantic-type policy: dynamic (the default: any
  well-formed type) or a fixed list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer

from . import _jsontext
from ._rules import (
    BUILTIN_TYPES,
    KINDS,
    MAX_PAYLOAD_BYTES,
    NODE_FIELDS,
    RESOURCE_KEY_MAX_BYTES,
    CheckState,
    Kind,
    Vocabulary,
    check_nodes,
    fold_frontier,
    is_sorted_js,
    resource_heads,
    semantic_resource_key,
    sort_parents,
    validate,
    validate_in_slices,
)

# Names that were public here before the rules moved to cwstore._rules (still
# importable from here), and the bases by which the rules know the models.
from ._rules import MAX_VOCABULARY as MAX_VOCABULARY
from ._rules import SEMANTIC_CONTENT_MAX as SEMANTIC_CONTENT_MAX
from ._rules import SEMANTIC_KEY_RE as SEMANTIC_KEY_RE
from ._rules import SEMANTIC_TYPE_RE as SEMANTIC_TYPE_RE
from ._rules import Bad as Bad
from ._rules import NodeModel as _NodeModel
from ._rules import StateModel as _StateModel
from ._rules import check_frontier as check_frontier
from .errors import InputError, ValidationError
from .errors import Violation as Violation
from .identity import identity_digest as identity_digest

__all__ = [
    "BUILTIN_TYPES",
    "KINDS",
    "MAX_PAYLOAD_BYTES",
    "NODE_FIELDS",
    "RESOURCE_KEY_MAX_BYTES",
    "AgentState",
    "CausalNode",
    "CheckState",
    "Kind",
    "NodeLike",
    "StateLike",
    "Vocabulary",
    "check_nodes",
    "fold_frontier",
    "is_sorted_js",
    "nodes_from_objs",
    "parse_document",
    "resource_heads",
    "semantic_resource_key",
    "sort_parents",
    "validate",
    "validate_in_slices",
]


class CausalNode(BaseModel, _NodeModel):
    """One node of the causal graph, content-addressed by ``id``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str
    kind: Kind
    parents: tuple[str, ...]
    payload: Any
    created_at: str = Field(alias="createdAt")
    sequence: int
    resource_key: str | None = Field(default=None, alias="resourceKey")

    @model_serializer(mode="plain")
    def _to_runtime(self) -> dict[str, Any]:
        return self.to_obj()

    def to_obj(self) -> dict[str, Any]:
        """The node as the runtime's JSON object, fields in the runtime's order."""
        obj: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "parents": list(self.parents),
            "payload": self.payload,
            "createdAt": self.created_at,
            "sequence": self.sequence,
        }
        if self.resource_key is not None:
            obj["resourceKey"] = self.resource_key
        return obj

    def to_json(self) -> str:
        """Compact JSON exactly as the runtime's ``JSON.stringify`` writes the node."""
        return _jsontext.dumps(self.to_obj())

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> CausalNode:
        """Build from a runtime JSON object that has already passed validation.

        :meth:`model_construct` with the runtime's names mapped to the fields, and
        ``resource_key`` marked unset when the node has none. Every field is passed and
        the fields-set given, so pydantic looks up no default (reading a state back is
        mostly this call).
        """
        key = obj.get("resourceKey")
        return cls.model_construct(
            set(_NODE_FIELDS_SET if key is not None else _NODE_FIELDS_SET_NO_KEY),
            id=obj["id"],
            kind=obj["kind"],
            parents=tuple(obj["parents"]),
            payload=obj["payload"],
            created_at=obj["createdAt"],
            sequence=int(obj["sequence"]),
            resource_key=key,
        )


_NODE_FIELDS_SET = frozenset(CausalNode.model_fields)
_NODE_FIELDS_SET_NO_KEY = _NODE_FIELDS_SET - {"resource_key"}
_NODE_TUPLE = TypeAdapter(tuple[CausalNode, ...])


def nodes_from_objs(objs: Sequence[Mapping[str, Any]]) -> tuple[CausalNode, ...]:
    """:class:`CausalNode` models of runtime JSON objects that have already passed
    validation, built by pydantic's compiled validator in one call (reading a state back
    is mostly this; it is about twice as fast as :meth:`CausalNode.from_obj` per node).
    The models equal :meth:`CausalNode.from_obj`'s, fields-set included."""
    return _NODE_TUPLE.validate_python(objs)


class AgentState(BaseModel, _StateModel):
    """The runtime's whole document: ``{version: 1, nodes, frontier}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    nodes: tuple[CausalNode, ...] = ()
    frontier: tuple[str, ...] = ()

    @model_serializer(mode="plain")
    def _to_runtime(self) -> dict[str, Any]:
        return self.to_obj()

    def to_obj(self) -> dict[str, Any]:
        """The document as plain JSON values, in the runtime's field order."""
        return {
            "version": 1,
            "nodes": [n.to_obj() for n in self.nodes],
            "frontier": list(self.frontier),
        }

    def to_json(self) -> str:
        """Compact JSON as the runtime writes it; ``from_json(to_json())`` is exact."""
        return _jsontext.dumps(self.to_obj())

    @classmethod
    def from_obj(cls, obj: Any, *, vocabulary: Vocabulary | None = None) -> AgentState:
        """Validate parsed JSON and build the model.

        Raises :class:`cwstore.ValidationError` with every violation found.
        """
        vocab = vocabulary if vocabulary is not None else Vocabulary.dynamic()
        violations = validate(obj, vocabulary=vocab)
        if violations:
            raise ValidationError(violations)
        return cls.model_construct(
            version=1,
            nodes=nodes_from_objs(obj["nodes"]),
            frontier=tuple(obj["frontier"]),
        )

    @classmethod
    def from_json(cls, text: str | bytes, *, vocabulary: Vocabulary | None = None) -> AgentState:
        """Parse, validate and build. Raises :class:`cwstore.InputError` for non-JSON
        text and :class:`cwstore.ValidationError` for a document that breaks a rule."""
        return cls.from_obj(parse_document(text), vocabulary=vocabulary)


NodeLike: TypeAlias = CausalNode | Mapping[str, Any]
"""What a store takes as a node to append: a :class:`CausalNode` or its JSON object (a
dict), in which ``id``, ``sequence`` and ``createdAt`` may be left out."""

StateLike: TypeAlias = AgentState | Mapping[str, Any] | str | bytes | bytearray
"""What a store takes as a whole state: an :class:`AgentState`, parsed AgentState v1
JSON (a dict), or its JSON text."""


def parse_document(text: str | bytes) -> Any:
    """Decode and parse a document's text, or raise :class:`cwstore.InputError`.

    Bytes must be UTF-8 (a byte order mark is refused, as ``JSON.parse`` refuses it).
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"input is not UTF-8 text (invalid byte 0x{exc.object[exc.start]:02x} "
                f"at offset {exc.start})"
            ) from None
    if text.startswith("\ufeff"):
        raise InputError("input starts with a byte order mark; JSON text must not")
    if not text.strip():
        raise InputError("input is empty: expected an AgentState JSON document")
    try:
        return _jsontext.loads(text)
    except _jsontext.JSONTextError as exc:
        raise InputError(f"input is not valid JSON: {exc}") from None
