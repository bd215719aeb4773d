"""Artifacts with their versions and comments (ART-1…3), and the card template library (CARD-2)."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from agents.models import Agent
from agntchat.core.models import BaseModel
from conversations.models import Conversation, Message
from workspaces.models import User


class CardTemplate(BaseModel):
    """A declarative card layout staff manage in the admin. Messages seal a copy when saved, so
    editing or deleting a template never changes a card already sent (CARD-2)."""

    name = models.SlugField(max_length=40, unique=True)
    result_type = models.SlugField(max_length=40)
    description = models.CharField(max_length=500, blank=True)
    # Every saved change is a new version; sealed cards record the version they were sent with.
    version = models.PositiveIntegerField(default=1)
    layout = models.JSONField(default=dict)
    default_actions = models.JSONField(default=list, blank=True)
    sample = models.JSONField(null=True, blank=True)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def as_template(self) -> dict:
        """The template as `artifacts.cards` expects it."""
        return {
            "name": self.name,
            "result_type": self.result_type,
            "version": self.version,
            "description": self.description,
            "layout": self.layout,
            "default_actions": self.default_actions or [],
            "sample": self.sample,
        }


class Artifact(BaseModel):
    """A versioned document, page, program or data set attached to a conversation (ART-1). It
    has no permissions of its own: whoever reads the conversation reads it (ART-3)."""

    class Kind(models.TextChoices):
        MARKDOWN = "markdown"
        HTML = "html"
        CODE = "code"
        JSON = "json"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="artifacts"
    )
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    language = models.CharField(max_length=40, blank=True)
    created_by_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    current_version = models.PositiveIntegerField(default=1)
    # The compact message that announced it in the conversation.
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The title's full-text vector, stored as a message's is (conversations' Message).
    search_vector = SearchVectorField(null=True, editable=False)

    class Meta:
        # Full-text search by title (work/search.py).
        indexes = [GinIndex(fields=["search_vector"], name="artifact_search_vector")]

    def __str__(self) -> str:
        return self.title


class ArtifactVersion(BaseModel):
    """One immutable state of an artifact: nothing is ever overwritten (ART-2)."""

    artifact = models.ForeignKey(Artifact, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    content = models.TextField()
    # The content rendered to safe HTML once, when stored: sanitising is far too slow to repeat
    # on every read (artifacts.rendering.render_artifact).
    rendered = models.TextField()
    author_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.CharField(max_length=500, blank=True)
    # The content's full-text vector, stored as a message's is (conversations' Message).
    search_vector = SearchVectorField(null=True, editable=False)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["artifact", "number"], name="one_artifact_version")
        ]
        # Full-text search of the content (work/search.py).
        indexes = [GinIndex(fields=["search_vector"], name="artifact_version_search_vector")]


class ArtifactComment(BaseModel):
    """A comment on an artifact, optionally on one version and in reply to another comment."""

    artifact = models.ForeignKey(Artifact, on_delete=models.CASCADE, related_name="comments")
    version = models.ForeignKey(
        ArtifactVersion, null=True, blank=True, on_delete=models.CASCADE, related_name="comments"
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="replies"
    )
    author_user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    body = models.TextField()

    class Meta:
        ordering = ["created_at", "id"]
