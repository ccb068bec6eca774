"""What :meth:`AsyncStore.save` reads and writes, decided without I/O.

A :class:`SavePlan` runs the decisions of a save as a generator, as psycopg's
``generators`` do: it hands the store a request, the store performs it and hands back
the result, and so on until the plan says what the save wrote (:class:`Saved`). The
store (the async client, and the sync one generated from it) keeps only that loop.

The requests, and what the store answers with (:meth:`SavePlan.answer`):

* :class:`ReadGraph`: the graph's row, as a :class:`StoredGraph`, or ``None`` when
  there is no such graph.
* :class:`FindMismatch`: the first position (from 1) where the stored ids differ from
  ``ids`` (``first_mismatch``), or ``None``.
* :class:`ReadFrontier`: the stored frontier, a list of ids (``frontier_now``).
* :class:`AppendNodes`: what ``append_v1`` returns for ``nodes``, ``expected_length``
  and ``frontier``: the batch as sent and its rows (:meth:`AsyncStore._append_rows`).
  When the append raises a cwstore error, the store hands the error to the plan
  instead (:meth:`SavePlan.refused`), which either goes on or raises it.

The three reads (:data:`Read`) that follow one another are made in one snapshot
(``REPEATABLE READ``, ``READ ONLY``), which ends before the next append or when the
plan ends: so the length, the ids and the frontier compared are from one life of the
graph, even when it is erased and created again meanwhile.

How a save goes (each step below is one of the store's round trips or transactions):

1. The state is read (:func:`~cwstore._suffix.read_state`) and compared with what the
   store remembers of the graph (:class:`~cwstore._suffix.SaveMemory`).
2. Nothing new (the state is exactly the remembered prefix): the graph's length and
   frontier are read; when the length is still the prefix's, the save is done, after
   declaring the state's frontier if it differs (the last node sent again, which writes
   nothing else). A save with nothing new costs this, whatever the graph's size.
3. New nodes past the remembered prefix: they are checked against it
   (:func:`~cwstore._suffix.check_suffix`) and appended at its length. An erased graph
   refuses that append (a length conflict, :class:`GraphErasedError`, or a refused
   batch whose parents are not there); then, or when the rows show another writer got
   there first, the memory of the graph is dropped and the save goes on cold.
4. Cold: the stored length, the first id that differs and the frontier are read in one
   snapshot; a stored graph longer than the state, or with other ids, is
   :class:`DivergedError`. What is past the stored length is checked and appended, and
   remembered.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ._rows import stored_nodes
from ._suffix import (
    SavedPrefix,
    SaveMemory,
    StateToSave,
    check_stored_length,
    check_suffix,
    read_state,
)
from .document import CausalNode, validate
from .drivers._protocol import Row
from .errors import ConflictError, DivergedError, Error, GraphErasedError, ValidationError

__all__ = [
    "AppendNodes",
    "Appended",
    "FindMismatch",
    "Read",
    "ReadFrontier",
    "ReadGraph",
    "Request",
    "SavePlan",
    "Saved",
    "StoredGraph",
]


@dataclass(frozen=True, slots=True)
class ReadGraph:
    """Read the graph's row (``graph_get``)."""


@dataclass(frozen=True, slots=True)
class FindMismatch:
    """Compare the stored ids of graph ``graph_id`` with ``ids`` (``first_mismatch``)."""

    graph_id: Any
    ids: list[str]


@dataclass(frozen=True, slots=True)
class ReadFrontier:
    """Read the frontier of graph ``graph_id`` (``frontier_now``)."""

    graph_id: Any


@dataclass(frozen=True, slots=True)
class AppendNodes:
    """Append ``nodes`` (runtime JSON objects) at ``expected_length`` to life
    ``incarnation`` of the graph (``None``: whichever, created if need be) and declare
    ``frontier``."""

    nodes: list[Any]
    expected_length: int
    frontier: list[Any]
    incarnation: int | None


@dataclass(frozen=True, slots=True)
class StoredGraph:
    """The answer to :class:`ReadGraph`: the graph's id, length and life."""

    id: Any
    length: int
    incarnation: int


@dataclass(frozen=True, slots=True)
class Saved:
    """The end of a plan: the nodes the save wrote (what ``save`` returns)."""

    nodes: list[CausalNode]


