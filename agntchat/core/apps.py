from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "agntchat.core"
    label = "core"

    def ready(self):
        from agntchat.core import schema  # noqa: F401  (registers the bearer auth scheme)
