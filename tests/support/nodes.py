"""Runtime nodes as the tests write them: one time of writing (:data:`T0`) and one
builder (:func:`node`) for the suites that used to copy them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cwstore import compute_id
from cwstore.document import sort_parents

T0 = "2026-12-02T08:43:04.123Z"
"""The time of writing the tests give their nodes."""


def node(
    kind: str,
    payload: Any,
    parents: Iterable[str] = (),
    key: str | None = None,
    *,
    created_at: str = T0,
    with_id: bool = True,
) -> dict[str, Any]:
    """A runtime node (parents sorted and unique); with ``with_id`` its id is computed
    here. Keys in the order the runtime writes them: id, kind, parents, payload,
    createdAt, resourceKey (the last only with ``key``)."""
    ps = sort_parents(parents)
    out: dict[str, Any] = {"kind": kind, "parents": ps, "payload": payload, "createdAt": created_at}
    if key is not None:
        out["resourceKey"] = key
    if with_id:
        out = {"id": compute_id(kind, ps, payload, key), **out}
    return out


def step_node(k: int, heads: list[str], key: str | None = None) -> dict[str, Any]:
    """Step ``k`` of a writer whose frontier is ``heads``, without id or time (the store
    fills them in): a goal, or with ``key`` a version of that resource."""
    if key is not None:
        return {"kind": "resource", "parents": heads, "payload": {"v": k}, "resourceKey": key}
    return {"kind": "goal", "parents": heads, "payload": f"step {k}"}
