from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """Adapters to outside systems: OAuth connections (Google, GitHub), custom APIs, external
    MCP servers, SSH, web fetch and search, external messaging channels (issue 24)."""

    name = "integrations"
