from django.apps import AppConfig


class FrontsConfig(AppConfig):
    """The ways in from outside for clients that already speak a protocol: the MCP endpoint
    (every visible agent as a tool) and the OpenAI-compatible front. At the top with routines and
    integrations: they call the pipeline and the task system like any other entry point."""

    name = "fronts"
