"""Permission-checked fetches of artifacts: exactly the visibility of their conversation (ART-3)."""

from agntchat.core.ids import as_uuid
from artifacts.exceptions import ArtifactNotFound, CommentNotFound, VersionNotFound
from artifacts.models import Artifact, ArtifactComment, ArtifactVersion
from conversations.access import conversations_visible_to


def artifacts_visible_to(actor):
    """Artifacts of every conversation ACTOR (a person or an agent) may read."""
    return Artifact.objects.filter(conversation__in=conversations_visible_to(actor))


def access_artifact(actor, artifact_id) -> Artifact:
    try:
        return (
            artifacts_visible_to(actor)
            .select_related(
                "conversation__workspace", "created_by_user", "created_by_agent", "message"
            )
            .get(pk=as_uuid(artifact_id))
        )
    except Artifact.DoesNotExist:
        raise ArtifactNotFound() from None


def access_version(artifact: Artifact, number) -> ArtifactVersion:
    """Version NUMBER of an artifact the caller already accessed."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise VersionNotFound()
    try:
        return artifact.versions.select_related("author_user", "author_agent").get(number=number)
    except ArtifactVersion.DoesNotExist:
        raise VersionNotFound() from None


def access_comment(artifact: Artifact, comment_id) -> ArtifactComment:
    """A comment on an artifact the caller already accessed; another artifact's is not found."""
    try:
        return artifact.comments.get(pk=as_uuid(comment_id))
    except ArtifactComment.DoesNotExist:
        raise CommentNotFound() from None


def comments_of(artifact: Artifact):
    """ARTIFACT's comments, oldest first, with their authors and the number of the version each
    is on (not that version's text: up to 500 KB, twice, for every comment)."""
    return artifact.comments.select_related("version", "author_user", "author_agent").defer(
        "version__content", "version__rendered"
    )
