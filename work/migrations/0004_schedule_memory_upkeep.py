"""Memory upkeep (MEM-3) as django-q2 schedules; each job is idempotent."""

from django.db import migrations

SCHEDULES = {
    "summarise long conversations": ("work.jobs.summarise_conversations", 30),
    "decay unused memories": ("work.jobs.decay_memories", 60 * 6),
    "consolidate family memory": ("work.jobs.consolidate_family_memory", 60 * 24),
}


def add_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (func, minutes) in SCHEDULES.items():
        Schedule.objects.get_or_create(
            name=name,
            defaults={"func": func, "schedule_type": "I", "minutes": minutes, "repeats": -1},
        )


def remove_schedules(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name__in=SCHEDULES).delete()


class Migration(migrations.Migration):
    dependencies = [("work", "0003_memory"), ("django_q", "0018_task_success_index")]

    operations = [migrations.RunPython(add_schedules, remove_schedules)]
