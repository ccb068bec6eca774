"""A thread id, namespace, checkpoint id, task id or run id PostgreSQL text cannot hold
(a NUL, a lone surrogate) is an :class:`cwstore.InputError` naming it, before anything
is written, from every method; on main a lone surrogate raised ``UnicodeEncodeError``
and a NUL a ``DatabaseError``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import cwstore
from cwstore.langgraph import CwstoreSaver

BAD = ["a\x00b", "a\ud800b"]


@pytest.fixture(scope="module")
def saver(db_dsn: str) -> Iterator[CwstoreSaver]:
    with cwstore.connect_sync(db_dsn) as store:
        yield CwstoreSaver(store)


def _conf(**conf: Any) -> Any:
    return {"configurable": {"thread_id": "ok", "checkpoint_ns": "", **conf}}


def _put(saver: CwstoreSaver, config: Any, checkpoint_id: str | None = None) -> Any:
    checkpoint: Any = {**empty_checkpoint(), **({"id": checkpoint_id} if checkpoint_id else {})}
    return saver.put(config, checkpoint, {}, {})


CALLS: dict[str, tuple[str, Callable[[CwstoreSaver, str], Any]]] = {
    "put thread": ("thread_id", lambda s, bad: _put(s, _conf(thread_id=bad))),
    "put namespace": ("checkpoint_ns", lambda s, bad: _put(s, _conf(checkpoint_ns=bad))),
    "put parent": ("checkpoint_id", lambda s, bad: _put(s, _conf(checkpoint_id=bad))),
    "put id": ("checkpoint id", lambda s, bad: _put(s, _conf(), bad)),
    "get_tuple": ("thread_id", lambda s, bad: s.get_tuple(_conf(thread_id=bad))),
    "list": ("thread_id", lambda s, bad: list(s.list(_conf(thread_id=bad)))),
    "list id": ("checkpoint_id", lambda s, bad: list(s.list(_conf(checkpoint_id=bad)))),
    "put_writes": (
        "thread_id",
        lambda s, bad: s.put_writes(_conf(thread_id=bad, checkpoint_id="c"), [], "t"),
    ),
    "put_writes task": ("task_id", lambda s, bad: s.put_writes(_conf(checkpoint_id="c"), [], bad)),
    "delete_thread": ("thread_id", lambda s, bad: s.delete_thread(bad)),
    "copy_thread": ("target_thread_id", lambda s, bad: s.copy_thread("ok", bad)),
    "prune": ("thread_id", lambda s, bad: s.prune([bad])),
    "delete_for_runs": ("run_id", lambda s, bad: s.delete_for_runs([bad])),
}


@pytest.mark.parametrize("bad", BAD, ids=["nul", "surrogate"])
@pytest.mark.parametrize("call", list(CALLS))
def test_text_postgres_cannot_hold_is_an_input_error(
    saver: CwstoreSaver, call: str, bad: str
) -> None:
    what, run = CALLS[call]
    with pytest.raises(cwstore.InputError, match=what):
        run(saver, bad)
