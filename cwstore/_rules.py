"""The rules of AgentState v1 over the runtime's JSON (pure, no I/O): its kinds and
limits, the order of parents, the frontier fold and every safeguard of SPEC section 6.

The models and parsing are :mod:`cwstore.document`, which re-exports every public name
here (import them from there). The rules are the oracle: the database enforces the same
invariants in SQL, and the database tests compare what PostgreSQL materializes against
what these functions compute.

* :func:`validate` checks every safeguard of SPEC section 6 and reports **every**
  violation (code, node index, node id, JSON path, message). It takes parsed JSON (or
  an :class:`~cwstore.document.AgentState`), so malformed input becomes ``shape``
  violations, not exceptions.
* :func:`fold_frontier` is SPEC section 4's default frontier fold.
* :func:`check_nodes` is the per-node part, reused for append batches against an
  existing graph's ids and key heads.
* :class:`Vocabulary` is a graph's semantic-type policy: dynamic (the default: any
  well-formed type) or a fixed list.

The rules read the models of :mod:`cwstore.document` without importing it (it imports
this module): a node model is a :class:`NodeModel`, a document model a
:class:`StateModel`, and each gives its runtime JSON with ``to_obj()``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, cast, get_args

from . import _jsontext
from .errors import InputError, Violation
from .identity import identity_digest

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


class NodeModel:
    """What the rules know of :class:`cwstore.document.CausalNode` (its base): a node
    given as a model, read as its runtime JSON object."""

    __slots__ = ()

    def to_obj(self) -> dict[str, Any]:
        raise NotImplementedError


class StateModel:
    """What the rules know of :class:`cwstore.document.AgentState` (its base): a
    document given as a model, read as its runtime JSON object."""

    __slots__ = ()

    def to_obj(self) -> dict[str, Any]:
        raise NotImplementedError


BUILTIN_TYPES: tuple[str, ...] = ("memory", "preference", "wisdom", "artifact")
NODE_FIELDS: tuple[str, ...] = (
    "id",
    "kind",
    "parents",
    "payload",
    "createdAt",
    "sequence",
    "resourceKey",
)
_REQUIRED_NODE_FIELDS = NODE_FIELDS[:-1]
_TOP_FIELDS = ("version", "nodes", "frontier")
_KIND_SET = frozenset(KINDS)

SEMANTIC_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]{0,47}\Z")
SEMANTIC_KEY_RE = re.compile(r"[a-z0-9_./:-]{1,120}\Z")
SEMANTIC_CONTENT_MAX = 100_000
RESOURCE_KEY_MAX_BYTES = 2000
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
"""The largest payload, in bytes of its JSON text as ``JSON.stringify`` writes it (UTF-8):
the validator and every SQL door (``cwstore.max_payload_bytes()``) refuse a larger one
(``too_large``), so that no single node costs a backend more than a bounded amount of
memory (docs/reliability.md)."""
"""Longest resourceKey, in UTF-8 bytes: the key is indexed, and a btree entry holds at
most about 2,700 bytes. The database refuses longer keys with the same number."""
MAX_VOCABULARY = 32

# RFC 3339 date-time with a zone ("Z" or ±hh:mm); "T" or " " is not allowed, only T/t.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$"
)


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """A graph's semantic-type policy: ``types is None`` means dynamic."""

    types: tuple[str, ...] | None = None
    descriptions: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def dynamic(cls) -> Vocabulary:
        """Any well-formed type (``^[a-z][a-z0-9_-]{0,47}$``): the store's default."""
        return cls(None)

    @classmethod
    def builtin(cls) -> Vocabulary:
        """The runtime's built-in fixed list: memory, preference, wisdom, artifact."""
        return cls(BUILTIN_TYPES)

    @classmethod
    def fixed(cls, names: Iterable[str]) -> Vocabulary:
        """A fixed list of 1 to 32 semantic types, as the runtime's ``nodeTypes``.

        Raises :class:`cwstore.InputError` (a :class:`ValueError`) for an empty or too
        long list, a malformed name or a name listed twice.
        """
        if isinstance(names, str):
            raise InputError("a fixed vocabulary is a list of type names, not one string")
        return cls.from_node_types([{"name": n} for n in names], "fixed vocabulary")

    @classmethod
    def from_node_types(cls, value: Any, source: str = "node types") -> Vocabulary:
        """Read the runtime's ``nodeTypes`` list: ``[{name, description}]``, at most 32.

        Raises :class:`cwstore.InputError` naming the bad entry.
        """
        if not isinstance(value, list):
            raise InputError(f"{source}: expected a JSON list of {{name, description}}")
        if not value or len(value) > MAX_VOCABULARY:
            raise InputError(f"{source}: needs 1 to {MAX_VOCABULARY} entries, got {len(value)}")
        names: list[str] = []
        descs: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise InputError(f"{source}[{i}]: expected an object with a string 'name'")
            extra = set(item) - {"name", "description"}
            if extra:
                raise InputError(f"{source}[{i}]: unknown field(s) {sorted(extra)}")
            name = item["name"]
            if not SEMANTIC_TYPE_RE.match(name):
                raise InputError(
                    f"{source}[{i}]: type name {name!r} must match ^[a-z][a-z0-9_-]{{0,47}}$"
                )
            if name in names:
                raise InputError(f"{source}[{i}]: type {name!r} listed twice")
            desc = item.get("description", "")
            if not isinstance(desc, str):
                raise InputError(f"{source}[{i}]: description must be a string")
            names.append(name)
            descs.append(desc)
        return cls(tuple(names), tuple(descs))

    @property
    def is_fixed(self) -> bool:
        return self.types is not None

    def allows(self, semantic_type: str) -> bool:
        if not SEMANTIC_TYPE_RE.match(semantic_type):
            return False
        return self.types is None or semantic_type in self.types


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def is_sorted_js(items: Sequence[str]) -> bool:
    """Sorted ascending as JavaScript compares strings (UTF-16 code units)."""
    for a, b in itertools.pairwise(items):
        if a.isascii() and b.isascii():
            if a > b:
                return False
        elif _utf16(a) > _utf16(b):
            return False
    return True


