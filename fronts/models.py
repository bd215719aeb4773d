"""What the fronts keep of their own: which conversation an OpenAI-compatible API session is."""

from django.db import models

from agents.models import Agent
from agntchat.core.models import BaseModel
from conversations.models import Conversation, Message
from workspaces.models import ApiToken


class ApiSession(BaseModel):
    """One session of the OpenAI-compatible front: a person's API token talking to one agent,
    under a session key (the ``X-Agntchat-Session`` header, else the request's ``user``, else
    none). Its turns are posted in one conversation of kind ``api`` (docs/openai-front.md)."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200, blank=True)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="+")
    # The client's system text last put in the conversation (sha256): it is posted again only
    # when it changes.
    system_digest = models.CharField(max_length=64, blank=True)
    # The last request taken (sha256 of its messages) and the post it made: the client library
    # retrying that request (after a timeout, say) gets that post's reply, not a second post.
    last_request_digest = models.CharField(max_length=64, blank=True)
    last_post = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["token", "agent", "key"], name="one_api_session_per_token_agent_key"
            )
        ]
