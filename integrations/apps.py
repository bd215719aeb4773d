from django.apps import AppConfig


class IntegrationsConfig(AppConfig):
    """Adapters to outside systems: OAuth connections (Google, GitHub), outside MCP servers and
    HTTP APIs as tool sources (issue 24). Above the work layer: their tools join the registry."""

    name = "integrations"

    def ready(self):
        # Registers the Google and GitHub tools, and the outside sources' tools, with the registry;
        # Telegram's relay with conversations.relays.
        from integrations import github, google, sources, telegram  # noqa: F401
