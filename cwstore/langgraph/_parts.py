"""Values too large for one node, stored in parts: pure, no I/O.

A channel value or pending write whose payload would be longer than :data:`BIG_BYTES`
of JSON text is stored as bytes (the UTF-8 JSON text of a value JSON holds exactly, else
the serializer's typed bytes) cut into parts: ``resource`` nodes of the key
``lg:part:<sha256 of the bytes>``, each holding :data:`PART_DATA` bytes in base64
(``{"i": index, "b64": ...}``), each the parent of the next, so the key's versions
1..n are the parts in order. The node of the value (or of the writes) holds, instead
of the value, ``{"parts": [key, n, bytes], "serde": type}`` (or ``"text": "json"``)
and has the last part among its parents. Equal bytes make the same parts: a value
stored again is not written again.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cwstore import DatabaseError

__all__ = [
    "BIG_BYTES",
    "PARTS_PER_APPEND",
    "PARTS_PER_READ",
    "PART_DATA",
    "Blob",
    "b64_length",
    "blob_of",
    "join_parts",
    "make_blob",
    "part_batches",
    "part_bytes",
]

PART_KEY = "lg:part:"
BIG_BYTES = 1 << 20
"""A value whose payload text would be longer is stored in parts."""
PART_DATA = 3 << 18
"""Bytes of a value one part holds: 1 MiB of base64."""
PARTS_PER_APPEND = 4
"""Parts sent in one ``append_v1`` call: the backend's memory for a call grows with
what it is sent, so a large value goes in several calls of one transaction."""
PARTS_PER_READ = 4
"""Parts read by one query."""


def b64_length(size: int) -> int:
    """The length of ``size`` bytes in base64."""
    return (size + 2) // 3 * 4


def _part_payload(data: bytes | bytearray, index: int) -> dict[str, Any]:
    chunk = memoryview(data)[index * PART_DATA : (index + 1) * PART_DATA]
    return {"i": index, "b64": base64.b64encode(chunk).decode("ascii")}


@dataclass(frozen=True, eq=False)
class Blob:
    """A value's bytes as parts: ``kind`` is ``("serde", type)`` (the serializer's typed
    bytes) or ``("text", "json")`` (UTF-8 JSON text); ``ids`` the parts' node ids."""

    data: bytes | bytearray
    kind: tuple[str, str]
    key: str
    ids: tuple[str, ...]

    def ref(self) -> dict[str, Any]:
        """The payload members that stand for the value in its node."""
        return {"parts": [self.key, len(self.ids), len(self.data)], self.kind[0]: self.kind[1]}

    def nodes(self) -> Iterator[dict[str, Any]]:
        """The part nodes, oldest first, each made when asked for (a caller sending a
        few at a time holds a few)."""
        for index, node_id in enumerate(self.ids):
            yield {
                "id": node_id,
                "kind": "resource",
                "parents": [self.ids[index - 1]] if index else [],
                "payload": _part_payload(self.data, index),
                "resourceKey": self.key,
            }


def make_blob(kind: tuple[str, str], data: bytes | bytearray) -> Blob:
    """The parts of ``data`` (their ids computed, their text not kept)."""
    from cwstore import compute_id

    key = PART_KEY + hashlib.sha256(data).hexdigest()
    ids: list[str] = []
    for index in range((len(data) + PART_DATA - 1) // PART_DATA):
        parents = ids[-1:]
        ids.append(compute_id("resource", parents, _part_payload(data, index), key))
    return Blob(data, kind, key, tuple(ids))


def blob_of(ref: Mapping[str, Any], datas: Mapping[str, bytes]) -> Blob:
    """The parts of a value read back (``ref`` as :meth:`Blob.ref` gives it, its bytes
    in ``datas`` by key), to be written again."""
    kind = ("text", ref["text"]) if "text" in ref else ("serde", ref["serde"])
    return make_blob(kind, datas[ref["parts"][0]])


def part_batches(blobs: Iterable[Blob]) -> Iterator[list[dict[str, Any]]]:
    """The part nodes of ``blobs`` (each key once) in batches of
    :data:`PARTS_PER_APPEND`, each made when asked for."""
    seen: set[str] = set()
    batch: list[dict[str, Any]] = []
    for blob in blobs:
        if blob.key in seen:
            continue
        seen.add(blob.key)
        for node in blob.nodes():
            batch.append(node)
            if len(batch) == PARTS_PER_APPEND:
                yield batch
                batch = []
    if batch:
        yield batch


def part_bytes(text: str) -> bytes:
    """The bytes one part's payload (its JSON text) holds."""
    return base64.b64decode(orjson.loads(text)["b64"])


def join_parts(ref: Sequence[Any], chunks: list[bytes]) -> bytes:
    """The bytes of the parts ``chunks`` (each part's, in order; the list is emptied),
    checked against ``ref`` (``[key, count, bytes]``); :class:`~cwstore.DatabaseError`
    when they do not match it."""
    key, count, size = ref
    found = len(chunks)
    data = b"".join(chunks)
    chunks.clear()
    if found != count or len(data) != size:
        raise DatabaseError(
            f"{key}: {found} parts of {len(data)} bytes read, {count} of {size} stored"
        )
    return data
