"""Register the periodic jobs with django-q2 (idempotent: existing schedules are kept)."""

from django.db import migrations

SCHEDULES = [
    ("abandon idle side threads", "conversations.jobs.abandon_threads", 5),
    ("settle unanswered cancel requests", "agents.jobs.settle_cancel_requests", 1),  # moved: 0018,
]


def add_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func, minutes in SCHEDULES:
        Schedule.objects.get_or_create(
            name=name, defaults={"func": func, "schedule_type": "I", "minutes": minutes, "repeats": -1}
        )


def remove_schedules(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name__in=[n for n, _, _ in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0005_conversation_agent_streak_and_more"),
        ("agents", "0004_task_owner_scores_task_work_conversation"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [migrations.RunPython(add_schedules, remove_schedules)]
