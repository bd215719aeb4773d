"""The cancel-settling job moved with tasks: agents.jobs → conversations.jobs."""

from django.db import migrations

OLD, NEW = "agents.jobs.settle_cancel_requests", "conversations.jobs.settle_cancel_requests"


def point_at(func_from, func_to):
    def run(apps, schema_editor):
        apps.get_model("django_q", "Schedule").objects.filter(func=func_from).update(func=func_to)

    return run


class Migration(migrations.Migration):
    dependencies = [("conversations", "0017_move_tasks_to_conversations")]

    operations = [migrations.RunPython(point_at(OLD, NEW), point_at(NEW, OLD))]
