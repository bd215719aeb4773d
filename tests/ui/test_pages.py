"""The pages of the browser app, without a browser: who sees what, and that a page never changes
anything it should not. Alice owns team A with Bob; Charlie is an outsider with team B."""

import pytest

from agents import actions as agent_actions
from agntchat.ui.shell import UNREAD_CAP
from artifacts import rendering
from artifacts.actions import publish_artifact
from conversations.actions import post_message
from conversations.models import Conversation, Participant
from conversations.tasks import create_task
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(alice, bob, charlie, team_a, team_b, nova, channel):
    message = post_message(alice, channel, "Hello **team**")
    task = create_task(alice, team_a, nova, "Summarise the week.")
    artifact = publish_artifact(nova, channel, "Plan", "markdown", "# Plan")
    return {"message": message, "task": task, "artifact": artifact}


def pages(team, channel, nova, story) -> list[str]:
    w = f"/w/{team.id}"
    return [
        f"{w}/",
        f"{w}/members/",
        f"{w}/agents/",
        f"{w}/agents/new/",
        f"{w}/agents/{nova.id}/",
        f"{w}/tasks/",
        f"{w}/tasks/{story['task'].id}/",
        f"{w}/c/{channel.id}/",
        f"{w}/c/{channel.id}/settings/",
        f"{w}/channels/new/",
        f"{w}/direct/",
        f"{w}/artifacts/{story['artifact'].id}/",
        f"/app/w/{team.id}/sidebar/",
        f"/app/messages/?ids={story['message'].id}",
    ]


def snapshot():
    return (
        Conversation.objects.count(),
        Participant.objects.count(),
        sorted(Participant.objects.values_list("last_read_at", flat=True), key=str),
    )


def test_members_can_open_every_page(client, alice, bob, team_a, channel, nova, story):
    for person in (alice, bob):
        client.force_login(person)
        for url in pages(team_a, channel, nova, story):
            response = client.get(url, follow=True)
            assert response.status_code == 200, (person.username, url)


def test_an_outsider_gets_not_found_everywhere_and_changes_nothing(
    client, charlie, team_a, team_b, channel, nova, story
):
    client.force_login(charlie)
    before = snapshot()
    for url in pages(team_a, channel, nova, story):
        assert client.get(url).status_code == 404, url
    w = f"/w/{team_a.id}"
    assert client.post(f"{w}/c/{channel.id}/agents/", {"agent": nova.id}).status_code == 404
    assert client.post(f"{w}/direct/", {"agent": nova.id}).status_code == 404
    assert client.post(f"{w}/channels/new/", {"title": "x"}).status_code == 404
    assert client.post(f"/app/conversations/{channel.id}/read/").status_code == 404
    # Team A's conversation through Charlie's own workspace is not found either.
    assert client.get(f"/w/{team_b.id}/c/{channel.id}/").status_code == 404
    assert client.get(f"/w/{team_b.id}/artifacts/{story['artifact'].id}/").status_code == 404
    assert client.get(f"/w/{team_b.id}/tasks/{story['task'].id}/").status_code == 404
    assert snapshot() == before


def test_logged_out_visitors_are_sent_to_log_in(client, team_a, channel, nova, story):
    for url in pages(team_a, channel, nova, story):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_message_fragments_are_rendered_safely(client, alice, channel):
    hostile = post_message(
        alice,
        channel,
        "<script>alert(1)</script> **bold** [x](javascript:alert(1)) <img src=x onerror=alert(1)>",
    )
    client.force_login(alice)
    html = client.get(f"/app/messages/?ids={hostile.id}").content.decode()
    assert "<strong>bold</strong>" in html
    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html
    assert "&lt;script&gt;" in html  # raw HTML is shown as text, never run


def test_a_long_body_is_formatted_once_however_often_it_is_viewed(client, alice, channel):
    # A hostile 20,000-character body costs a second or more to format (a run of "!["):
    # formatted at every view, a few such messages would make every page view cost minutes.
    hostile = post_message(alice, channel, "![" * 10_000)
    client.force_login(alice)
    before = rendering._rendered_kept.cache_info().misses
    pages = [client.get(f"/app/messages/?ids={hostile.id}").content for _ in range(3)]
    assert rendering._rendered_kept.cache_info().misses == before + 1
    assert pages[0] == pages[2] and b"![![" in pages[0]