Read: TypeAlias = ReadGraph | FindMismatch | ReadFrontier
"""The requests made in one snapshot when they follow one another."""
Request: TypeAlias = Read | AppendNodes
Appended: TypeAlias = tuple[list[dict[str, Any]], Sequence[Row]]
"""The answer to :class:`AppendNodes`: the batch as sent and the rows ``append_v1``
returned for it."""


class SavePlan:
    """One save of ``state`` to ``graph`` (see the module), over a store's memory.

    :meth:`start` gives the first request; :meth:`answer` (or :meth:`refused`) gives
    the next, until a :class:`Saved`. Raises what ``save`` raises, from whichever call
    finds it.
    """

    __slots__ = ("_steps",)

    def __init__(
        self, memory: SaveMemory, graph: str, state: Any, expected_length: int | None
    ) -> None:
        self._steps = _save(memory, graph, state, expected_length)

    def start(self) -> Request | Saved:
        """The first request (the state is read and checked first)."""
        return self.answer(None)

    def answer(self, result: Any) -> Request | Saved:
        """The next request, given the result of the last one."""
        try:
            return self._steps.send(result)
        except StopIteration as done:
            return Saved(done.value)

    def refused(self, error: Error) -> Request | Saved:
        """The next request, given that the last (an append) raised ``error``; raises it
        when the save cannot go on without it."""
        try:
            return self._steps.throw(error)
        except StopIteration as done:
            return Saved(done.value)


_Steps: TypeAlias = Generator[Request, Any, list[CausalNode]]


def _save(memory: SaveMemory, graph: str, state: Any, expected_length: int | None) -> _Steps:
    todo = read_state(state)
    same = memory.unchanged(graph, todo, expected_length)
    if same is not None:
        found: StoredGraph | None = yield ReadGraph()
        if (
            found is not None
            and found.length == same.length
            and found.incarnation == same.incarnation
        ):
            current: list[str] = yield ReadFrontier(found.id)
            if current != list(todo.frontier):
                yield AppendNodes(todo.objects(-1), same.length, todo.frontier, same.incarnation)
            return []
        memory.forget(graph)
    known = memory.usable(graph, todo, expected_length)
    if known is not None:
        new = check_suffix(todo, known)
        try:
            appended: Appended = yield AppendNodes(
                new, known.length, todo.frontier, known.incarnation
            )
        except (ConflictError, GraphErasedError, ValidationError):
            pass  # refused by an erased graph (see the module): compare what is stored now
        else:
            sent, rows = appended
            if memory.wrote(graph, known, todo, new, rows):
                return stored_nodes(sent, rows)
        memory.forget(graph)
    return (yield from _save_cold(memory, graph, state, todo, expected_length))


def _save_cold(
    memory: SaveMemory, graph: str, state: Any, todo: StateToSave, expected_length: int | None
) -> _Steps:
    found: StoredGraph | None = yield ReadGraph()
    stored = check_stored_length(graph, todo, found.length if found else 0, expected_length)
    life = found.incarnation if found else None
    if stored and found is not None:
        ids = todo.plain_ids(stored)
        if ids is None:
            raise ValidationError(validate(state))
        bad: int | None = yield FindMismatch(found.id, ids)
        if bad is not None:
            raise DivergedError(graph=graph, position=int(bad), stored_length=stored)
        if stored == len(todo):
            current: list[str] = yield ReadFrontier(found.id)
            if current == list(todo.frontier):
                memory.remember(graph, SavedPrefix.of_state(todo, stored, life))
                return []
    if not len(todo):
        return []
    prefix = SavedPrefix.of_state(todo, stored, life)
    # With nothing new, re-sending the last node writes nothing but declares the frontier.
    new = check_suffix(todo, prefix) or todo.objects(-1)
    sent, rows = yield AppendNodes(new, stored, todo.frontier, life)
    if stored == len(todo):
        memory.remember(graph, SavedPrefix.of_state(todo, stored, rows[0]["incarnation"]))
        return []
    memory.wrote(graph, prefix, todo, new, rows)
    return [n for n in stored_nodes(sent, rows) if n.sequence > stored]
