"""How many agent posts in a row a conversation allows before the loop guard holds the next
(TURN-2): stricter one-to-one than in a group, configurable per conversation."""

from django.db.models import Count, Q

from agntchat.core.compiled import compiled_rows
from conversations.models import Conversation, Participant

GROUP_CAP = 6
DIRECT_CAP = 4


def cap_for(conversation: Conversation) -> int:
    """Stricter one-to-one (one person, one agent) than in a group; configurable per conversation."""
    guard = conversation.settings.get("loop_guard", {})
    counts = compiled_rows(  # every agent post asks: compiled once
        ("loop_guard_head_count",),
        lambda conversation_id: (
            Participant.objects.filter(conversation_id=conversation_id)
            .values("conversation_id")
            .annotate(
                people=Count("pk", filter=Q(user__isnull=False)),
                agents=Count("pk", filter=Q(agent__isnull=False)),
            )
            .values_list("people", "agents")
        ),
        conversation_id=conversation.pk,
    )
    people, agents = counts[0] if counts else (0, 0)
    if people <= 1 and agents == 1:
        return int(guard.get("direct_cap", DIRECT_CAP))
    return int(guard.get("group_cap", GROUP_CAP))


def is_capped(conversation: Conversation) -> bool:
    # Every cap is at least 1: with no agent streak there is nothing to count.
    return conversation.agent_streak > 0 and conversation.agent_streak >= cap_for(conversation)