def test_fragments_keep_the_order_asked_and_skip_what_cannot_be_seen(
    client, alice, charlie, team_b, channel
):
    first = post_message(alice, channel, "first")
    second = post_message(alice, channel, "second")
    from conversations.actions import create_conversation

    elsewhere = create_conversation(charlie, team_b, kind="channel", title="b")
    hidden = post_message(charlie, elsewhere, "charlie's secret")
    client.force_login(alice)
    html = client.get(f"/app/messages/?ids={second.id},{hidden.id},{first.id}").content.decode()
    assert html.index("second") < html.index("first")
    assert "charlie's secret" not in html


def test_a_direct_conversation_with_an_agent_is_opened_once(client, alice, team_a, nova):
    client.force_login(alice)
    first = client.post(f"/w/{team_a.id}/direct/", {"agent": nova.id})
    second = client.post(f"/w/{team_a.id}/direct/", {"agent": nova.id})
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"]
    direct = Conversation.objects.get(kind="direct")
    assert {(p.user_id, p.agent_id) for p in direct.participants.all()} == {
        (alice.id, None),
        (None, nova.id),
    }


def test_adding_an_agent_makes_it_take_part(client, alice, charlie, team_a, channel):
    rex = agent_actions.create_agent(alice, name="Rex", handle="rex", backend="scripted")
    strangers_agent = agent_actions.create_agent(charlie, name="Spy", backend="scripted")
    client.force_login(alice)
    url = f"/w/{team_a.id}/c/{channel.id}/agents/"
    assert client.post(url, {"agent": rex.id}).status_code == 302
    assert channel.participants.filter(agent=rex).exists()
    before = snapshot()
    assert client.post(url, {"agent": strangers_agent.id}).status_code == 404
    assert snapshot() == before


def test_a_new_channel_takes_the_chosen_agents(client, alice, team_a, nova):
    client.force_login(alice)
    response = client.post(
        f"/w/{team_a.id}/channels/new/", {"title": "#research", "agents": [nova.id]}
    )
    created = Conversation.objects.get(title="research")
    assert response["Location"] == f"/w/{team_a.id}/c/{created.id}/"
    assert created.kind == "channel" and created.participants.filter(agent=nova).exists()
    blank = client.post(f"/w/{team_a.id}/channels/new/", {"title": "  "})
    assert "Give the channel a name" in blank.content.decode()


def test_reading_a_conversation_clears_its_unread_count(client, alice, bob, team_a, channel):
    post_message(alice, channel, "one")
    post_message(alice, channel, "two")
    client.force_login(bob)
    sidebar = client.get(f"/app/w/{team_a.id}/sidebar/").content.decode()
    assert "<span data-unread-count>2</span>" in sidebar
    # The browser counts on from live events up to the same cap as the server (static/app.js).
    assert f'data-unread="{UNREAD_CAP}"' in sidebar
    assert client.post(f"/app/conversations/{channel.id}/read/").status_code == 204
    sidebar = client.get(f"/app/w/{team_a.id}/sidebar/").content.decode()
    assert "<span data-unread-count>2</span>" not in sidebar


def test_owner_only_controls_are_shown_only_to_the_owner(client, alice, bob, team_a):
    client.force_login(alice)
    owner_page = client.get(f"/w/{team_a.id}/members/").content.decode()
    assert "Delete workspace" in owner_page and "Create invite link" in owner_page
    assert 'value="admin"' in owner_page  # the owner may invite admins and change roles
    client.force_login(bob)
    member_page = client.get(f"/w/{team_a.id}/members/").content.decode()
    assert "Delete workspace" not in member_page and "Create invite link" not in member_page
    assert "Leave workspace" in member_page


def test_an_agent_page_shows_keys_and_personality_to_its_owner_only(
    client, alice, bob, team_a, nova
):
    client.force_login(alice)
    mine = client.get(f"/w/{team_a.id}/agents/{nova.id}/").content.decode()
    assert "Create key" in mine and "Save personality" in mine
    # A new agent: the empty parts say what goes there.
    assert "No keys yet" in mine and 'placeholder="How Nova speaks' in mine
    client.force_login(bob)
    theirs = client.get(f"/w/{team_a.id}/agents/{nova.id}/").content.decode()
    assert "Create key" not in theirs and "Save personality" not in theirs


def test_signup_goes_on_to_the_invitation_but_never_off_site(client):
    fields = {"password1": "pw-dora-881234", "password2": "pw-dora-881234", "email": ""}
    response = client.post("/signup/?next=/invite/inv_abc/", {"username": "dora", **fields})
    assert response["Location"] == "/invite/inv_abc/"
    client.logout()
    response = client.post(
        "/signup/", {"username": "eve", "next": "https://evil.example/", **fields}
    )
    assert response["Location"] == "/"