def sort_parents(parents: Iterable[str]) -> list[str]:
    """Unique and sorted the way the runtime stores them (``Array.prototype.sort``)."""
    return sorted(set(parents), key=_utf16)


def semantic_resource_key(semantic_type: str, key: str) -> str:
    return f"semantic:{semantic_type}:{key}"


def _as_obj(node: Any) -> Any:
    return node.to_obj() if isinstance(node, NodeModel) else node


def fold_frontier(nodes: Iterable[Any], start: Iterable[str] = ()) -> list[str]:
    """SPEC section 4's default fold, in sequence order; heads in the order they joined.

    ``semantic`` nodes and parentless ``system`` nodes leave the frontier alone; every
    other node replaces its parents with itself. Accepts nodes as runtime JSON objects
    or :class:`~cwstore.document.CausalNode`.
    """
    heads: dict[str, None] = dict.fromkeys(start)
    for raw in nodes:
        node = _as_obj(raw)
        kind = node["kind"]
        parents = node["parents"]
        if kind == "semantic" or (kind == "system" and not parents):
            continue
        for p in parents:
            heads.pop(p, None)
        heads.setdefault(node["id"], None)
    return list(heads)


def resource_heads(nodes: Iterable[Any]) -> dict[str, str]:
    """Each resource key's head (its latest node) after the given nodes."""
    heads: dict[str, str] = {}
    for raw in nodes:
        node = _as_obj(raw)
        key = node.get("resourceKey")
        if isinstance(key, str):
            heads[key] = node["id"]
    return heads


