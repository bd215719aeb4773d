from django.apps import AppConfig


class RoutinesConfig(AppConfig):
    """The scheduled side: routines, reminders (next: pulse and goal loops). Above the work
    layer: a routine fires work for agents, and its tools join the registry."""

    name = "routines"

    def ready(self):
        # Registers the reminder tools with the registry.
        from routines import tools  # noqa: F401
