"""Seed the platform card template library (CARD-2); staff edit it in the admin afterwards."""

from django.db import migrations


def seed(apps, schema_editor):
    from artifacts.actions import seed_card_templates

    seed_card_templates(apps.get_model("artifacts", "CardTemplate"))


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