def _valid_time(value: str) -> bool:
    m = _RFC3339.match(value)
    if m is None:
        return False
    try:
        datetime.fromisoformat(
            f"{m[1]}-{m[2]}-{m[3]}T{m[4]}:{m[5]}:{min(int(m[6]), 59):02d}"
            + ("+00:00" if m[8] in "Zz" else m[8])
        )
    except ValueError:
        return False
    # Date.parse (the runtime's check) refuses second 60, so a leap second is refused too.
    return int(m[6]) <= 59 and (m[9] is None or (int(m[9]) <= 23 and int(m[10]) <= 59))


def _json_length(value: Any) -> int:
    text = _jsontext.dumps(value)
    return len(text) if text.isascii() else len(_utf16(text)) // 2


@dataclass
class CheckState:
    """What :func:`check_nodes` has learnt so far, for checking a list in slices.

    ``seen`` maps ids to sequences, ``heads`` each resource key to its head, and
    ``all_ids`` holds every id of the whole list (to tell a later parent from a
    missing one).
    """

    seen: dict[str, int] = field(default_factory=dict)
    heads: dict[str, str] = field(default_factory=dict)
    all_ids: set[Any] | None = None

    @classmethod
    def for_document(cls, nodes: Sequence[Any]) -> CheckState:
        return cls(all_ids=_ids_of(nodes))


def _ids_of(nodes: Sequence[Any]) -> set[Any]:
    return {
        n.get("id")
        for n in (_as_obj(x) for x in nodes)
        if isinstance(n, dict) and _is_str(n.get("id"))
    }


def check_nodes(
    nodes: Sequence[Any],
    *,
    vocabulary: Vocabulary,
    known_ids: Mapping[str, int] | None = None,
    heads: Mapping[str, str] | None = None,
    first_sequence: int = 1,
    path: str = "$.nodes",
    require_sequence: bool = True,
    state: CheckState | None = None,
    offset: int = 0,
    optional_fields: frozenset[str] = frozenset(),
    fill_ids: bool = False,
) -> list[Violation]:
    """Check nodes in order against what came before them.

    ``known_ids`` maps ids already in the graph to their sequence, ``heads`` maps each
    resource key to its current head; the node at list index ``i`` must carry
    ``sequence == first_sequence + i`` when ``require_sequence``. To check a long list
    in slices (while a bulk load streams), pass the same ``state`` and each slice's
    ``offset`` in the whole list. Fields in ``optional_fields`` may be absent (an append
    batch's ``id`` and ``sequence``: computed or assigned by the store).

    With ``fill_ids``, a node without an ``id`` (a dict the caller owns) gets the id of
    its content, computed once, when its kind, parents, payload and key pass; later
    nodes may name it as a parent, and a parent that only a later node's computed id
    matches is reported as ``parent_order``, as a given id would be.
    """
    out: list[Violation] = []
    # (position in out, parent id) of each missing_parent, for fill_ids to revisit.
    unresolved: list[tuple[int, str]] = []
    filled: set[str] = set()
    if state is None:
        state = CheckState(dict(known_ids or {}), dict(heads or {}))
    if state.all_ids is None:
        state.all_ids = _ids_of(nodes)
    for i, raw in enumerate(nodes, start=offset):
        expected_seq = first_sequence + i if require_sequence else None
        nid, computed = _check_node(
            _as_obj(raw),
            f"{path}[{i}]",
            i,
            out,
            state,
            vocabulary,
            expected_seq,
            optional_fields,
            unresolved if fill_ids else None,
        )
        if nid is not None:
            state.seen.setdefault(nid, first_sequence + i)
        if computed:
            filled.add(cast(str, nid))
    for k, p in unresolved:
        if p in filled:
            out[k] = replace(
                out[k], code="parent_order", message=f"parent {p} comes later in sequence"
            )
    return out


Bad = Callable[[str, str, str], None]
"""Report one violation of the node being checked: (code, path, message)."""


