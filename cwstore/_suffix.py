"""The per-turn save in time proportional to what is new (pure, no I/O).

The runtime hands back its whole state every turn; the store already holds all of it
but the last few nodes. Re-validating the whole document each turn (every identity
recomputed) made a save cost time in proportion to the state. Here:

* :func:`read_state` reads a state for saving: the document-level checks and the nodes
  as given (no per-node reading or validation).
* :class:`SavedPrefix` is what a store learnt of a graph's first ``length`` nodes from
  an earlier save: their ids in order, an id index and each resource key's head. A
  graph is append-only and gapless, so those ``length`` nodes never change; only the
  length can grow behind the store's back, and the append's expected-length
  compare-and-set catches that (the store then checks again, once, against the
  database).
* :func:`check_suffix` checks only the nodes past the prefix, every rule of
  :func:`cwstore.document.validate` that applies to them (identity, sequence, parents in
  the prefix or earlier in the suffix, no id of the prefix again, resource chains
  continuing the prefix's heads, frontier), reporting violations with their index in
  the whole document.
* :class:`SaveMemory` keeps one :class:`SavedPrefix` per graph for a store.

The prefix nodes of a state are compared by id only: an id is the hash of its node's
content, and the stored node under that id was validated when it was written, so a
state whose prefix carries the stored ids is taken to hold the stored nodes. A prefix
that holds the very node objects of the store's last save of the graph (an
:class:`AgentState`'s immutable nodes, or the dicts of a document the application
extends in place) is taken as saved without reading them: that makes the save of a
dict state, like that of an :class:`AgentState`, cost what its new nodes cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from .document import (
    AgentState,
    CausalNode,
    CheckState,
    Vocabulary,
    check_frontier,
    check_nodes,
    parse_document,
    validate_in_slices,
)
from .drivers._protocol import Row
from .errors import DivergedError, LengthConflictError, ValidationError, Violation

__all__ = [
    "SaveMemory",
    "SavedPrefix",
    "StateToSave",
    "check_stored_length",
    "check_suffix",
    "read_state",
]

_get_id = itemgetter("id")
_attr_id = attrgetter("id")


class StateToSave:
    """A state read for :meth:`AsyncStore.save`: its nodes as given (runtime objects or,
    from an :class:`AgentState`, :class:`CausalNode`) and the declared frontier; their
    ids in order are read on first use (:attr:`ids`), which a save whose prefix holds
    the very node objects saved before never needs."""

    __slots__ = ("_doc", "_ids", "frontier", "frozen", "nodes")

    def __init__(self, nodes: Sequence[Any], frontier: list[Any], doc: Any = None) -> None:
        """``doc``: the parsed document the nodes are from; ``None`` for the immutable
        nodes of an :class:`AgentState` (``frozen``)."""
        self.nodes = nodes
        self.frontier = frontier
        self.frozen = doc is None
        self._doc = doc
        self._ids: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def ids(self) -> list[Any]:
        """Every node's id, in order (read from the nodes on first use).

        Raises :class:`ValidationError`, with every violation of the document, when a
        node's id cannot be read.
        """
        if self._ids is None:
            if self.frozen:
                self._ids = list(map(_attr_id, self.nodes))
            else:
                try:
                    self._ids = list(map(_get_id, self.nodes))
                except (KeyError, TypeError):
                    raise ValidationError(_all_violations(self._doc)) from None
        return self._ids

    def extends(self, prefix: SavedPrefix) -> bool:
        """Whether the state's first ``prefix.length`` nodes are the prefix's.

        When they begin and end with the very objects the prefix was saved from, they
        are compared with those objects in one pass that reads no node it finds
        identical (so an unchanged prefix costs no reading of its nodes, whatever its
        length): a node dict changed in place after it was saved is taken as saved,
        as its payload always was. Otherwise, their ids are compared.
        """
        n = prefix.length
        if len(self.nodes) < n:
            return False
        if n == 0:
            return True
        whole = prefix.state_nodes
        if whole is not None and len(whole) == n and _starts_with(self.nodes, whole):
            return True
        seen = prefix.objects
        if seen is not None and self.nodes[0] is seen[0] and self.nodes[n - 1] is seen[n - 1]:
            mine = seen if len(seen) == n else seen[:n]
            if _starts_with(self.nodes, mine) or (
                type(self.nodes) is not list and list(self.nodes[:n]) == mine
            ):
                return True
        ids = self.ids
        mine_ids = ids if len(ids) == n else ids[:n]
        theirs = prefix.ids if len(prefix.ids) == n else prefix.ids[:n]
        return mine_ids == theirs

    def plain_ids(self, count: int) -> list[str] | None:
        """The first ``count`` ids when every one is a string (what a query may carry)."""
        ids = self.ids[:count]
        return ids if set(map(type, ids)) <= {str} else None

    def objects(self, start: int, stop: int | None = None) -> list[Any]:
        """Nodes ``start:stop`` as runtime JSON objects."""
        return [_as_obj(n) for n in self.nodes[start:stop]]

    def given(self, start: int) -> list[Any]:
        """Nodes from ``start`` on, the objects as given (what the prefix keeps to
        compare the next state with)."""
        return list(self.nodes[start:])

    def whole(self, length: int) -> Sequence[Any] | None:
        """The node sequence itself, when its nodes are immutable and it is ``length``
        long."""
        return self.nodes if self.frozen and len(self.nodes) == length else None


def _starts_with(nodes: Sequence[Any], prefix: Sequence[Any]) -> bool:
    """Whether ``nodes`` begins with the members of ``prefix`` (two tuples, or two
    lists), without copying either.

    Tuples and lists compare member by member, each by identity first (so the same
    objects are never read), then ``==``. A proper prefix compares less than the
    longer sequence; two nodes that differ have no order, so comparing them raises
    ``TypeError`` (a member that is no node but claims to be greater than one would end
    the comparison as a match: the prefix is then taken as saved, and nothing else).
    """
    if type(nodes) is not type(prefix) or not isinstance(nodes, tuple | list):
        return False
    if len(nodes) == len(prefix):
        return nodes == prefix
    first: Any = prefix  # a tuple or a list, as nodes is
    try:
        return len(nodes) > len(prefix) and bool(first < nodes)
    except TypeError:
        return False


def _as_obj(node: Any) -> Any:
    return node.to_obj() if isinstance(node, CausalNode) else node


def read_state(state: Any) -> StateToSave:
    """Read a state for saving: an :class:`AgentState`, parsed JSON, or JSON text/bytes.

    Checks the document's own fields (version, nodes, frontier) but not its nodes,
    which :func:`check_suffix` checks past the stored prefix, nor reads them: their
    ids are read when a save needs them (:attr:`StateToSave.ids`). A state whose nodes
    cannot even be read for their ids is then validated in full, so the error names
    every violation as :func:`cwstore.document.validate` does.

    Raises :class:`InputError` for text that is not JSON and :class:`ValidationError`.
    """
    if isinstance(state, AgentState):
        return StateToSave(state.nodes, list(state.frontier))
    doc = (
        parse_document(bytes(state) if isinstance(state, bytearray) else state)
        if isinstance(state, str | bytes | bytearray)
        else state
    )
    found = next(validate_in_slices(doc))[1]
    if not found and not isinstance(doc["frontier"], list):
        found = check_frontier(doc["frontier"], ())
    if found:
        raise ValidationError(found)
    return StateToSave(doc["nodes"], doc["frontier"], doc)


def _all_violations(doc: Any) -> list[Violation]:
    out: list[Violation] = []
    for _, found in validate_in_slices(doc, size=1 << 62):
        out.extend(found)
    return out or [Violation("shape", None, None, "$.nodes", "a node's id cannot be read")]


@dataclass(frozen=True, slots=True)
class SavedPrefix:
    """A graph's first ``length`` nodes as a store saw them: ids in order (the list may
    run past ``length``; only the first ``length`` count), the sequence of each id
    (entries past ``length`` are ignored), each resource key's head among them, the
    node objects as the state gave them (``objects``, like ``ids``; ``None``: not
    kept); and ``state_nodes``, the :class:`AgentState`'s own node
    sequence when the prefix is that whole state (a state that extends it is compared
    with it as one sequence, without a copy of the prefix's objects), else ``None``;
    and ``incarnation``, the life of the graph the prefix was read from or written to
    (``None``: not known), so that the next append goes to that life or is refused.

    The list and index are shared by the prefixes that extend one another and only ever
    grow, so extending a prefix costs what the new nodes cost.
    """

    length: int
    ids: list[str]
    index: dict[str, int]
    heads: Mapping[str, str]
    objects: list[Any] | None = None
    state_nodes: Sequence[Any] | None = None
    incarnation: int | None = None

    @classmethod
    def of_state(
        cls, state: StateToSave, length: int, incarnation: int | None = None
    ) -> SavedPrefix:
        """The prefix of ``state``'s first ``length`` nodes (which the caller has found
        equal, by id, to the stored ones, in life ``incarnation`` of the graph)."""
        ids = list(state.ids[:length])
        heads: dict[str, str] = {}
        for n in state.nodes[:length]:
            key = n.resource_key if isinstance(n, CausalNode) else n.get("resourceKey")
            if isinstance(key, str):
                heads[key] = n.id if isinstance(n, CausalNode) else n["id"]
        index = dict(zip(ids, range(1, length + 1), strict=True))
        objects = list(state.nodes[:length])
        return cls(length, ids, index, heads, objects, state.whole(length), incarnation)

    def holds(self, node_id: Any) -> bool:
        """Whether ``node_id`` is one of the prefix's ids."""
        seq = self.index.get(node_id) if isinstance(node_id, str) else None
        return seq is not None and seq <= self.length

    def extended(
        self,
        nodes: Sequence[dict[str, Any]],
        objects: list[Any] | None = None,
        state_nodes: Sequence[Any] | None = None,
        incarnation: int | None = None,
    ) -> SavedPrefix:
        """The prefix followed by ``nodes`` (checked and written right after it, in life
        ``incarnation`` of the graph), whose :class:`CausalNode` objects are ``objects``
        when they came from an :class:`AgentState`, whose node sequence is
        ``state_nodes`` when the result is that whole state."""
        mine = self.objects
        if len(self.ids) == self.length and (mine is None or len(mine) == self.length):
            ids, index = self.ids, self.index
        else:  # another extension of this prefix got there first: copy
            ids = self.ids[: self.length]
            index = dict(zip(ids, range(1, self.length + 1), strict=True))
            mine = None if mine is None else mine[: self.length]
        heads = dict(self.heads)
        for i, n in enumerate(nodes, start=self.length + 1):
            ids.append(n["id"])
            index.setdefault(n["id"], i)
            key = n.get("resourceKey")
            if isinstance(key, str):
                heads[key] = n["id"]
        if mine is not None and objects is not None:
            mine.extend(objects)
        else:
            mine = None
        return SavedPrefix(
            self.length + len(nodes), ids, index, heads, mine, state_nodes, incarnation
        )


