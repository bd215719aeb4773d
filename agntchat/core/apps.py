from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "agntchat.core"
    label = "core"
