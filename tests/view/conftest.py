"""Fixtures of the view's tests: a real headless chromium (driven by playwright, never
downloaded: Debian's ``/usr/bin/chromium`` or ``CWSTORE_CHROMIUM``);
``support.view.view_server`` runs ``cwstore view`` itself

Without a browser (or without the ``view`` extra) the tests skip, except with
``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = os.environ.get("CWSTORE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the view tests need {reason} (CI must not skip them)")
    pytest.skip(f"the view tests need {reason}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium, one per test module."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        _missing(f"the 'view' and 'test' extras ({exc.name} is missing)")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _missing(f"a chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()
