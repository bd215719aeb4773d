"""Fixtures of the browser tests."""

import pytest

from tests.ui.browser import Orm


@pytest.fixture
def orm():
    """Database work on a thread of its own, as Playwright keeps an event loop on the test's
    (tests/ui/browser.py, Orm)."""
    runner = Orm()
    yield runner
    runner.close()