def test_home_opens_the_last_workspace_used(client, alice, team_a):
    client.force_login(alice)
    personal = Workspace.objects.get(owner=alice, kind="personal")
    assert client.get("/")["Location"] == f"/w/{personal.id}/"
    client.get(f"/w/{team_a.id}/members/")
    assert client.get("/")["Location"] == f"/w/{team_a.id}/"


def test_a_first_visit_opens_the_most_recently_active_conversation(
    client, alice, bob, charlie, team_a, team_b, nova, channel
):
    from conversations.actions import create_conversation

    older = create_conversation(alice, team_a, kind="channel", title="older")
    post_message(alice, older, "yesterday's news")
    post_message(bob, channel, "fresh news")
    create_conversation(alice, team_a, kind="channel", title="empty")  # newest, never used
    alone = create_conversation(alice, team_a, kind="direct", agent_ids=[nova.id])
    post_message(alice, alone, "a word with Nova")
    for person, expected in ((bob, channel), (alice, alone)):
        # Bob cannot see Alice's DM: his newest is #general. Neither lands in an empty
        # personal workspace.
        client.force_login(person)
        assert client.get("/")["Location"] == f"/w/{team_a.id}/c/{expected.id}/", person
    # With no conversation anywhere: the personal workspace.
    client.force_login(charlie)
    personal = Workspace.objects.get(owner=charlie, kind="personal")
    assert client.get("/")["Location"] == f"/w/{personal.id}/"


def test_a_workspace_opens_its_most_recently_active_channel(client, alice, team_a, channel):
    from conversations.actions import create_conversation

    post_message(alice, channel, "hello")
    create_conversation(alice, team_a, kind="channel", title="general-2")  # newer, but empty
    client.force_login(alice)
    assert client.get(f"/w/{team_a.id}/")["Location"] == f"/w/{team_a.id}/c/{channel.id}/"


def test_the_demo_login_lands_in_the_demo_teams_general(client, tmp_path, settings):
    from io import StringIO

    from django.core.management import call_command

    from agntchat.ui.management.commands.seed_demo import demo_password

    settings.VAR_DIR = tmp_path  # the demo's password and key files
    call_command("seed_demo", stdout=StringIO())
    response = client.post(
        "/login/", {"username": "demo", "password": demo_password()}, follow=True
    )
    general = Conversation.objects.get(title="general", workspace__name="Demo team")
    assert response.redirect_chain[-1][0] == f"/w/{general.workspace_id}/c/{general.id}/"
    assert "Welcome to the agntchat demo" in response.content.decode()


