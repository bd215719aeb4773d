# Full-text vectors of artifacts' titles and versions' contents, stored: work/search.py ranks on
# them, as on messages' (conversations 0027, which says how this stays safe on a big table).

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations

from agntchat.core.search import fill_vectors, vector_trigger


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("artifacts", "0005_search_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="artifact",
            name="search_vector",
            field=django.contrib.postgres.search.SearchVectorField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="artifactversion",
            name="search_vector",
            field=django.contrib.postgres.search.SearchVectorField(editable=False, null=True),
        ),
        vector_trigger("artifacts_artifact", "title"),
        vector_trigger("artifacts_artifactversion", "content"),
        fill_vectors("artifacts_artifact"),
        fill_vectors("artifacts_artifactversion"),
        AddIndexConcurrently(
            model_name="artifact",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_vector"], name="artifact_search_vector"
            ),
        ),
        AddIndexConcurrently(
            model_name="artifactversion",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["search_vector"], name="artifact_version_search_vector"
            ),
        ),
        RemoveIndexConcurrently(model_name="artifact", name="artifact_title_search"),
        RemoveIndexConcurrently(model_name="artifactversion", name="artifact_version_search"),
    ]
