"""A store on the module's database for the OpenAI Agents SDK session tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import cwstore


@pytest.fixture
async def store(db_dsn: str) -> AsyncIterator[cwstore.AsyncStore]:
    """An :class:`~cwstore.AsyncStore` on the module's migrated database."""
    async with await cwstore.connect(db_dsn, max_size=4) as s:
        yield s
