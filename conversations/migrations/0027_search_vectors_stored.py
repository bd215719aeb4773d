# Full-text vectors of messages' bodies and tasks' instructions, stored: work/search.py ranks on
# them. Safe on a big table, as reads and posts go on: the columns are added empty (no rewrite),
# a trigger fills them on every write from then on, the rows before are filled a batch per
# transaction, and the indexes are built (and the old expression indexes dropped) concurrently.
# How long it takes for 100,000 messages: docs/benchmarks.md.

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations

from agntchat.core.search import fill_vectors, vector_trigger


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("conversations", "0026_task_chains"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="search_vector",
            field=django.contrib.postgres.search.SearchVectorField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="task",
            name="search_vector",
            field=django.contrib.postgres.search.SearchVectorField(editable=False, null=True),
        ),
        vector_trigger("conversations_message", "body"),
        vector_trigger("conversations_task", "instructions"),
        fill_vectors("conversations_message"),
        fill_vectors("conversations_task"),
        AddIndexConcurrently(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_vector"], name="message_search_vector"
            ),
        ),
        AddIndexConcurrently(
            model_name="task",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_vector"], name="task_search_vector"
            ),
        ),
        RemoveIndexConcurrently(model_name="message", name="message_body_search"),
        RemoveIndexConcurrently(model_name="task", name="task_instructions_search"),
    ]