def _check_node(
    node: Any,
    np: str,
    i: int,
    out: list[Violation],
    state: CheckState,
    vocabulary: Vocabulary,
    expected_seq: int | None,
    optional_fields: frozenset[str],
    unresolved: list[tuple[int, str]] | None,
) -> tuple[str | None, bool]:
    """Check one node at path ``np`` (index ``i``), appending its violations to ``out``;
    returns its id (None when it has none) and whether this check computed it (when
    ``unresolved`` is given, which is ``fill_ids``, for a node without one)."""
    node_id = node.get("id") if isinstance(node, dict) else None
    nid = node_id if _is_str(node_id) else None
    first = len(out)

    def bad(code: str, where: str, message: str) -> None:
        out.append(Violation(code, i, nid, where, message))

    if not isinstance(node, dict):
        bad("shape", np, f"node must be a JSON object, got {_type_name(node)}")
        return None, False
    _check_fields(node, np, bad, optional_fields)
    id_ok = _check_id(node, np, bad, state.seen)
    kind = node.get("kind")
    kind_ok = _check_kind(node, np, bad)
    parents = node.get("parents")
    parents_ok = _check_parents(node, np, bad, state, out, unresolved)
    payload_ok = _check_payload(node, np, bad)
    _check_created(node, np, bad)
    _check_sequence(node, np, bad, expected_seq)
    rkey, rkey_ok = _check_resource_key(node, np, bad)
    if kind == "semantic" and payload_ok:
        _check_semantic(node, np, rkey, vocabulary, bad)
    if rkey is not None and parents_ok:
        _check_chain(np, bad, rkey, cast(list[str], parents), state.heads)

    computed_id = False
    if (
        kind_ok
        and parents_ok
        and payload_ok
        and rkey_ok
        and (id_ok or (unresolved is not None and "id" not in node))
    ):
        computed, hashed = identity_digest(
            cast(str, kind), cast(list[str], parents), node["payload"], rkey
        )
        _check_size(node, np, bad, hashed)
        if id_ok and computed != node_id:
            bad(
                "identity",
                f"{np}.id",
                f"id {node_id} does not match the content's identity {computed}",
            )
        elif not id_ok:
            nid = node["id"] = computed
            computed_id = True
            for k in range(first, len(out)):
                out[k] = replace(out[k], node_id=nid)
    if rkey is not None and nid is not None:
        state.heads[rkey] = nid
    return nid, computed_id


def _check_fields(node: dict[str, Any], np: str, bad: Bad, optional: frozenset[str]) -> None:
    if isinstance(node, _jsontext.DuplicateKeysDict):
        bad("shape", np, _repeats("node", node))
    for name in node:
        if name not in NODE_FIELDS:
            bad("shape", _jsontext.path_key(np, name), f"unknown node field {name!r}")
    for f in _REQUIRED_NODE_FIELDS:
        if f not in node and f not in optional:
            bad("shape", np, f"node is missing field {f!r}")


def _check_id(node: dict[str, Any], np: str, bad: Bad, seen: Mapping[str, int]) -> bool:
    """Whether the node gives an id no earlier node holds."""
    if "id" not in node:
        return False
    node_id = node["id"]
    if not _is_str(node_id):
        bad("shape", f"{np}.id", f"id must be a string, got {_type_name(node_id)}")
        return False
    if node_id in seen:
        bad("duplicate_id", f"{np}.id", f"id {node_id} already used by an earlier node")
        return False
    return True


def _check_kind(node: dict[str, Any], np: str, bad: Bad) -> bool:
    kind = node.get("kind")
    ok = _is_str(kind) and kind in _KIND_SET
    if "kind" in node and not ok:
        bad("kind", f"{np}.kind", f"kind {_show(kind)} is not one of the ten: {', '.join(KINDS)}")
    return ok


