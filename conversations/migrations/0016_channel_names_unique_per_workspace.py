# Channel names become unique per workspace among live channels (issue 19, item 15). Existing
# channels are first given their normalised names (as conversations/channels.py writes them, a
# copy frozen here), and a name already taken in the workspace gets "-2", "-3"… (the oldest
# channel keeps it); an empty name becomes "channel".

import re
import unicodedata

import django.db.models.functions.text
from django.conf import settings
from django.db import migrations, models


def channel_name(raw):
    name = unicodedata.normalize("NFKC", raw or "").strip().lstrip("#").lower()
    name = re.sub(r"[^\w-]", "", re.sub(r"[\s.]+", "-", name))
    return re.sub(r"-{2,}", "-", name).strip("-")[:80].rstrip("-")


def normalise_channel_names(apps, schema_editor):
    Conversation = apps.get_model("conversations", "Conversation")
    taken = {}
    channels = Conversation.objects.filter(kind="channel").order_by("created_at", "id")
    for channel in channels.only("id", "workspace_id", "title").iterator():
        names = taken.setdefault(channel.workspace_id, set())
        base = channel_name(channel.title) or "channel"
        name, n = base, 1
        while name in names:
            n += 1
            suffix = f"-{n}"
            name = base[: 80 - len(suffix)] + suffix
        names.add(name)
        if name != channel.title:
            Conversation.objects.filter(pk=channel.pk).update(title=name)


class Migration(migrations.Migration):

    dependencies = [
        ('conversations', '0015_delivery_answered_at'),
        ('workspaces', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='conversation',
            name='archived_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(normalise_channel_names, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='conversation',
            constraint=models.UniqueConstraint(django.db.models.functions.text.Lower('title'), models.F('workspace'), condition=models.Q(('archived_at__isnull', True), ('kind', 'channel')), name='channel_name_unique_in_workspace'),
        ),
    ]
