"""Telegram sends that failed (or whose job never ran) are tried again: every minute."""

from django.db import migrations

NAME = "retry telegram sends"


def add_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "integrations.telegram.retry_sends",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("integrations", "0002_telegram"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
