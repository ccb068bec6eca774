"""cwstore's modules form a graph without cycles, counting imports inside functions too
(an import moved into a function hides a cycle from Python, not from a reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import cwstore

PACKAGE = Path(cwstore.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The cwstore modules ``name`` imports, anywhere in its body (not the root package:
    every module is imported through it)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [module]
            targets += [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
        for t in targets:
            if t in known and t != "cwstore" and t != name:
                found.add(t)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_walk_sees_imports() -> None:
    modules = _modules()
    graph = {n: _imports(n, p, set(modules)) for n, p in modules.items()}
    assert "cwstore.errors" in graph["cwstore.document"]
    assert "cwstore.drivers.asyncpg" in graph["cwstore.store_async"]
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {n: _imports(n, p, set(modules)) for n, p in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_every_public_name_resolves() -> None:
    missing = [n for n in cwstore.__all__ if not hasattr(cwstore, n)]
    assert missing == []