class _SeenOverPrefix(dict[str, int]):
    """The ids :func:`check_nodes` has seen in the suffix, over the prefix's ids.

    ``check_nodes`` only asks whether an id is in ``seen`` and records each new id in
    it; answering ``in`` from the prefix's shared index as well spares copying the
    index (the whole prefix) into a fresh dict on every save.
    """

    __slots__ = ("prefix",)

    def __init__(self, prefix: SavedPrefix) -> None:
        super().__init__()
        self.prefix = prefix

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or self.prefix.holds(key)


def check_suffix(
    state: StateToSave, prefix: SavedPrefix, vocabulary: Vocabulary | None = None
) -> list[dict[str, Any]]:
    """Check the nodes of ``state`` past ``prefix`` (and the frontier) against it.

    Returns those nodes as runtime JSON objects. Raises :class:`ValidationError` with
    every violation, each naming its node by its index in the whole document.
    """
    start = prefix.length
    suffix = state.objects(start)
    new_ids = {n.get("id") for n in suffix if isinstance(n, dict) and type(n.get("id")) is str}
    checked = CheckState(seen=_SeenOverPrefix(prefix), heads=dict(prefix.heads), all_ids=new_ids)
    violations = check_nodes(
        suffix, vocabulary=vocabulary or Vocabulary.dynamic(), state=checked, offset=start
    )
    frontier = state.frontier
    known = [f for f in frontier if type(f) is str and (f in new_ids or prefix.holds(f))]
    violations.extend(check_frontier(frontier, known))
    if violations:
        raise ValidationError(violations)
    return suffix