def test_the_bridge_command_shown_runs_in_a_fresh_shell(client, alice, team_a, nova):
    import re
    import shlex
    import subprocess
    from pathlib import Path

    client.force_login(alice)
    page = client.get(f"/w/{team_a.id}/agents/{nova.id}/").content.decode()
    program = shlex.split(re.search(r'data-program="([^"]+)"', page).group(1))[0]
    assert Path(program).is_absolute() and Path(program).name == "agntchat-bridge"
    # Not on a fresh shell's PATH, and needing no activated virtualenv: it still runs.
    shown = subprocess.run(
        [program, "--help"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert shown.returncode == 0 and "--key" in shown.stdout, shown.stderr


def test_the_task_list_shows_each_tasks_latest_progress_in_one_read(client, alice, team_a, nova):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from conversations.tasks import mark_started, record_event

    def add_running_task(i):
        task = create_task(alice, team_a, nova, f"Task {i}")
        mark_started(task.id)
        record_event(task.id, {"message": f"old step of {i}"})
        record_event(task.id, {"message": f"latest step of {i}"})

    client.force_login(alice)
    url = f"/w/{team_a.id}/tasks/"
    add_running_task(0)
    client.get(url)  # the first visit also remembers the workspace in the session
    with CaptureQueriesContext(connection) as one:
        page = client.get(url).content.decode()
    assert "latest step of 0" in page and "old step of 0" not in page
    for i in range(1, 6):
        add_running_task(i)
    with CaptureQueriesContext(connection) as six:
        page = client.get(url).content.decode()
    assert all(f"latest step of {i}" in page for i in range(6))
    assert "old step" not in page
    assert len(six) == len(one)  # not a query per task


def test_no_page_reads_once_per_row_it_shows(client, alice, bob, team_a, channel, nova, story):
    """Every page takes as many queries with five times the rows as with one of each: no query
    per message, task, event, artifact, version, key, agent, conversation or member shown."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.actions import create_agent_key, set_personality
    from artifacts.actions import comment_on_artifact, update_artifact
    from conversations.actions import create_conversation
    from conversations.tasks import mark_started, record_event

    def queries_per_page() -> dict:
        counts = {}
        for url in pages(team_a, channel, nova, story):
            client.get(url)  # warm: sessions, compiled statements
            with CaptureQueriesContext(connection) as captured:
                assert client.get(url).status_code in (200, 302), url
            counts[url] = len(captured)
        return counts

    client.force_login(alice)
    before = queries_per_page()
    helpers = []
    for i in range(4):
        agent = agent_actions.create_agent(alice, name=f"Helper {i}", backend="scripted")
        helpers.append(agent)
        create_agent_key(nova, f"key {i}")
        set_personality(nova, f"Curious, take {i}.", author=alice)
        post_message(bob, channel, f"**more** {i}")
        post_message(nova, channel, f"an answer {i}")
        task = create_task(alice, team_a, agent, f"Task {i}")
        mark_started(task.id)
        record_event(task.id, {"message": f"step {i}"})
        record_event(story["task"].id, {"message": f"step {i}"})
        publish_artifact(nova, channel, f"Note {i}", "markdown", f"# Note {i}")
        update_artifact(nova, story["artifact"], f"# Plan v{i + 2}")
        comment_on_artifact(bob, story["artifact"], f"comment {i}")
        create_conversation(alice, team_a, kind="channel", title=f"room-{i}", agent_ids=[agent.id])
        create_conversation(alice, team_a, kind="direct", user_ids=[bob.id])
    after = queries_per_page()
    grew = {url: (before[url], after[url]) for url in before if after[url] != before[url]}
    assert not grew
    # The directory's loads, read for all agents at once, are still each agent's own.
    directory = client.get(f"/w/{team_a.id}/agents/").content.decode()
    for agent in helpers:
        row = directory.split(f'<tr data-agent-id="{agent.id}"')[1].split("</tr>")[0]
        assert '<span class="count">1</span> <span class="muted small">in flight' in row


def test_add_agent_is_offered_in_a_channel_and_not_in_a_direct_conversation(
    client, alice, team_a, channel, nova
):
    agent_actions.create_agent(alice, name="Rex", handle="rex", backend="scripted")
    client.force_login(alice)
    assert (
        'aria-label="Add agent"' in client.get(f"/w/{team_a.id}/c/{channel.id}/").content.decode()
    )
    direct = client.post(f"/w/{team_a.id}/direct/", {"agent": nova.id})["Location"]
    page = client.get(direct).content.decode()
    assert "Direct message" in page and "Add agent" not in page


def test_an_invite_link_says_who_invites_whom_where(client, alice, team_a):
    from django.contrib.auth import get_user_model

    from workspaces.actions import create_invitation

    alice.display_name = "Alice Martin"
    alice.save(update_fields=["display_name"])
    _, token = create_invitation(team_a.memberships.get(user=alice))
    url = f"/invite/{token}/"
    page = client.get(url)
    text = page.content.decode()
    assert page.status_code == 200
    assert "You've been invited to Team A by Alice Martin" in text
    assert f'href="/signup/?next=/invite/{token}/"' in text
    assert f'href="/login/?next=/invite/{token}/"' in text
    # Signed in (here: Dora, signing up from the link), the same words and an Accept button.
    dora = get_user_model().objects.create_user("dora", "", "pw-dora-881234")
    client.force_login(dora)
    text = client.get(url).content.decode()
    assert "been invited to Team A by Alice Martin" in text and "Accept invitation" in text
    assert client.post(url)["Location"] == f"/w/{team_a.id}/"
    assert team_a.memberships.filter(user=dora).exists()
    client.logout()
    used = client.get(url)
    assert "already been used" in used.content.decode() and "Team A" not in used.content.decode()
    assert client.get("/invite/inv_nonsense/").status_code == 404


def test_the_artifact_page_reads_the_text_of_the_versions_it_shows_only(
    client, alice, team_a, story
):
    """Each version holds up to 500 KB twice: the history lists who and when, and only the
    version shown is read whole."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from artifacts.actions import update_artifact

    for n in range(3):
        update_artifact(alice, story["artifact"], f"# Plan v{n + 2}")
    client.force_login(alice)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/w/{team_a.id}/artifacts/{story['artifact'].id}/?v=2")
    assert page.status_code == 200 and b"# Plan v2" in page.content
    whole = [
        q["sql"]
        for q in queries.captured_queries
        if "artifactversion" in q["sql"] and '."content"' in q["sql"]
    ]
    assert len(whole) == 1, whole
