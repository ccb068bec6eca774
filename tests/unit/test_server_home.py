"""Where the embedded server keeps its data, and what it reports when none runs. No server."""

from __future__ import annotations

from pathlib import Path

import pytest

from cwstore import server


def test_cwstore_home_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CWSTORE_HOME", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert server.data_home() == tmp_path / "explicit"


def test_xdg_data_home_next(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CWSTORE_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert server.data_home() == tmp_path / "xdg" / "cwstore"


def test_default_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CWSTORE_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert server.data_home() == tmp_path / ".local" / "share" / "cwstore"


def test_status_of_an_empty_home(tmp_path: Path) -> None:
    status = server.server_status(tmp_path)
    assert status["running"] is False
    assert status["initialized"] is False
    assert status["dsn"] is None
    assert status["data_dir"] == str(tmp_path.resolve() / "pgdata")
    assert server.stop_server(tmp_path) is False
