"""Integrations use cwstore's public seam only (docs/integrations.md).

Every module under ``cwstore/langgraph``, ``cwstore/view``, ``cwstore/adk`` and
``cwstore/openai_agents`` (those that exist) is parsed, and fails when it imports from
cwstore anything ``cwstore/__init__.py`` does not export (a private module such as
``cwstore._sql``, a module such as ``cwstore.errors`` or ``cwstore.identity``, a name
missing from ``cwstore.__all__``), reads such a name as an attribute of ``cwstore``, or
touches a private member of the store (``store._pool``, ``self.store._connection()``).
Its own modules (``from ._mapping import ...``) are its business.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import cwstore

PACKAGE = Path(cwstore.__file__).resolve().parent
INTEGRATIONS = ("langgraph", "view", "adk", "openai_agents")
PUBLIC = frozenset(cwstore.__all__)


def _store_private_members() -> frozenset[str]:
    """The private members of the store: its ``_`` methods and the ``self._x`` it sets."""
    tree = ast.parse((PACKAGE / "store_async.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AsyncStore":
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.add(item.name)
                elif (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.value, ast.Name)
                    and item.value.id == "self"
                ):
                    found.add(item.attr)
    return frozenset(n for n in found if n.startswith("_") and not n.startswith("__"))


STORE_PRIVATE = _store_private_members()


def _absolute(module: str | None, level: int, package: str) -> str:
    """The absolute name of ``from <level dots><module> import ...`` in ``package``."""
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _refused_module(name: str, own: str) -> bool:
    """Whether importing module ``name`` reaches past the seam from package ``own``."""
    if name == own or name.startswith(own + "."):
        return False
    return name.startswith("cwstore.")


def violations(source: str, module: str) -> list[str]:
    """What in ``source`` (module ``module``, e.g. ``cwstore.langgraph._saver_async``)
    reaches past the public seam, one line each (empty: nothing)."""
    parts = module.split(".")
    own = ".".join(parts[:2])
    package = ".".join(parts[:-1])
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _refused_module(alias.name, own):
                    found.append(f"{where}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            source_module = _absolute(node.module, node.level, package)
            if source_module == "cwstore":
                found.extend(
                    f"{where}: from cwstore import {alias.name} (not exported)"
                    for alias in node.names
                    if alias.name not in PUBLIC
                )
            elif _refused_module(source_module, own):
                found.append(f"{where}: from {source_module} import ...")
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "cwstore":
                if node.attr not in PUBLIC:
                    found.append(f"{where}: cwstore.{node.attr} (not exported)")
            elif node.attr in STORE_PRIVATE and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                found.append(f"{where}: .{node.attr} (a private member of the store)")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in STORE_PRIVATE
        ):
            found.append(f"{where}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def _modules() -> list[Path]:
    return sorted(
        path
        for name in INTEGRATIONS
        if (PACKAGE / name).is_dir()
        for path in (PACKAGE / name).rglob("*.py")
    )


def _module_name(path: Path) -> str:
    return ".".join(("cwstore", *path.relative_to(PACKAGE).with_suffix("").parts))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_an_integration_uses_public_names_only(path: Path) -> None:
    assert violations(path.read_text(encoding="utf-8"), _module_name(path)) == []


@pytest.mark.parametrize(
    "name", [n for n in INTEGRATIONS if (PACKAGE / n / "queries.sql").is_file()]
)
def test_an_integrations_queries_are_run_as_written(name: str) -> None:
    """No ``{placeholder}`` for the reader to fill in: the SQL in ``queries.sql`` is
    the SQL that runs."""
    queries = cwstore.named_queries(f"cwstore.{name}")
    assert queries
    assert {q: re.findall(r"\{[A-Za-z_]\w*\}", text) for q, text in queries.items()} == {
        q: [] for q in queries
    }


def test_the_integrations_are_found() -> None:
    names = {_module_name(p) for p in _modules()}
    assert {"cwstore.langgraph._saver_async", "cwstore.view.app", "cwstore.view.live"} <= names


def test_the_store_has_private_members_to_guard() -> None:
    assert {"_pool", "_saved", "_graph", "_append_rows"} <= STORE_PRIVATE


@pytest.mark.parametrize(
    "source",
    [
        "from .. import _sql\n",
        "from .._rows import node_from_row\n",
        "from ..errors import DatabaseError\n",
        "from ..drivers._protocol import Row\n",
        "from cwstore.identity import compute_id\n",
        "from cwstore import _sql\n",
        "from cwstore import migrate_dsn\n",
        "import cwstore._sql\n",
        "import cwstore\nx = cwstore._sql\n",
        "import cwstore\nx = cwstore.identity.compute_id\n",
        "from ..view import app\n",
        "async def f(self):\n    async with self.store._pool.connection():\n        pass\n",
        "def f(store):\n    return store._graph(None, 'g')\n",
        "def f(store):\n    return getattr(store, '_pool')\n",
    ],
)
def test_what_reaches_past_the_seam_is_refused(source: str) -> None:
    assert violations(source, "cwstore.langgraph._saver_async") != []


@pytest.mark.parametrize(
    "source",
    [
        "from .. import AsyncStore, named_queries\n",
        "from cwstore import Error, node_from_row, prepare_append\n",
        "from ._mapping import CP_KIND\n",
        "from cwstore.langgraph._memo import Memo\n",
        "import cwstore\nx = cwstore.AsyncStore\n",
        "class S:\n    def f(self):\n        return self._pool\n",
    ],
)
def test_public_names_and_its_own_modules_pass(source: str) -> None:
    assert violations(source, "cwstore.langgraph._saver_async") == []
