"""Fixtures that start the stand-ins, shared by test modules in more than one folder. A module
makes one its own with `google_api = standin_fixtures.google_api` (a conftest would hand it to
every test below it)."""

import pytest

from tests.integrations.google_github_standin import GoogleStandin


@pytest.fixture
def google_api(settings):
    """The local stand-in for Google's REST APIs, with the Google tools pointed at it."""
    standin = GoogleStandin().start()
    settings.GOOGLE_API_BASE = standin.url
    yield standin
    standin.stop()
