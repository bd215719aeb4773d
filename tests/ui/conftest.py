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
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            violations = watch_for_csp_violations(chromium)
            yield chromium, server
            chromium.close()
    finally:
        server.stop()
    # The pages work under their Content-Security-Policy: nothing they do is refused by it.
    assert not violations, "\n".join(violations)


def watch_for_csp_violations(chromium) -> list[str]:
    """Every context of CHROMIUM reports what its pages' console says of the CSP, here."""
    violations = []
    new_context = chromium.new_context

    def watched(*args, **kwargs):
        context = new_context(*args, **kwargs)
        context.on(
            "console",
            lambda message: (
                violations.append(f"{message.location.get('url')}: {message.text}")
                if "Content Security Policy" in message.text
                else None
            ),
        )
        return context

    chromium.new_context = watched
    return violations
