"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) on both savers.

Every capability must be detected and pass: the suite's report says "FULL" even when a
capability is not detected at all, so the test checks each one itself. The sync saver
runs the same suite through a thin adapter whose async methods call the sync ones in a
thread, so what is tested is the sync code.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport

import cwstore
from cwstore.langgraph import AsyncCwstoreSaver, CwstoreSaver

BASE_TESTS = 58
EXTENDED_TESTS = 23


class _SyncUnderTest(CwstoreSaver):
    """The sync saver seen through the async methods the suite calls."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(self, *args: Any) -> RunnableConfig:
        return await asyncio.to_thread(self.put, *args)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _check(report: CapabilityReport) -> None:
    report.print_report()
    problems = {
        name: (r.detected, r.failures)
        for name, r in report.results.items()
        if not r.detected or r.passed is not True
    }
    assert problems == {}
    assert {c.value for c in ALL_CAPABILITIES} == set(report.results)
    passed = sum(r.tests_passed for r in report.results.values())
    assert passed == BASE_TESTS + EXTENDED_TESTS


async def test_async_saver_passes_the_conformance_suite(db_dsn: str) -> None:
    store = await cwstore.connect(db_dsn)

    async def factory() -> AsyncGenerator[AsyncCwstoreSaver, None]:
        yield AsyncCwstoreSaver(store)

    try:
        _check(await validate(checkpointer_test(name="AsyncCwstoreSaver")(factory)))
    finally:
        await store.close()


async def test_sync_saver_passes_the_conformance_suite(db_dsn: str) -> None:
    store = cwstore.connect_sync(db_dsn)

    async def factory() -> AsyncGenerator[CwstoreSaver, None]:
        yield _SyncUnderTest(store)

    try:
        _check(await validate(checkpointer_test(name="CwstoreSaver")(factory)))
    finally:
        store.close()


@pytest.mark.parametrize("setup", [True])
async def test_from_dsn_with_setup_opens_and_closes_its_store(db_dsn: str, setup: bool) -> None:
    async with AsyncCwstoreSaver.from_dsn(db_dsn, setup=setup) as saver:
        await saver.setup()
        assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None
