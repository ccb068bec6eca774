"""The worked example of docs/integrations.md runs as written: its ``queries.sql`` and
``__init__.py`` become a package ``notes``, which adds notes in a transaction of its
own, lists them from a snapshot, and refuses a bad batch as the store would."""

from __future__ import annotations

import importlib
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import cwstore

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _example_blocks() -> tuple[str, str]:
    """The ``sql`` and ``python`` blocks under "A worked example"."""
    section = DOC.read_text(encoding="utf-8").split("## A worked example", 1)[1]
    sql = re.findall(r"```sql\n(.*?)```", section, re.S)
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(sql) == 1 and len(python) == 1
    return sql[0], python[0]


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[ModuleType]:
    sql, python = _example_blocks()
    package = tmp_path / "notes"
    package.mkdir()
    (package / "queries.sql").write_text(sql, encoding="utf-8")
    (package / "__init__.py").write_text(python, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("notes")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("notes", None)


async def test_the_worked_example_runs(db_dsn: str, notes: Any) -> None:
    graph = f"notes-{uuid.uuid4().hex}"
    async with await cwstore.connect(db_dsn) as store:
        assert await notes.setup(store) == []
        added = await notes.add_notes(store, graph, ["buy milk", "call Ada"])
        assert [n.sequence for n in added] == [1, 2]
        assert await notes.notes(store, graph) == ["buy milk", "call Ada"]
        with pytest.raises(cwstore.ValidationError):
            await notes.add_notes(store, graph, ["fine", "\ud800"])
        with pytest.raises(cwstore.InputError):
            await notes.add_notes(store, "", ["no graph"])
        assert await notes.notes(store, graph) == ["buy milk", "call Ada"]
        [info] = [g for g in await store.graphs() if g.name == graph]
        assert info.length == 2
        async with store.connection() as conn:
            group = await conn.fetchval(
                "SELECT retention_group FROM cwstore.graphs WHERE name = $1", graph
            )
        assert group == f"notes:{graph}"