def _check_parents(
    node: dict[str, Any],
    np: str,
    bad: Bad,
    state: CheckState,
    out: list[Violation],
    unresolved: list[tuple[int, str]] | None,
) -> bool:
    """Whether the parents are a list of string ids that may be stored (each reported
    problem of order or existence still leaves them usable for the checks after)."""
    if "parents" not in node:
        return False
    parents = node["parents"]
    if not isinstance(parents, list):
        bad("shape", f"{np}.parents", f"parents must be a list, got {_type_name(parents)}")
        return False
    if not all(_is_str(p) for p in parents):
        for j, p in enumerate(parents):
            if not _is_str(p):
                bad("shape", f"{np}.parents[{j}]", "parent must be a string id")
        return False
    ok = True
    for j, p in enumerate(parents):
        if _jsontext._bad_string(p):
            bad("unrepresentable", f"{np}.parents[{j}]", "parent id holds a lone surrogate")
            ok = False
    all_ids = state.all_ids or set()
    for j, p in enumerate(parents):
        pp = f"{np}.parents[{j}]"
        if p == node.get("id"):
            bad("parent_order", pp, "a node cannot be its own parent")
        elif p not in state.seen:
            if p in all_ids:
                bad("parent_order", pp, f"parent {p} comes later in sequence")
            else:
                if unresolved is not None:
                    unresolved.append((len(out), p))
                bad("missing_parent", pp, f"parent {p} does not exist")
    if len(set(parents)) != len(parents):
        dup = sorted({p for p in parents if parents.count(p) > 1})
        bad("parent_order", f"{np}.parents", f"parent(s) listed twice: {dup}")
    if not is_sorted_js(parents):
        bad("parent_order", f"{np}.parents", "parents are not sorted ascending")
    return ok


def _check_payload(node: dict[str, Any], np: str, bad: Bad) -> bool:
    if "payload" not in node:
        return False
    ok = True
    for code, where, message in _jsontext.problems(node["payload"], f"{np}.payload"):
        bad(code, where, message)
        ok = False
    return ok


def _check_created(node: dict[str, Any], np: str, bad: Bad) -> None:
    if "createdAt" not in node:
        return
    created = node["createdAt"]
    if not _is_str(created):
        bad("shape", f"{np}.createdAt", f"createdAt must be a string, got {_type_name(created)}")
    elif not _valid_time(created):
        bad(
            "created_at",
            f"{np}.createdAt",
            f"createdAt {created!r} is not an RFC 3339 timestamp with a zone",
        )


def _check_sequence(node: dict[str, Any], np: str, bad: Bad, expected: int | None) -> None:
    if "sequence" not in node:
        return
    seq = node["sequence"]
    if type(seq) is float and seq.is_integer():
        seq = int(seq)
    if type(seq) is not int:
        bad("shape", f"{np}.sequence", f"sequence must be an integer, got {_type_name(seq)}")
    elif expected is not None and seq != expected:
        bad("sequence", f"{np}.sequence", f"sequence is {seq}, expected {expected}")


def _check_resource_key(node: dict[str, Any], np: str, bad: Bad) -> tuple[str | None, bool]:
    """(the key, or None; whether the node's key, if any, may be stored)."""
    if "resourceKey" not in node:
        return None, True
    rk = node["resourceKey"]
    where = f"{np}.resourceKey"
    if isinstance(rk, _jsontext.BadNumber):
        bad("unrepresentable", where, f"{rk} is not a JSON value")
    elif not _is_str(rk) or rk == "":
        bad("shape", where, "resourceKey must be a non-empty string when present (never null)")
    elif "\x00" in rk or _jsontext._bad_string(rk):
        bad(
            "unrepresentable",
            where,
            "resourceKey holds U+0000 or a lone surrogate, which a PostgreSQL text "
            "column cannot keep",
        )
    elif len(rk.encode("utf-8")) > RESOURCE_KEY_MAX_BYTES:
        bad(
            "shape",
            where,
            f"resourceKey is {len(rk.encode('utf-8'))} bytes of UTF-8; "
            f"at most {RESOURCE_KEY_MAX_BYTES} are allowed",
        )
    else:
        return rk, True
    return None, False


