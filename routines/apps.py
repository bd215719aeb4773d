from django.apps import AppConfig


class RoutinesConfig(AppConfig):
    """The scheduled side: routines, pulse, loops and reminders (issue 23). Above the work
    layer: a routine fires work for agents."""

    name = "routines"
