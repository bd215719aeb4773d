from django.apps import AppConfig


class UiConfig(AppConfig):
    """The browser app and the demo: pages read from every app, so they sit at the top."""

    name = "agntchat.ui"
    label = "ui"
