"""Sweep expired permission requests every minute (django-q2; idempotent)."""

from django.db import migrations

NAME = "expire unanswered permission requests"


def add_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "work.jobs.expire_permissions",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("work", "0001_initial"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
