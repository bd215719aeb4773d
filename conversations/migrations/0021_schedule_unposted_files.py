"""Uploads never posted with a message are deleted (with their bytes): every hour."""

from django.db import migrations

NAME = "delete unposted files"


def add_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "conversations.jobs.delete_unposted_files",
            "schedule_type": "I",
            "minutes": 60,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("conversations", "0020_attachment"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
