"""Graph names: any non-empty text PostgreSQL can hold; refusals are InputError."""

from __future__ import annotations

import pytest

from cwstore import InputError
from cwstore._arg_checks import check_graph_name


@pytest.mark.parametrize(
    "name", ["g", "'); DROP TABLE cwstore.nodes; --", "a;b", "ünïcödé", "x" * 1000, "a\\b"]
)
def test_names_are_just_names(name: str) -> None:
    assert check_graph_name(name) == name


@pytest.mark.parametrize("name", ["", "a\x00b", "lone \ud800", None, 7, "日" * 700])
def test_refused_names_are_input_errors(name: object) -> None:
    with pytest.raises(InputError):
        check_graph_name(name)
