"""The periodic jobs that exist: each is registered with django-q2 by a migration, and runs."""

import inspect
from importlib import import_module

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunPython
from django_q.models import Schedule


def make_schedules_as_migrations_do() -> None:
    """Run, in migration order, every data migration of ours that writes django-q2 schedules
    (other tests' flushes leave none of their rows behind)."""
    loader = MigrationLoader(connection)
    for key in loader.graph.leaf_nodes():
        for app, name in loader.graph.forwards_plan(key):
            if app == "django_q":
                continue
            for operation in loader.graph.nodes[(app, name)].operations:
                if isinstance(operation, RunPython) and "Schedule" in inspect.getsource(
                    operation.code
                ):
                    operation.code(apps, None)


@pytest.mark.django_db
def test_the_schedules_that_exist_each_name_a_job_that_runs():
    Schedule.objects.all().delete()
    make_schedules_as_migrations_do()
    found = {s.name: (s.func, s.minutes) for s in Schedule.objects.all()}
    assert found == {
        "abandon idle side threads": ("conversations.jobs.abandon_threads", 5),
        "settle unanswered cancel requests": ("conversations.jobs.settle_cancel_requests", 1),
        "expire unanswered permission requests": ("work.jobs.expire_permissions", 1),
        "summarise long conversations": ("work.jobs.summarise_conversations", 30),
        "decay unused memories": ("work.jobs.decay_memories", 360),
        "consolidate family memory": ("work.jobs.consolidate_family_memory", 1440),
        "run due routines": ("routines.jobs.run_due_routines", 5),
        "fire due reminders": ("routines.jobs.fire_reminders", 1),
        "advance goal loops": ("routines.jobs.advance_loops", 1),
        "delete unposted files": ("conversations.jobs.delete_unposted_files", 60),
        "retry telegram sends": ("integrations.telegram.retry_sends", 1),
        "email notification digests": ("workspaces.jobs.send_digests", 15),
    }
    for func, _ in found.values():
        module, name = func.rsplit(".", 1)
        assert getattr(import_module(module), name)() == 0  # nothing to do, and it runs
