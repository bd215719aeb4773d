from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"

    def ready(self):
        from django.db.models.signals import post_delete

        from conversations import files
        from conversations.models import Attachment

        # Bytes follow their row, however it goes (a cascade from its message or conversation).
        post_delete.connect(files.forget_bytes, sender=Attachment, dispatch_uid="attachment-bytes")
