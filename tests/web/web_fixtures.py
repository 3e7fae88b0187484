"""Fixtures: the demo page served by a real ``seawall web`` process on a loopback port, the same
application under uvicorn in this process (so that coverage sees it), and a headless Chromium
(Debian's ``chromium`` through its ``chromium-driver``) driven by Selenium.

The test modules load them as a plugin (``pytest_plugins``): a ``conftest.py`` here would take
the module name ``conftest`` that other directories' tests import their helpers by.

Without Chromium the browser tests are skipped, except under ``CI=true``, where they fail
(``make services`` installs it). Screenshots land in ``.artefacts/web/`` (or
``$SEAWALL_ARTEFACTS``), which git ignores.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from web_servers import seawall_web, served

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver",)


def _which(names: tuple[str, ...], extra: tuple[str, ...] = ()) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return next((p for p in extra if os.access(p, os.X_OK)), None)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def artefacts() -> pathlib.Path:
    """Where screenshots go."""
    path = pathlib.Path(os.environ.get("SEAWALL_ARTEFACTS", ROOT / ".artefacts" / "web"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def page_url() -> Iterator[str]:
    """The URL the ``seawall web --port 0`` process printed; the process ends with the session."""
    with seawall_web() as url:
        yield url


@pytest.fixture(scope="module")
def app_url() -> Iterator[str]:
    """The page's application under uvicorn in a thread of this process, on a loopback port."""
    from seawall.web import create_app

    with served(create_app()) as url:
        yield url


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """A headless Chromium session (one for all the browser tests: starting one takes time)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as err:  # pragma: no cover - the dev extra installs selenium
        _unavailable(f"selenium is not installed: {err}")
    binary = _which(CHROMIUM)
    driver_path = _which(DRIVER, ("/usr/lib/chromium/chromedriver",))
    if binary is None or driver_path is None:
        _unavailable("Chromium or chromedriver is not installed (`make services` installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--window-size=1200,900",
    ):
        options.add_argument(flag)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium then downloads nothing.
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    except Exception as err:
        _unavailable(f"Chromium could not start: {err}")
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