def _check_chain(
    np: str, bad: Bad, rkey: str, parents: list[str], heads: Mapping[str, str]
) -> None:
    head = heads.get(rkey)
    if head is not None and head not in parents:
        bad(
            "resource_chain",
            f"{np}.parents",
            f"new version of {rkey!r} does not link to the key's head {head}",
        )


def _check_size(node: dict[str, Any], np: str, bad: Bad, hashed: int) -> None:
    if hashed > MAX_PAYLOAD_BYTES:  # the hashed text bounds the payload's length
        size = len(_jsontext.dumps(node["payload"]).encode("utf-8"))
        if size > MAX_PAYLOAD_BYTES:
            bad(
                "too_large",
                f"{np}.payload",
                f"payload is {size} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are allowed",
            )


def _check_semantic(
    node: dict[str, Any], np: str, rkey: str | None, vocabulary: Vocabulary, bad: Bad
) -> None:
    payload = node["payload"]
    pp = f"{np}.payload"
    if not isinstance(payload, dict):
        bad("semantic_payload", pp, "semantic payload must be an object {type, key, content}")
        return
    extra = [k for k in payload if k not in ("type", "key", "content")]
    for k in extra:
        bad("semantic_payload", _jsontext.path_key(pp, k), f"unknown semantic field {k!r}")
    for k in ("type", "key", "content"):
        if k not in payload:
            bad("semantic_payload", pp, f"semantic payload is missing {k!r}")
    stype, skey = payload.get("type"), payload.get("key")
    if "type" in payload:
        if not isinstance(stype, str):
            bad("semantic_payload", f"{pp}.type", "semantic type must be a string")
        elif not SEMANTIC_TYPE_RE.match(stype):
            bad(
                "semantic_type",
                f"{pp}.type",
                f"semantic type {stype!r} must match ^[a-z][a-z0-9_-]{{0,47}}$",
            )
        elif not vocabulary.allows(stype):
            allowed = ", ".join(vocabulary.types or ())
            bad(
                "semantic_type",
                f"{pp}.type",
                f"semantic type {stype!r} is not in the graph's fixed vocabulary ({allowed})",
            )
    if "key" in payload:
        if not isinstance(skey, str):
            bad("semantic_payload", f"{pp}.key", "semantic key must be a string")
        elif not SEMANTIC_KEY_RE.match(skey):
            bad(
                "semantic_payload",
                f"{pp}.key",
                f"semantic key {skey!r} must match ^[a-z0-9_./:-]{{1,120}}$",
            )
    if "content" in payload and _json_length(payload["content"]) > SEMANTIC_CONTENT_MAX:
        bad(
            "semantic_payload",
            f"{pp}.content",
            f"semantic content is longer than {SEMANTIC_CONTENT_MAX} characters of JSON",
        )
    if isinstance(stype, str) and isinstance(skey, str):
        want = semantic_resource_key(stype, skey)
        if rkey != want:
            bad(
                "semantic_payload",
                f"{np}.resourceKey",
                f"semantic resourceKey must be {want!r}, got {_show(node.get('resourceKey'))}",
            )


def _repeats(what: str, obj: _jsontext.DuplicateKeysDict) -> str:
    names = ", ".join(map(repr, obj.duplicates))
    return f"{what} repeats member name(s) {names}: JSON.parse would keep only the last"


