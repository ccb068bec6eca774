"""The graph-key collision vector (``tests/vectors/graph_key_collision.json``),
recomputed from :mod:`hashlib`: the two names really share a probe-0 key, the key is
the one recorded, and the recorded birthday search finds exactly this pair first.

``tests/contract/test_erasure.py`` uses the pair on a server; this file makes sure the
pair still collides without one (a typo in a name would quietly turn the contract tests
into tests of two unrelated graphs).
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any

import pytest
from support.graph_keys import COLLISION, graph_key


def _vector() -> dict[str, Any]:
    return COLLISION


def test_the_two_names_share_their_probe_0_key() -> None:
    v = _vector()
    first, second = v["names"]
    assert first != second
    assert graph_key(first) == graph_key(second) == v["graph_key"]
    assert hashlib.md5(first.encode()).hexdigest()[:12] == v["md5_prefix"]
    assert int(v["md5_prefix"], 16) == v["graph_key"]
    # Only the first 48 bits agree: the names are not one MD5 in disguise.
    assert hashlib.md5(first.encode()).digest() != hashlib.md5(second.encode()).digest()


def test_the_python_key_is_the_sql_formula_on_known_values() -> None:
    # ('x' || left(md5('a'), 12))::bit(48)::bigint, computed by PostgreSQL 15.
    assert graph_key("a") == int("0cc175b9c0f1", 16) == 14025043329265
    assert graph_key("") == int("d41d8cd98f00", 16) == 233223382208256


@pytest.mark.slow
def test_the_recorded_birthday_search_finds_this_pair_first() -> None:
    v = _vector()
    search = v["search"]
    seen: dict[bytes, int] = {}
    for i in itertools.count():
        key = hashlib.md5(f"collide-{i}".encode()).digest()[:6]
        if key in seen:
            assert [seen[key], i] == search["first_repeat"]
            assert i + 1 == search["tried"]
            assert [f"collide-{seen[key]}", f"collide-{i}"] == v["names"]
            return
        seen[key] = i
        assert i < search["tried"], "the search went past the recorded pair"
