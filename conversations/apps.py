from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"

    def ready(self):
        from django.db.models.signals import post_delete

        from agents.signals import agent_left_workspaces
        from conversations import actions, files
        from conversations.models import Attachment

        # Bytes follow their row, however it goes (a cascade from its message or conversation).
        post_delete.connect(files.forget_bytes, sender=Attachment, dispatch_uid="attachment-bytes")
        # An agent that no longer appears in a workspace (the agents app, below, cannot call
        # here) is given nothing more of it: its queued work there is dropped.
        agent_left_workspaces.connect(
            actions.agent_left_workspaces, dispatch_uid="agent-left-workspaces"
        )
