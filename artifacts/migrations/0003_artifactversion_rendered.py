"""Store each version's safe rendering with it (sanitised once, when stored, never per read), and
render the versions already stored."""

from django.db import migrations, models

from artifacts.rendering import render_artifact

BATCH = 200


def render_stored_versions(apps, schema_editor):
    ArtifactVersion = apps.get_model("artifacts", "ArtifactVersion")
    versions = ArtifactVersion.objects.select_related("artifact").order_by("pk")
    batch = []
    for version in versions.iterator(chunk_size=BATCH):
        artifact = version.artifact
        version.rendered = render_artifact(artifact.kind, version.content, artifact.language or None)
        batch.append(version)
        if len(batch) == BATCH:
            ArtifactVersion.objects.bulk_update(batch, ["rendered"])
            batch = []
    ArtifactVersion.objects.bulk_update(batch, ["rendered"])


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0002_seed_card_templates")]

    operations = [
        migrations.AddField(
            model_name="artifactversion",
            name="rendered",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.RunPython(render_stored_versions, migrations.RunPython.noop),
    ]
