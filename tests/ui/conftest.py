"""Fixtures of the browser tests."""

import pytest
from playwright.sync_api import sync_playwright

from tests.socket_helpers import Daphne
from tests.ui.browser import CHROMIUM, CHROMIUM_ARGS, Orm


@pytest.fixture
def orm():
    """Database work on a thread of its own, as Playwright keeps an event loop on the test's
    (tests/ui/browser.py, Orm)."""
    runner = Orm()
    yield runner
    runner.close()


@pytest.fixture
def browser(story):
    """Chromium and a daphne server, started once the module's STORY (its rows) is built."""
    server = Daphne()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium, server
        chromium.close()
    server.stop()
