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


SEAM = {"connection", "snapshot", "transaction", "follower"}
"""The seam for integrations: context managers (async with / with), not coroutines."""


@pytest.mark.parametrize("name", sorted(set(_public(AsyncStore)) - SEAM))
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


@pytest.mark.parametrize("name", sorted(SEAM))
def test_the_seam_is_a_context_manager_on_both(name: str) -> None:
    """Each seam method, called on a store whose pool hands out placeholders, gives an
    async context manager on AsyncStore and a context manager on Store."""

    class Pool:
        dsn = "postgresql://"

        def connection(self) -> object:
            return _Ctx()

        def listener(self) -> object:
            return _Ctx()

    class _Ctx:
        def transaction(self, **_: object) -> _Ctx:
            return self

        async def __aenter__(self) -> _Ctx:
            return self

        async def __aexit__(self, *_: object) -> None:
            return None

        def __enter__(self) -> _Ctx:
            return self

        def __exit__(self, *_: object) -> None:
            return None

    a = getattr(AsyncStore(Pool()), name)()  # type: ignore[arg-type]
    s = getattr(Store(Pool()), name)()  # type: ignore[arg-type]
    assert hasattr(a, "__aenter__") and hasattr(a, "__aexit__"), name
    assert hasattr(s, "__enter__") and hasattr(s, "__exit__"), name
