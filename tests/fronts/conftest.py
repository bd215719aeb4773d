"""The MCP tests' shared pieces: a person's API token, and no MCP session left in Redis by an
earlier test (sessions are per person, and capped)."""

import pytest
from django.conf import settings

from agntchat.core.presence import client as redis
from workspaces.actions import issue_api_token


def mcp_keys() -> list:
    return redis().keys(f"{settings.REDIS_PREFIX}:mcp:*")


@pytest.fixture
def no_mcp_sessions():
    for key in mcp_keys():
        redis().delete(key)


@pytest.fixture
def token(alice, nova):
    return issue_api_token(alice)[1]
