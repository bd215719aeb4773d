"""The reminder sweep (PRO-4) as a django-q2 schedule: every minute."""

from django.db import migrations

NAME = "fire due reminders"


def add_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "routines.jobs.fire_reminders",
            "schedule_type": "I",
            "minutes": 1,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("routines", "0003_reminders"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
