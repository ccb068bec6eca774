"""The fast paths of ``cwstore._jsontext`` decide as the full walks do.

:func:`problems` first asks ``_plain`` (one walk without paths) and walks every value
with its path only when that finds something; :func:`write` without a key order hands
a value without floats straight to json's C encoder. Neither may change an answer:
every value ``_plain`` passes has no problem by the full walk, and every value written
by the fast path is written as the iterative writer writes it.
"""

from __future__ import annotations

import enum
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cwstore._jsontext import (
    _FLOATS,
    _NO_FLOATS,
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    BadNumber,
    DuplicateKeysDict,
    HugeInteger,
    _plain,
    _problems_walk,
    _write_slow,
    problems,
    write,
)

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Level(enum.IntEnum):
    LOW = 1


class Colour(enum.StrEnum):
    RED = "red"


def _duplicated(d: dict[str, Any]) -> DuplicateKeysDict:
    out = DuplicateKeysDict(d)
    out.duplicates = sorted(d)[:1]
    return out


odd_scalars = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        MAX_SAFE_INTEGER + 1,
        -MAX_SAFE_INTEGER - 1,
        10**20,
        2**63,
        BadNumber("NaN"),
        HugeInteger("9" * 5000),
        Level.LOW,
        Colour.RED,
        b"bytes",
        "\ud800",
        "a\udfffb",
        1.0,
        1e16,
        1e-7,
        -0.0,
    ]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | odd_scalars
)
keys = st.text(max_size=6) | st.sampled_from(["\udc00", "é", "0", "10"])


def _values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(keys, inner, max_size=4)
            | st.dictionaries(keys, inner, min_size=1, max_size=3).map(_duplicated)
            | st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2)
        ),
        max_leaves=12,
    )


@SETTINGS
@given(value=_values())
def test_a_plain_value_has_no_problem(value: Any) -> None:
    found = list(_problems_walk(value, "$"))
    if _plain(value) is not None:
        assert found == []
    assert list(problems(value)) == found


@SETTINGS
@given(value=_values())
def test_the_fast_writer_writes_as_the_full_one(value: Any) -> None:
    if _plain(value) is None:
        return
    assert write(value) == _write_slow(value, None)


def test_plain_tells_floats_apart() -> None:
    assert _plain({"a": [1, "x", None, True]}) is _NO_FLOATS
    assert _plain({"a": [1, 2.5]}) is _FLOATS
    assert _plain({"a": 1.0}) is _FLOATS
    assert write({"a": 1.0, "b": [1e21]}) == '{"a":1,"b":[1e+21]}'


def test_depth_is_bounded_as_the_full_walk_bounds_it() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert _plain(deep) is not None and list(problems(deep)) == []
    deeper = [deep]
    assert _plain(deeper) is None
    assert [c for c, _, _ in problems(deeper)] == ["unrepresentable"]
