"""Erasure without a server: the error map, argument checks, durations and the CLI's
refusals that happen before it connects."""

from __future__ import annotations

import json
import pickle
from datetime import timedelta
from typing import Any

import pytest

import cwstore
from cwstore import GraphErasedError, InputError, UnknownGraphError
from cwstore._arg_checks import timeout_settings
from cwstore.cli import main
from cwstore.cli.erase import parse_duration
from cwstore.errors import from_sqlstate


def test_cw404_with_erased_in_detail_is_graph_erased() -> None:
    err = from_sqlstate("CW404", "graph was erased", json.dumps({"graph": "g", "erased": True}))
    assert type(err) is GraphErasedError
    assert err.graph == "g"
    assert isinstance(err, UnknownGraphError)
    assert err.sqlstate == "CW404"


@pytest.mark.parametrize(
    "detail", [None, json.dumps({"graph": "g"}), json.dumps({"graph": "g", "erased": False})]
)
def test_cw404_otherwise_is_unknown_graph(detail: str | None) -> None:
    assert type(from_sqlstate("CW404", "no such graph", detail)) is UnknownGraphError


def test_graph_erased_pickles_and_is_exported() -> None:
    err = GraphErasedError(graph="g")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is GraphErasedError and back.graph == "g" and back.message == err.message
    for name in ("GraphErasedError", "ErasedItem", "ErasedGraph", "IdleGraph", "ErasedIdleGraph"):
        assert name in cwstore.__all__


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", timedelta(days=90)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "90", "d", "0d", "0h0m", "-1d", "1.5d", "1y", "90 days"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InputError):
        parse_duration(text)


class _NoPool:
    """A pool that fails the test if a store touches it."""

    dsn = "postgresql://nowhere/none"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store used its pool ({name}) for arguments it must refuse")


@pytest.mark.parametrize(
    ("call", "args", "kwargs"),
    [
        ("erase", ("",), {}),
        ("erase", ("g",), {"reason": 5}),
        ("erase_tenant", ("",), {}),
        ("erase_tenant", (None,), {}),
        ("erase_tenant", ("t",), {"batch": 0}),
        ("erase_tenant", ("t",), {"batch": 1.5}),
        ("idle_graphs", (timedelta(0),), {}),
        ("idle_graphs", ("90d",), {}),
        ("idle_graphs", (timedelta(days=1),), {"tenant": ""}),
        ("erase_idle", (timedelta(days=1),), {"batch": False}),
        ("erase_idle", (timedelta(microseconds=-1),), {}),
    ],
)
async def test_both_stores_refuse_bad_arguments_before_io(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InputError):
        await getattr(cwstore.AsyncStore(_NoPool()), call)(*args, **kwargs)
    with pytest.raises(InputError):
        getattr(cwstore.Store(_NoPool()), call)(*args, **kwargs)


@pytest.mark.parametrize(
    "argv",
    [
        ["erase", "--graph", "g"],
        ["erase", "--tenant", "acme", "--reason", "gone"],
        ["retention", "--idle", "90d"],
    ],
)
def test_without_a_terminal_and_without_yes_nothing_is_asked_or_erased(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before connecting: the DSN names no server, and the answer is still the
    refusal, not a connection error."""
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code = main([*argv, "--dsn", "postgresql://nobody@127.0.0.1:1/none"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--yes" in err and "nothing was erased" in err and "Traceback" not in err


def test_retention_refuses_a_bad_duration_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["retention", "--idle", "forever", "--dry-run", "--dsn", "postgresql://x@h:1/d"])
    assert code == 2
    assert "--idle" in capsys.readouterr().err


def test_erase_needs_graph_or_tenant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["erase", "--yes"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit):
        main(["erase", "--graph", "g", "--tenant", "t", "--yes"])


@pytest.mark.parametrize("bad", [0, -1, True, "5", 86_401, float("nan")])
def test_a_bad_statement_timeout_is_refused_before_connecting(bad: object) -> None:
    with pytest.raises(InputError):
        timeout_settings(bad)  # type: ignore[arg-type]


def test_a_statement_timeout_is_milliseconds_of_the_session() -> None:
    assert timeout_settings(None) == {}
    assert timeout_settings(0.5) == {"statement_timeout": "500ms"}
    assert timeout_settings(300) == {"statement_timeout": "300000ms"}