def _show(value: Any) -> str:
    """A short, safe rendering of a value for a message (never recursive)."""
    if isinstance(value, dict | list | tuple):
        return _type_name(value)
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_str(value: Any) -> bool:
    """A real JSON string (a NaN/Infinity token parses as a marked str subclass)."""
    return type(value) is str


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_frontier(frontier: Any, ids: Iterable[str], path: str = "$.frontier") -> list[Violation]:
    """Every frontier entry is a string id of an existing node, none twice."""
    out: list[Violation] = []
    if not isinstance(frontier, list):
        return [
            Violation(
                "shape",
                None,
                None,
                path,
                f"frontier must be a list of ids, got {_type_name(frontier)}",
            )
        ]
    known = set(ids)
    seen: set[str] = set()
    for j, fid in enumerate(frontier):
        fp = f"{path}[{j}]"
        if not _is_str(fid):
            out.append(Violation("shape", None, None, fp, "frontier entry must be a string id"))
        elif fid in seen:
            out.append(
                Violation("frontier_reference", None, fid, fp, f"frontier lists {fid} twice")
            )
        elif fid not in known:
            out.append(
                Violation(
                    "frontier_reference", None, fid, fp, f"frontier references missing node {fid}"
                )
            )
        else:
            seen.add(fid)
    return out


def validate(state: Any, vocabulary: Vocabulary | None = None) -> list[Violation]:
    """Every violation of SPEC section 6 in a document; an empty list means valid.

    ``state`` is parsed JSON (see :func:`parse_document`) or an
    :class:`~cwstore.document.AgentState`. ``vocabulary`` defaults to dynamic.
    """
    out: list[Violation] = []
    for _, found in validate_in_slices(state, vocabulary, size=1 << 62):
        out.extend(found)
    return out


def validate_in_slices(
    state: Any, vocabulary: Vocabulary | None = None, size: int = 2000
) -> Iterator[tuple[list[Any], list[Violation]]]:
    """:func:`validate`, a slice of nodes at a time: yields ``(nodes, violations)``.

    The first item has no nodes and the document-level violations; then each slice of
    up to ``size`` nodes with its own violations; the last has none and the frontier's.
    A bulk load streams each slice while the next is checked, and gives up at the end
    if any slice had a violation (so the whole document is still checked first).
    """
    vocab = vocabulary if vocabulary is not None else Vocabulary.dynamic()
    if isinstance(state, StateModel):
        state = state.to_obj()
    if not isinstance(state, dict):
        yield (
            [],
            [
                Violation(
                    "shape",
                    None,
                    None,
                    "$",
                    f"document must be a JSON object, got {_type_name(state)}",
                )
            ],
        )
        return
    out: list[Violation] = []
    if isinstance(state, _jsontext.DuplicateKeysDict):
        out.append(Violation("shape", None, None, "$", _repeats("document", state)))
    for name in state:
        if name not in _TOP_FIELDS:
            out.append(
                Violation(
                    "shape",
                    None,
                    None,
                    _jsontext.path_key("$", name),
                    f"unknown top-level field {name!r}",
                )
            )
    for name in _TOP_FIELDS:
        if name not in state:
            out.append(Violation("shape", None, None, "$", f"document is missing {name!r}"))
    if "version" in state and (state["version"] != 1 or isinstance(state["version"], bool)):
        out.append(
            Violation(
                "version",
                None,
                None,
                "$.version",
                f"version must be 1, got {_show(state['version'])}",
            )
        )
    nodes = state.get("nodes")
    if "nodes" in state and not isinstance(nodes, list):
        out.append(
            Violation(
                "shape", None, None, "$.nodes", f"nodes must be a list, got {_type_name(nodes)}"
            )
        )
        nodes = None
    yield [], out
    ids: set[Any] = set()
    if isinstance(nodes, list):
        checked = CheckState.for_document(nodes)
        ids = checked.all_ids or set()
        for off in range(0, len(nodes), size):
            part = nodes[off : off + size]
            yield part, check_nodes(part, vocabulary=vocab, state=checked, offset=off)
    if "frontier" in state:
        yield [], check_frontier(state["frontier"], ids)
