"""Graph keys computed in Python, and the collision vector
(``tests/vectors/graph_key_collision.json``: two names that share a probe-0 key)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

VECTOR_PATH = Path(__file__).resolve().parents[1] / "vectors" / "graph_key_collision.json"
COLLISION: dict[str, Any] = json.loads(VECTOR_PATH.read_text(encoding="utf-8"))
"""The vector as stored."""
COLLIDING: tuple[str, str] = (COLLISION["names"][0], COLLISION["names"][1])
"""Its two names, in the order a test makes them (the second takes a detour)."""


def graph_key(name: str) -> int:
    """``cwstore.graph_key(name)`` in Python: the first 48 bits of MD5(UTF-8(name))."""
    return int.from_bytes(hashlib.md5(name.encode("utf-8")).digest()[:6], "big")
