"""Server-computed directives (RUN-3…6): a cache-stable block, a fresh volatile block, the
rulebook, and the personality document with its guard and revisions."""

import pytest

from agents import actions
from agents.models import PersonalityRevision
from conversations.actions import post_message
from tests.conftest import directives_for

pytestmark = pytest.mark.django_db


def test_the_stable_block_is_byte_identical_across_turns_until_the_personality_changes(
    alice, channel, nova
):
    first = directives_for(nova, post_message(alice, channel, "first question"))
    second = directives_for(nova, post_message(alice, channel, "second question"))
    assert first["stable"] == second["stable"] and first["stable_hash"] == second["stable_hash"]
    assert first["volatile"] != second["volatile"]
    assert "second question" in second["volatile"] and "second question" not in second["stable"]
    assert [h["text"] for h in second["history"]] == ["first question"]
    actions.set_personality(nova, "Curious, precise, a little dry.", author=alice)
    nova.refresh_from_db()
    third = directives_for(nova, post_message(alice, channel, "third"))
    assert third["stable_hash"] != second["stable_hash"]
    assert "Curious, precise" in third["stable"]


def test_the_rulebook_goes_in_the_volatile_block(alice, bob, channel, nova, api):
    response = api(alice).patch(
        f"/api/v1/conversations/{channel.id}/settings/",
        {"rulebook": {"replyStyle": "bullet points", "replyLength": "under 80 words"}},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["settings"]["rulebook"] == {
        "replyStyle": "bullet points",
        "replyLength": "under 80 words",
    }
    channel.refresh_from_db()
    out = directives_for(nova, post_message(bob, channel, "go"))
    assert "Reply style: bullet points" in out["volatile"] and "bullet points" not in out["stable"]
    # A plain member who did not create the conversation may not change it.
    denied = api(bob).patch(
        f"/api/v1/conversations/{channel.id}/settings/",
        {"rulebook": {"replyStyle": "shout"}},
        format="json",
    )
    assert denied.status_code == 403
    channel.refresh_from_db()
    assert channel.settings["rulebook"]["reply_style"] == "bullet points"
    bad = api(alice).patch(
        f"/api/v1/conversations/{channel.id}/settings/", {"rulebook": {"tone": "x"}}, format="json"
    )
    assert bad.status_code == 400


def test_a_large_shrink_is_refused_unless_the_owner_forces_it(alice, nova, api):
    long_text = "I care about clear sources and honest uncertainty. " * 10
    assert (
        api(alice)
        .put(f"/api/v1/agents/{nova.id}/personality/", {"text": long_text}, format="json")
        .status_code
        == 200
    )
    # The agent itself cuts it to a few words: refused.
    with pytest.raises(actions.PersonalityShrink):
        actions.set_personality(nova, "Be brief.", author=nova)
    refused = api(alice).put(
        f"/api/v1/agents/{nova.id}/personality/", {"text": "Be brief."}, format="json"
    )
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "personality_shrink"
    nova.refresh_from_db()
    assert nova.personality == long_text
    forced = api(alice).put(
        f"/api/v1/agents/{nova.id}/personality/",
        {"text": "Be brief.", "force": True},
        format="json",
    )
    assert forced.status_code == 200
    revisions = api(alice).get(f"/api/v1/agents/{nova.id}/personality/revisions/").json()["results"]
    assert [r["text"] for r in revisions] == ["Be brief.", long_text]
    assert revisions[0]["forced"] is True
    # A small edit of a meaningful document is fine.
    actions.set_personality(nova, long_text, author=alice)
    actions.set_personality(nova, long_text[:-20], author=nova)
    assert PersonalityRevision.objects.filter(agent=nova).count() == 4


def test_only_the_owner_reads_or_writes_the_personality_over_rest(
    alice, bob, charlie, team_a, team_b, nova, api
):
    assert (
        api(bob)
        .put(f"/api/v1/agents/{nova.id}/personality/", {"text": "x"}, format="json")
        .status_code
        == 403
    )
    assert api(charlie).get(f"/api/v1/agents/{nova.id}/personality/").status_code == 404
    assert api(charlie).get(f"/api/v1/agents/{nova.id}/usage/").status_code == 404
    assert PersonalityRevision.objects.count() == 0


def test_an_api_agent_gets_its_workspaces_encrypted_key_with_the_work(alice, team_a, channel, nova):
    from agntchat_bridge.runtime import Bridge, Config

    from workspaces.actions import create_credential

    message = post_message(alice, channel, "hi")
    assert directives_for(nova, message)["api_key"] is None  # scripted: no key
    actions.update_agent(nova, backend="anthropic_api")
    assert directives_for(nova, message)["api_key"] is None  # no credential yet
    owner = team_a.memberships.get(user=alice)
    credential = create_credential(owner, "anthropic_api_key", "sk-ant-team-a")
    assert directives_for(nova, message)["api_key"] is None  # not granted to Nova yet
    actions.grant_credential(owner, credential, nova)
    out = directives_for(nova, message)
    assert out["api_key"] == "sk-ant-team-a"
    # The bridge passes it to the backend's turn.
    bridge = Bridge(Config(url="http://x", key="agk_x"))
    bridge.agent = {"id": str(nova.id), "model": "", "baseUrl": ""}

    class Sessions:
        def get(self, key):
            return {}

    bridge.sessions = Sessions()
    from agntchat.core.events import wire

    assert bridge.turn_for(wire(out)).api_key == "sk-ant-team-a"
