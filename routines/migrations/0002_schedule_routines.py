"""The routine scheduler (PRO-2) as a django-q2 schedule: every five minutes."""

from django.db import migrations

NAME = "run due routines"


def add_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.get_or_create(
        name=NAME,
        defaults={
            "func": "routines.jobs.run_due_routines",
            "schedule_type": "I",
            "minutes": 5,
            "repeats": -1,
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [("routines", "0001_initial"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
