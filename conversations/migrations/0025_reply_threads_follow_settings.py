"""Reply threads opened before they followed their conversation's settings take them now
(conversations.actions.update_settings keeps them the same from here on)."""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def follow_origin_settings(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    Message = apps.get_model("conversations", "Message")
    origin_settings = Message.objects.filter(pk=OuterRef("parent_message_id")).values(
        "conversation__settings"
    )[:1]
    Conversation.objects.filter(kind="thread", thread_status="").update(
        settings=Subquery(origin_settings)
    )


class Migration(migrations.Migration):
    dependencies = [("conversations", "0024_search_indexes")]

    operations = [migrations.RunPython(follow_origin_settings, migrations.RunPython.noop)]
