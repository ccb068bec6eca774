"""Where the public API has an async and a sync form, the twins are named by one rule
(README, "Development"): a class's async twin is ``Async<Name>`` and its sync twin
``<Name>``, as psycopg's and LangGraph's are; a module-level function's async twin is
``<name>`` and its sync twin ``<name>_sync``. Checked on the ``__all__`` of every public
module (no part of its dotted name starts with ``_``), so ``connect_async`` or
``SyncStore`` fails here."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import cwstore

PACKAGE = Path(cwstore.__file__).parent
_TOOL = PACKAGE.parent / "tools" / "async_to_sync.py"


def _exported(path: Path) -> list[str]:
    """The names a module's literal ``__all__`` lists."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [str(n) for n in ast.literal_eval(node.value)]
    return []


def _public_modules() -> dict[str, list[str]]:
    """Each public module of cwstore with a non-empty ``__all__``, and that list."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts):
            continue
        if names := _exported(path):
            found[".".join(parts)] = names
    return found


MODULES = _public_modules()
HOME = {n: m for m, names in reversed(sorted(MODULES.items())) for n in names}
"""Each exported name and a public module that exports it (the package's root when it
re-exports the name: twins may live in sibling modules, ``store_async`` and ``store``)."""


def _words(name: str) -> list[str]:
    """``name`` cut into its words, lowercased: ``AsyncCwstoreSaver`` -> async, cwstore,
    saver; ``connect_sync`` -> connect, sync."""
    return [w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", name)]


def _misnamed(name: str) -> str | None:
    """Why ``name`` breaks the rule, or None: "async" may only open a class's name
    (``Async`` and a capital), "sync" may only end a function's (``_sync``)."""
    words = _words(name)
    if "async" in words and not re.fullmatch(r"Async[A-Z]\w*", name):
        return "an async twin is Async<Name> (a class) or <name> (a function)"
    if "async" in words[1:]:
        return "'async' may only open a class's name"
    if "sync" in words and not re.fullmatch(r"[a-z]\w*_sync", name):
        return "a sync twin is <Name> (a class) or <name>_sync (a function)"
    if "sync" in words[:-1]:
        return "'sync' may only end a function's name"
    return None


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    """The twins ``names`` holds by the rule: (async name, sync name)."""
    pairs = [(n.removesuffix("_sync"), n) for n in names if n.endswith("_sync")]
    pairs += [(n, n.removeprefix("Async")) for n in names if re.fullmatch(r"Async[A-Z]\w*", n)]
    return pairs


def test_the_modules_are_found() -> None:
    assert {"cwstore", "cwstore.migrate", "cwstore.roles", "cwstore.langgraph"} <= set(MODULES)
    pairs = _pairs(sorted(HOME))
    assert ("connect", "connect_sync") in pairs and ("AsyncStore", "Store") in pairs
    assert ("setup", "setup_sync") in pairs and ("install_roles", "install_roles_sync") in pairs
    assert ("AsyncCwstoreSaver", "CwstoreSaver") in pairs
    assert HOME["AsyncStore"] == HOME["connect_sync"] == "cwstore"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_exported_name_follows_the_rule(module: str) -> None:
    bad = {n: why for n in MODULES[module] if (why := _misnamed(n))}
    assert bad == {}


def test_every_twin_has_its_other_half() -> None:
    missing = [n for pair in _pairs(list(HOME)) for n in pair if n not in HOME]
    assert missing == [], "one twin is exported without the other"


@pytest.mark.parametrize(("a", "s"), _pairs(sorted(HOME)))
def test_the_async_twin_is_async_and_the_sync_one_is_not(a: str, s: str) -> None:
    one = getattr(importlib.import_module(HOME[a]), a)
    other = getattr(importlib.import_module(HOME[s]), s)
    if inspect.isclass(one):
        assert inspect.isclass(other), (a, s)
    else:
        assert inspect.iscoroutinefunction(one), f"{HOME[a]}.{a} is not a coroutine function"
        assert not inspect.iscoroutinefunction(other), f"{HOME[s]}.{s} is a coroutine function"


def _generator_names() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("async_to_sync", _TOOL)
    assert spec is not None and spec.loader is not None
    tool: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return dict(tool.NAMES)


def test_the_generator_names_exported_twins_by_the_rule() -> None:
    """Each public class ``Async<Name>`` or function ``tools/async_to_sync.py`` renames
    gets the name the rule gives. (A driver's adapter is named for its driver:
    ``AsyncpgPool`` becomes ``PsycopgPool``.)"""
    renamed = {
        a: s
        for a, s in _generator_names().items()
        if a in HOME and (re.fullmatch(r"Async[A-Z]\w*", a) or a[0].islower())
    }
    assert "AsyncStore" in renamed and "connect" in renamed
    for a, s in renamed.items():
        assert s == (a.removeprefix("Async") if a[0].isupper() else f"{a}_sync"), a


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("connect_async", True),
        ("async_connect", True),
        ("SyncStore", True),
        ("StoreSync", True),
        ("StoreAsync", True),
        ("AsyncStoreSync", True),
        ("setup_sync_all", True),
        ("AsyncStore", False),
        ("connect_sync", False),
        ("Store", False),
        ("AsyncpgPool", False),
    ],
)
def test_the_check_tells_a_misnamed_twin(name: str, wrong: bool) -> None:
    assert (_misnamed(name) is not None) is wrong