def check_stored_length(
    graph: str, state: StateToSave, stored: int, expected_length: int | None
) -> int:
    """The checks of ``save`` that need only lengths; returns the stored length.

    Raises :class:`LengthConflictError` for a stale ``expected_length`` and
    :class:`DivergedError` when the stored graph is longer than the state.
    """
    stored = int(stored)
    if expected_length is not None and expected_length != stored:
        raise LengthConflictError(
            graph=graph, expected_length=expected_length, actual_length=stored
        )
    if stored > len(state):
        raise DivergedError(graph=graph, position=len(state) + 1, stored_length=stored)
    return stored


class SaveMemory:
    """A store's :class:`SavedPrefix` per graph name, from its earlier saves.

    Safe to share between threads and tasks: a prefix is never changed in place
    (extending one shares only what grows past its length), and the memory only swaps
    whole entries. It holds the ``graphs`` most recently saved (a prefix costs about
    100 bytes a node, and keeps the node objects of the state it was saved from alive);
    a graph it dropped is compared in the database on its next save.
    """

    def __init__(self, graphs: int = 64) -> None:
        self._known: dict[str, SavedPrefix] = {}
        self._graphs = graphs

    def _keep(self, graph: str, prefix: SavedPrefix) -> None:
        self._known.pop(graph, None)
        self._known[graph] = prefix
        while len(self._known) > self._graphs:
            with suppress(StopIteration, KeyError, RuntimeError):
                del self._known[next(iter(self._known))]

    def usable(
        self, graph: str, state: StateToSave, expected_length: int | None
    ) -> SavedPrefix | None:
        """The remembered prefix of ``graph`` when ``state`` extends it by at least one
        node and ``expected_length`` (if given) is its length; else ``None`` (the store
        then reads the graph's length and compares the prefix in the database)."""
        known = self._known.get(graph)
        if (
            known is None
            or len(state) <= known.length
            or (expected_length is not None and expected_length != known.length)
            or not state.extends(known)
        ):
            return None
        return known

    def unchanged(
        self, graph: str, state: StateToSave, expected_length: int | None
    ) -> SavedPrefix | None:
        """The remembered prefix of ``graph`` when ``state`` is exactly it (nothing past
        it: a save with nothing new) and ``expected_length`` (if given) is its length;
        else ``None``."""
        known = self._known.get(graph)
        if (
            known is None
            or len(state) != known.length
            or (expected_length is not None and expected_length != known.length)
            or not state.extends(known)
        ):
            return None
        return known

    def wrote(
        self,
        graph: str,
        prefix: SavedPrefix,
        state: StateToSave,
        new: Sequence[dict[str, Any]],
        rows: Sequence[Row],
    ) -> bool:
        """Record that ``new`` (the nodes of ``state`` past ``prefix``) was appended
        right after ``prefix``, given the rows of query ``append`` (``seq``, ``id``,
        ``written``, ``incarnation``, ...). ``False`` (and the graph forgotten) when the
        rows say otherwise: a node this call did not write (another writer got there
        first) or one at another sequence.
        """
        if len(rows) != len(new) or any(
            r["seq"] != prefix.length + i or r["id"] != m["id"] or not r["written"]
            for i, (r, m) in enumerate(zip(rows, new, strict=True), start=1)
        ):
            self.forget(graph)
            return False
        self._keep(
            graph,
            prefix.extended(
                new,
                state.given(prefix.length),
                state.whole(prefix.length + len(new)),
                rows[0]["incarnation"],
            ),
        )
        return True

    def remember(self, graph: str, prefix: SavedPrefix) -> None:
        """Remember ``prefix`` as the graph's, as found in the database."""
        self._keep(graph, prefix)

    def forget(self, graph: str) -> None:
        """Drop what is known of ``graph`` (its next save compares in the database)."""
        self._known.pop(graph, None)
