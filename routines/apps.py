from django.apps import AppConfig


class RoutinesConfig(AppConfig):
    """The scheduled side: routines, reminders (next: pulse and goal loops). Above the work
    layer: a routine fires work for agents, and its tools join the registry."""

    name = "routines"

    def ready(self):
        from agents.signals import agent_left_workspaces

        # Importing tools registers the reminder tools with the registry.
        from routines import owner_left, tools  # noqa: F401

        # An agent whose owner left a workspace (the agents app, below, cannot call here) runs
        # none of what was set up there: its routines, loops and reminders stop.
        agent_left_workspaces.connect(
            owner_left.stop_scheduled_work, dispatch_uid="routines-owner-left"
        )
