"""AgentState v1 and CausalNode: the runtime's document as typed Python values.

The models read and write exactly the runtime's JSON (SPEC section 1): node fields in
the order ``id, kind, parents, payload, createdAt, sequence, resourceKey``;
``resourceKey`` absent, never ``null``, when a node has none; payload members in
their order; frontier in its order. Python attribute names are snake_case, the JSON
names are the runtime's camelCase aliases.

Parsing goes through :func:`cwstore.rules.validate` first, so malformed input is a
:class:`cwstore.ValidationError` listing every violation, never a pydantic traceback.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from . import jsontext

__all__ = ["KINDS", "AgentState", "CausalNode", "Kind"]

Kind = Literal[
    "system",
    "goal",
    "inference",
    "answer",
    "tool_call",
    "tool_result",
    "resource",
    "semantic",
    "protocol_error",
    "verification",
]

KINDS: tuple[str, ...] = get_args(Kind)
"""The ten kinds, in the order the runtime documents them."""


class CausalNode(BaseModel):
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
        return jsontext.dumps(self.to_obj())

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> CausalNode:
        """Build from a runtime JSON object that has already passed validation.

        What :meth:`model_construct` does for this model, without its per-field loop
        over aliases and defaults (most of the time of reading a state back): the
        instance gets the same ``__dict__``, fields-set, extra and private slots.
        ``tests/unit/test_model_construct.py`` holds the two equal.
        """
        key = obj.get("resourceKey")
        node = _new(cls)
        _setattr(
            node,
            "__dict__",
            {
                "id": obj["id"],
                "kind": obj["kind"],
                "parents": tuple(obj["parents"]),
                "payload": obj["payload"],
                "created_at": obj["createdAt"],
                "sequence": int(obj["sequence"]),
                "resource_key": key,
            },
        )
        _setattr(node, "__pydantic_fields_set__", set(_ALL_FIELDS if key is not None else _NO_KEY))
        _setattr(node, "__pydantic_extra__", None)
        _setattr(node, "__pydantic_private__", None)
        return node


_new = object.__new__
_setattr = object.__setattr__
_ALL_FIELDS = frozenset(CausalNode.model_fields)
_NO_KEY = _ALL_FIELDS - {"resource_key"}
assert not CausalNode.__pydantic_post_init__, "CausalNode.from_obj skips model_post_init"


class AgentState(BaseModel):
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
        return jsontext.dumps(self.to_obj())

    @classmethod
    def from_obj(cls, obj: Any, *, vocabulary: Any = None) -> AgentState:
        """Validate parsed JSON and build the model.

        Raises :class:`cwstore.ValidationError` with every violation found.
        """
        from .errors import ValidationError
        from .rules import Vocabulary, validate

        vocab = vocabulary if vocabulary is not None else Vocabulary.dynamic()
        violations = validate(obj, vocabulary=vocab)
        if violations:
            raise ValidationError(violations)
        return cls.model_construct(
            version=1,
            nodes=tuple(CausalNode.from_obj(n) for n in obj["nodes"]),
            frontier=tuple(obj["frontier"]),
        )

    @classmethod
    def from_json(cls, text: str | bytes, *, vocabulary: Any = None) -> AgentState:
        """Parse, validate and build. Raises :class:`cwstore.InputError` for non-JSON
        text and :class:`cwstore.ValidationError` for a document that breaks a rule."""
        from .rules import parse_document

        return cls.from_obj(parse_document(text), vocabulary=vocabulary)
