"""Cards' HTML is stored with the card (conversations show it without knowing cards): render it
for cards posted before."""

from django.db import migrations

from artifacts.cards_store import with_card_html


def render_stored_cards(apps, schema_editor):
    Message = apps.get_model("conversations", "Message")
    for message in Message.objects.filter(payload__has_key="card").exclude(
        payload__has_key="card_html"
    ):
        message.payload = with_card_html(message.payload)
        message.save(update_fields=["payload"])


class Migration(migrations.Migration):
    dependencies = [
        ("artifacts", "0003_artifactversion_rendered"),
        ("conversations", "0018_settle_cancel_job_moved"),
    ]

    operations = [migrations.RunPython(render_stored_cards, migrations.RunPython.noop)]
