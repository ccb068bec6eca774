"""The runtime's content identity for nodes (SPEC section 2), pure and exact.

``id = "cw_" + sha256(S({kind, parents, payload, resourceKey}))[:24]`` where ``S`` is
the runtime's stable serialization: compact JSON, numbers and strings as
``JSON.stringify`` writes them, and object members sorted by JavaScript's
``String.prototype.localeCompare``. V8 implements ``localeCompare`` with ICU's
collator for the default locale (``en-US`` on the runtime's hosts) at tertiary
strength with normalization on, so here the order comes from ICU too (PyICU from
``pyicu-wheels``), never from a hand-written collation.

Keys that collate equal (``"a"`` and ``"a\\u0000"``; ``"é"`` precomposed and
decomposed) keep JavaScript's property order, because ``Array.prototype.sort`` is
stable: integer-like keys (``"0"`` … ``"4294967294"``) first in numeric order, then the
rest as inserted.

ICU version: the ICU bundled in ``pyicu-wheels`` (see :data:`ICU_VERSION`) may be one
release behind or ahead of Node's. Collation of characters assigned in a newer Unicode
version than the older of the two can differ, so a key made of such characters may
sort differently and the ids disagree. Keys from Unicode 16 and earlier (everything in
practice) agree; the test vectors made with Node's own ``localeCompare`` check it.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import icu

from ._jsontext import write

__all__ = ["ICU_VERSION", "canonical_json", "compute_id", "identity_object", "key_order"]

ICU_VERSION: str = icu.ICU_VERSION
"""The ICU release whose collation orders keys here."""

_collator = icu.Collator.createInstance(icu.Locale("en_US"))
_collator.setStrength(icu.Collator.TERTIARY)
_collator.setAttribute(icu.UCollAttribute.NORMALIZATION_MODE, icu.UCollAttributeValue.ON)

_ARRAY_INDEX_MAX = 2**32 - 2


@lru_cache(maxsize=65536)
def _sort_key(key: str) -> bytes:
    return bytes(_collator.getSortKey(key))


def _js_index(key: str) -> int | None:
    """The array index JavaScript sees in a property name, or None."""
    if key.isdigit() and key.isascii() and (key == "0" or key[0] != "0"):
        n = int(key)
        if n <= _ARRAY_INDEX_MAX:
            return n
    return None


_ORDER_CACHE: dict[tuple[str, ...], list[str]] = {}
_ORDER_CACHE_MAX = 50_000


def key_order(obj: dict[str, Any]) -> list[str]:
    """The keys of ``obj`` in the order the runtime's serialization writes them.

    Payloads of one kind repeat the same keys, so orders are cached per key tuple.
    """
    given = tuple(obj)
    if len(given) < 2:
        return list(given)
    cached = _ORDER_CACHE.get(given)
    if cached is not None:
        return cached
    keys = list(given)
    # JavaScript property order first (integer-like keys ascending, then insertion),
    # then a stable sort by collation.
    if any(k[:1].isdigit() for k in keys):
        indexed = sorted((n, k) for k in keys if (n := _js_index(k)) is not None)
        if indexed:
            rest = [k for k in keys if _js_index(k) is None]
            keys = [k for _, k in indexed] + rest
    keys.sort(key=_sort_key)
    if len(_ORDER_CACHE) >= _ORDER_CACHE_MAX:
        _ORDER_CACHE.clear()
    _ORDER_CACHE[given] = keys
    return keys


def identity_object(
    kind: str, parents: list[str], payload: Any, resource_key: str | None = None
) -> dict[str, Any]:
    """The object the runtime hashes: ``{kind, parents, payload, resourceKey?}``."""
    obj: dict[str, Any] = {"kind": kind, "parents": parents, "payload": payload}
    if resource_key is not None:
        obj["resourceKey"] = resource_key
    return obj


def canonical_json(value: Any) -> str:
    """``S(value)``: the runtime's stable serialization of a JSON value."""
    return write(value, key_order)


def compute_id(kind: str, parents: list[str], payload: Any, resource_key: str | None = None) -> str:
    """The node id the runtime computes for this content.

    ``parents`` are hashed as given: the runtime stores them sorted and unique, and
    callers that build nodes should sort them first (:func:`cwstore.document.sort_parents`).
    The payload must be JSON that can be kept exactly (what :func:`cwstore.validate`
    would not report as ``unrepresentable`` or ``shape``: no NaN or Infinity, integers
    within ±(2**53-1), no lone surrogates, no key given twice, nesting at most 10,000
    levels).
    """
    return identity_digest(kind, parents, payload, resource_key)[0]


def identity_digest(
    kind: str, parents: list[str], payload: Any, resource_key: str | None = None
) -> tuple[str, int]:
    """:func:`compute_id`, and the length in bytes of the UTF-8 text it hashed.

    That text holds the payload with the same characters ``JSON.stringify`` writes
    (members in another order), so its length bounds the payload's from above.
    """
    data = canonical_json(identity_object(kind, parents, payload, resource_key)).encode("utf-8")
    return "cw_" + hashlib.sha256(data).hexdigest()[:24], len(data)
