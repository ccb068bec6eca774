"""What a saver remembers stays within ``message_cache_bytes``: the messages it wrote or
read and the per-thread checkpoint states (which hold each thread's message list)
together. On main the states were not counted: with the bound at 0 a saver still held
every thread's latest states (tens of MiB after a few hundred threads).

Measured by :mod:`tracemalloc` (what the Python heap holds after the writes, the saver
alive), not by time.
"""

from __future__ import annotations

import gc
import tracemalloc
import uuid

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from support.langgraph import put_messages, thread_config

import cwstore
from cwstore.langgraph import CwstoreSaver

THREADS = 50
STEPS = 6
WORDS = 900
MIB = 1024 * 1024


def _threads(saver: CwstoreSaver, prefix: str, n: int) -> None:
    for t in range(n):
        thread = f"{prefix}-{t}"
        config = thread_config(thread)
        messages: list[BaseMessage] = []
        for i in range(STEPS):
            text = f"{thread} step {i} " + " ".join(f"w{(i * 7 + j) % 997}" for j in range(WORDS))
            cls = HumanMessage if i % 2 == 0 else AIMessage
            messages = [*messages, cls(content=text, id=f"{thread}-{i}")]
            config = put_messages(saver, config, messages, i + 1)


@pytest.mark.parametrize("bound", [0, 1 * MIB])
def test_a_saver_holds_no_more_than_its_bound(db_dsn: str, bound: int) -> None:
    prefix = f"bound-{bound}-{uuid.uuid4().hex[:6]}"
    with cwstore.connect_sync(db_dsn) as store:
        saver = CwstoreSaver(store, message_cache_bytes=bound)
        _threads(saver, prefix + "-warm", 1)  # the pool's connections, caches, imports
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            _threads(saver, prefix, THREADS)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        # About 50 x 6 messages of ~5 kB were written (~1.5 MB of text, several times
        # that as objects): a saver keeping every thread's latest state holds far more.
        assert held < bound + 1 * MIB, (
            f"{held / MIB:.1f} MiB held with a bound of {bound / MIB:.1f}"
        )
        # And it still reads and writes correctly.
        last = saver.get_tuple(thread_config(f"{prefix}-{THREADS - 1}"))
        assert last is not None and len(last.checkpoint["channel_values"]["messages"]) == STEPS
