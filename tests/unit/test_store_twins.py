"""The sync Store is the AsyncStore's twin: same public methods, same parameters."""

from __future__ import annotations

import inspect

import pytest

from cwstore import AsyncStore, Store


def _public(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def test_same_public_methods() -> None:
    a, s = set(_public(AsyncStore)), set(_public(Store))
    assert a == s, f"only async: {sorted(a - s)}; only sync: {sorted(s - a)}"
    assert a >= {"append", "save", "frontier", "tail", "tail_all", "replay", "import_state"}


def test_same_public_attributes() -> None:
    def names(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    assert names(AsyncStore) == names(Store)


@pytest.mark.parametrize("name", sorted(_public(AsyncStore)))
def test_same_parameters(name: str) -> None:
    a = inspect.signature(getattr(AsyncStore, name))
    s = inspect.signature(getattr(Store, name))
    shape_a = [(p.name, p.kind, p.default) for p in a.parameters.values()]
    shape_s = [(p.name, p.kind, p.default) for p in s.parameters.values()]
    assert shape_a == shape_s, f"{name}: async {a} vs sync {s}"


@pytest.mark.parametrize("name", sorted(_public(AsyncStore)))
def test_async_twin_is_a_coroutine_or_async_iterator(name: str) -> None:
    a = getattr(AsyncStore, name)
    s = getattr(Store, name)
    if inspect.isasyncgenfunction(a):
        assert inspect.isgeneratorfunction(s), f"{name}: sync twin should be a generator"
    else:
        assert inspect.iscoroutinefunction(a), f"{name}: async method expected"
        assert not inspect.iscoroutinefunction(s), f"{name}: sync twin is a coroutine"


def test_context_managers() -> None:
    assert hasattr(AsyncStore, "__aenter__") and hasattr(AsyncStore, "__aexit__")
    assert hasattr(Store, "__enter__") and hasattr(Store, "__exit__")
