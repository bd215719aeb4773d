"""The product in a real browser: Alice starts a team, creates an agent and runs its bridge, and
works with it live beside Bob; Charlie, an outsider, sees nothing. Screens are saved under
docs/screenshots/ (laptop and phone widths) as the story goes.

Database work goes through ``orm`` (one worker thread): see tests/ui/browser.py."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect, sync_playwright

from agents import actions as agent_actions
from agents.models import Agent
from agntchat.core import claims
from agntchat.ui.agent_pages import bridge_program
from artifacts import actions as artifact_actions
from artifacts.models import Artifact
from conversations import tasks
from conversations.actions import create_conversation, post_message
from conversations.models import Conversation, Message, Participant, Task
from tests.socket_helpers import Daphne
from tests.ui.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LAPTOP,
    MARKS,
    PASSWORD,
    PHONE,
    WAIT,
    hotel_card,
    live,
    log_in,
    person,
    run_bridge_command,
    shot,
    wait_for_js,
)
from workspaces.actions import accept_invitation, create_invitation, create_team_workspace
from workspaces.models import Workspace

pytestmark = MARKS


@pytest.fixture
def cast(orm):
    """Alice and Bob will share a team; Charlie is an outsider with his own."""

    def build():
        alice, bob, charlie = (
            person("alice", "Alice Martin"),
            person("bob", "Bob Okafor"),
            person("charlie", "Charlie Brandt"),
        )
        create_team_workspace(charlie, "Charlie's shop")
        return alice, bob, charlie

    return orm(build)


@pytest.fixture
def server(cast):
    daphne = Daphne()
    yield daphne
    daphne.stop()


@pytest.fixture
def browser(server):
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def test_a_team_works_with_its_agent_live(orm, cast, server, browser, tmp_path):
    alice_user, bob_user, _ = cast

    # Alice logs in and starts a team workspace.
    page = browser.new_context(viewport=LAPTOP, base_url=server.url).new_page()
    page.goto("/login/")
    shot(page, "laptop-01-log-in")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your personal workspace")).to_be_visible()
    page.locator("summary.switcher__current").click()
    page.get_by_role("link", name="New team workspace").click()
    page.get_by_label("Workspace name").fill("Tide Lab")
    page.get_by_role("button", name="Create workspace").click()
    expect(page.get_by_role("heading", name="Tide Lab has no channels yet")).to_be_visible()
    team = orm(Workspace.objects.select_related("owner").get, name="Tide Lab")
    assert team.owner == alice_user and team.kind == "team"
    shot(page, "laptop-02-new-workspace")

    # She creates a scripted agent, makes a key and runs the bridge command the page shows.
    page.get_by_role("link", name="Create an agent").click()
    page.get_by_label("Name", exact=True).fill("Nova")
    page.get_by_label("Handle").fill("nova")
    page.get_by_label("Role").fill("researcher")
    page.get_by_label("Capabilities").fill("research, oceans")
    page.get_by_label("Backend").select_option("scripted")
    page.get_by_role("button", name="Create agent").click()
    expect(page.get_by_text("Nova is created.")).to_be_visible()
    nova = orm(Agent.objects.get, owner=alice_user, handle="nova")
    assert (nova.backend, nova.capabilities) == ("scripted", ["research", "oceans"])
    page.get_by_label("Key name").fill("laptop")
    page.get_by_role("button", name="Create key").click()
    command = page.locator("#bridge-command")
    expect(command).to_contain_text("AGNTCHAT_AGENT_KEY=agk_")
    shown = command.inner_text()
    assert shown.startswith("AGNTCHAT_AGENT_KEY=agk_"), shown
    assert shown.endswith(f" {bridge_program()} --url {server.url}"), shown
    expect(page.locator('[data-region="key-table"]')).to_contain_text("laptop")
    bridge = run_bridge_command(command.inner_text(), tmp_path, '{"delay_ms": 1500}')
    try:
        # The page notices the bridge come online by itself (a new Python process, its key
        # exchanged: slow on a loaded machine).
        expect(page.locator(".stat", has_text="Status")).to_contain_text("Online", timeout=4 * WAIT)
        _agent_page(orm, server, browser, page, team, nova, cast)
    finally:
        bridge.terminate()
        output = bridge.communicate(timeout=10)[0]
    assert "Traceback" not in output, output


def _agent_page(orm, server, browser, page, team, nova, cast):
    shot(page, "laptop-03-agent-key")
    # Her personality edits are kept; a sudden large cut is refused in words unless she forces it.
    personality = page.get_by_label("Personality of Nova")
    personality.fill("Nova is patient and precise. " * 10)
    page.get_by_role("button", name="Save personality").click()
    expect(page.locator(".revisions li")).to_have_count(1)
    personality.fill("Terse.")
    page.get_by_role("button", name="Save personality").click()
    expect(page.get_by_text("that looks like a mistake. The owner can force it.")).to_be_visible()
    page.get_by_label("I own Nova: save it anyway").check()
    page.get_by_role("button", name="Save personality").click()
    expect(page.locator(".revisions li").first).to_contain_text("forced")
    _conversation(orm, server, browser, page, team, nova, cast)


def _conversation(orm, server, browser, page, team, nova, cast):
    alice_user, bob_user, _ = cast
    # #general with Nova taking part.
    page.get_by_role("link", name="New channel").click()
    page.get_by_label("Name", exact=True).fill("general")
    page.get_by_label("Nova").check()
    page.get_by_role("button", name="Create channel").click()
    expect(page.get_by_text("This is the very beginning of #general.")).to_be_visible()
    general = orm(Conversation.objects.get, workspace=team, title="general")

    # Alice invites Bob with a link; Bob accepts it and lands in #general.
    page.get_by_role("link", name="Members & invites").click()
    page.get_by_role("button", name="Create invite link").click()
    invite = page.locator("#invite-url")
    expect(invite).to_contain_text("/invite/inv_")
    bob = log_in(browser, server, "bob")
    bob.goto(invite.inner_text())
    bob.get_by_role("button", name="Accept invitation").click()
    expect(bob.get_by_role("heading", name="general")).to_be_visible()
    live(bob)

    # Charlie, an outsider, cannot open #general, and his live socket must stay silent.
    charlie = log_in(browser, server, "charlie")
    heard = []
    charlie.on("websocket", lambda ws: ws.on("framereceived", lambda frame: heard.append(frame)))
    assert charlie.goto(f"/w/{team.id}/c/{general.id}/").status == 404
    charlie.goto("/")
    live(charlie)

    # Alice asks Nova, with @mention autocomplete; the reply arrives live for Alice and Bob.
    page.get_by_role("link", name="general").first.click()
    live(page)
    composer = page.get_by_label("Message #general")
    composer.press_sequentially("@no")
    mentionable = page.get_by_role("listbox", name="People and agents to mention")
    expect(mentionable.get_by_role("option", name=re.compile("Nova"))).to_be_visible()
    composer.press("Enter")
    expect(composer).to_have_value("@nova ")
    composer.press_sequentially("when is high tide?")
    composer.press("Enter")
    expect(composer).to_have_value("")
    expect(page.locator("[data-working]")).to_contain_text("Nova is working…", timeout=WAIT)
    reply = "Echo: @nova when is high tide?"
    expect(page.locator(".msg--agent", has_text=reply)).to_be_visible(timeout=WAIT)
    expect(bob.locator(".msg--person", has_text="when is high tide?")).to_be_visible()
    expect(bob.locator(".msg--agent", has_text=reply)).to_be_visible(timeout=WAIT)
    expect(page.locator("[data-working]")).to_be_empty(timeout=WAIT)

    # Bob answers; Alice sees it live. A failed send shows Retry and is not lost.
    bob_composer = bob.get_by_label("Message #general")
    bob_composer.fill("Morning! I'll check the buoys.")
    bob_composer.press("Enter")
    expect(page.locator(".msg", has_text="I'll check the buoys.")).to_be_visible(timeout=WAIT)
    messages_api = "**/api/v1/conversations/*/messages/"
    page.route(messages_api, lambda route: route.abort())
    composer.fill("Thanks Bob")
    composer.press("Enter")
    failed = page.locator(".msg.is-failed", has_text="Thanks Bob")
    expect(failed).to_contain_text("Not sent")
    page.unroute(messages_api)
    failed.get_by_role("button", name="Retry").click()
    expect(page.locator(".msg[data-message-id]", has_text="Thanks Bob")).to_have_count(1)
    expect(bob.locator(".msg", has_text="Thanks Bob")).to_have_count(1, timeout=WAIT)
    shot(page, "laptop-04-conversation")

    # Nova pulls another agent into a side thread: a card appears under its message, live.
    rex = orm(agent_actions.create_agent, bob_user, name="Rex", handle="rex", backend="scripted")
    origin = orm(
        post_message,
        nova,
        general,
        'Checking the tables.\n<dm target="Rex">Can you verify the tides?</dm>',
    )
    thread = orm(Conversation.objects.get, kind="thread", parent_message=origin)
    card = page.locator(f'[data-thread-id="{thread.id}"]')
    expect(card).to_contain_text("In progress", timeout=WAIT)
    expect(card).to_contain_text("Nova ↔ Rex")
    bob_card = bob.locator(f'[data-thread-id="{thread.id}"]')
    expect(bob_card).to_contain_text("In progress", timeout=WAIT)
    # Bob is not in it: its messages reach his page (for the card), but his sidebar lists only
    # threads he is in, so they must not make it refetch the sidebar each time.
    sidebar_fetches = []
    bob.on("request", lambda r: "/sidebar/" in r.url and sidebar_fetches.append(r.url))
    for i in range(3):
        orm(post_message, rex, thread, f"Tide table {i}")
    after = orm(post_message, alice_user, general, "Thanks both")  # same live topic, later
    expect(bob.locator(f'[data-message-id="{after.id}"]')).to_be_visible(timeout=WAIT)
    bob.wait_for_timeout(600)  # a sidebar refetch waits 250 ms for more of the same
    assert sidebar_fetches == []
    # Alice takes part in it: she opens it inline and resolves it; Bob's card follows live.
    orm(Participant.objects.create, conversation=thread, user=alice_user)
    page.reload()
    card.get_by_role("button", name=re.compile("Nova ↔ Rex")).click()
    expect(card.locator(".msg", has_text="Can you verify the tides?")).to_be_visible()
    card.get_by_label("Resolve with a summary").fill("High tide at 06:12, confirmed by Rex.")
    shot(page, "laptop-05-side-thread")
    card.get_by_role("button", name="Resolve thread").click()
    expect(card).to_contain_text("Resolved", timeout=WAIT)
    expect(bob_card).to_contain_text("Resolved", timeout=WAIT)
    expect(bob_card).to_contain_text("High tide at 06:12, confirmed by Rex.")
    assert orm(lambda: Conversation.objects.get(pk=thread.pk).thread_status) == "resolved"

    # A result card renders; its button sends the click to Nova, whose follow-up arrives live.
    cards = orm(artifact_actions.post_card, nova, general, hotel_card())
    result = page.locator(f'[data-message-id="{cards.id}"]')
    expect(result.locator(".cards")).to_contain_text("Memmo Alfama", timeout=WAIT)
    expect(bob.locator(f'[data-message-id="{cards.id}"] .cards')).to_contain_text("Memmo Alfama")
    result.get_by_role("button", name="Book").first.click()
    expect(result.get_by_role("button", name="Book ✓")).to_be_disabled(timeout=WAIT)
    follow_up = "Echo: Alice Martin chose “Book” on “Memmo Alfama”"
    expect(page.locator(".msg--agent", has_text=follow_up)).to_be_visible(timeout=WAIT)
    expect(bob.locator(".msg--agent", has_text=follow_up)).to_be_visible(timeout=WAIT)
    bob_result = bob.locator(f'[data-message-id="{cards.id}"]')
    expect(bob_result.get_by_role("button", name="Book ✓")).to_be_disabled(timeout=WAIT)
    shot(page, "laptop-06-result-card")

    # An artifact arrives as a chip; its page shows it, then a second version and the diff.
    artifact = orm(
        artifact_actions.publish_artifact,
        nova,
        general,
        "Tide report",
        "markdown",
        "# Tide report\n\n- High tide 06:12\n",
    )
    chip = page.locator(f'[data-artifact-id="{artifact.id}"]')
    expect(chip).to_contain_text("Tide report", timeout=WAIT)
    chip.click()
    expect(page.locator("[data-artifact-body] h1")).to_have_text("Tide report")
    live(page)
    orm(
        lambda: artifact_actions.update_artifact(
            nova,
            Artifact.objects.select_related("conversation").get(pk=artifact.pk),
            "# Tide report\n\n- High tide 06:12\n- Low tide 12:30\n",
            "Add the low tide",
        )
    )
    expect(page.locator("[data-versions]")).to_contain_text("v2", timeout=WAIT)
    expect(page.locator("[data-versions]")).to_contain_text("Add the low tide")
    page.get_by_role("button", name="Show changes").click()
    expect(page.get_by_role("heading", name="Changes from v1 to v2")).to_be_visible()
    expect(page.locator(".diff-ins")).to_contain_text("Low tide 12:30")
    page.get_by_label("Add a comment").fill("Add the evening tide next.")
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator(".comment")).to_contain_text("Add the evening tide next.", timeout=WAIT)
    shot(page, "laptop-07-artifact-diff")

    # Charlie's socket was open all along and never carried any of it; the pages are 404.
    assert heard, "Charlie's live socket never connected"
    assert not [f for f in heard if "tide" in str(f).lower() or str(general.id) in str(f)]
    assert charlie.goto(f"/app/messages/?ids={origin.id},{cards.id}").status == 404
    assert charlie.goto(f"/w/{team.id}/artifacts/{artifact.id}/").status == 404

    # A long history pages back as one scrolls up, to its first message.
    def archive():
        room = create_conversation(alice_user, team, kind="channel", title="archive")
        for n in range(1, 76):
            post_message(alice_user, room, f"Reading number {n}")
        return room

    room = orm(archive)
    page.goto(f"/w/{team.id}/c/{room.id}/")
    expect(page.locator(".msg[data-message-id]")).to_have_count(50)
    expect(page.get_by_text("Reading number 75")).to_be_visible()
    page.locator("[data-scroller]").evaluate("el => el.scrollTop = 0")
    expect(page.get_by_text("Reading number 1", exact=True)).to_be_attached(timeout=WAIT)
    expect(page.locator(".msg[data-message-id]")).to_have_count(75)
    expect(page.get_by_text("This is the very beginning of #archive.")).to_be_visible()

    _tasks_and_phone(server, browser, page, team, general, nova, artifact)


def _tasks_and_phone(server, browser, page, team, general, nova, artifact):
    # A task for Nova: progress streams in and the result appears without a reload.
    page.goto(f"/w/{team.id}/tasks/")
    page.get_by_label("Agent", exact=True).select_option(label="Nova — researcher")
    page.get_by_label("Instructions").fill("Summarise this week's tide readings.")
    page.get_by_role("button", name="Start task").click()
    expect(page.get_by_role("heading", name="Task for Nova")).to_be_visible()
    expect(page.locator("[data-task-status]")).to_contain_text("Completed", timeout=WAIT)
    expect(page.locator(".result")).to_contain_text("Echo: Summarise this week's tide readings.")
    expect(page.locator("[data-events] li").first).to_contain_text("#")
    shot(page, "laptop-08-task")
    # Without a named agent the owner is scored; the page shows every part of the score.
    page.goto(f"/w/{team.id}/tasks/")
    page.locator("summary", has_text="New task").click()
    page.get_by_label("Instructions").fill("Research the ocean currents near the harbour.")
    page.get_by_role("button", name="Start task").click()
    expect(page.get_by_role("heading", name="How the owner was chosen")).to_be_visible()
    expect(page.locator(".is-winner")).to_contain_text("Nova")
    expect(page.locator("[data-task-status]")).to_contain_text("Completed", timeout=WAIT)
    shot(page, "laptop-09-task-scores")
    page.goto(f"/w/{team.id}/tasks/")
    shot(page, "laptop-10-tasks")
    page.goto(f"/w/{team.id}/agents/")
    expect(page.locator(f'tr[data-agent-id="{nova.id}"]')).to_contain_text("Online")
    shot(page, "laptop-11-agents")
    page.goto(f"/w/{team.id}/members/")
    shot(page, "laptop-12-members")
    page.goto(f"/w/{team.id}/c/{general.id}/settings/")
    shot(page, "laptop-13-settings")

    # The same product at phone width: the sidebar hides behind a button.
    phone = browser.new_context(
        viewport=PHONE, base_url=server.url, storage_state=page.context.storage_state()
    ).new_page()
    phone.goto(f"/w/{team.id}/c/{general.id}/")
    live(phone)
    expect(phone.locator("#sidebar")).not_to_be_visible()
    shot(phone, "phone-01-conversation")
    phone.get_by_role("button", name="Open navigation").click()
    expect(phone.locator("#sidebar").get_by_role("link", name="general")).to_be_visible()
    wait_for_js(phone, "getComputedStyle(document.querySelector('#sidebar')).transform == 'none'")
    shot(phone, "phone-02-navigation")
    phone.keyboard.press("Escape")
    expect(phone.locator("#sidebar")).not_to_be_visible()
    phone.get_by_label("Message #general").fill("Sent from my phone")
    phone.get_by_label("Message #general").press("Enter")
    expect(phone.locator(".msg[data-message-id]", has_text="Sent from my phone")).to_be_visible()
    phone.goto(f"/w/{team.id}/artifacts/{artifact.id}/?from=1&to=2")
    shot(phone, "phone-03-artifact")
    phone.goto(f"/w/{team.id}/agents/{nova.id}/")
    shot(phone, "phone-04-agent")
    phone.context.clear_cookies()
    phone.goto("/login/")
    shot(phone, "phone-05-log-in")
    phone.get_by_role("link", name="Create an account").click()
    shot(phone, "phone-06-sign-up")


def test_people_see_each_other_type_and_publish_artifacts(orm, cast, server, browser):
    alice_user, bob_user, _ = cast

    def team_with_a_channel():
        team = create_team_workspace(alice_user, "Tide Lab")
        _, token = create_invitation(team.memberships.get(user=alice_user))
        accept_invitation(bob_user, token)
        return team, create_conversation(alice_user, team, kind="channel", title="general")

    team, general = orm(team_with_a_channel)

    def loop_guard():
        return Conversation.objects.get(pk=general.pk).settings.get("loop_guard")

    url = f"/w/{team.id}/c/{general.id}/"
    alice, bob = log_in(browser, server, "alice"), log_in(browser, server, "bob")
    for page in (alice, bob):
        page.goto(url)
        live(page)

    # Bob types: Alice sees it under her composer (Bob's own page does not); his message ends it.
    bob_composer = bob.get_by_label("Message #general")
    bob_composer.press_sequentially("Buoys look fine")
    typing = alice.locator("[data-typing]")
    expect(typing).to_have_text("Bob Okafor is typing…", timeout=WAIT)
    expect(bob.locator("[data-typing]")).to_be_empty()
    shot(alice, "laptop-14-typing")
    bob_composer.press("Enter")
    expect(alice.locator(".msg", has_text="Buoys look fine")).to_be_visible(timeout=WAIT)
    # Ended by the message itself, before the page shows it: not by the 5 s expiry.
    assert typing.text_content() == ""

    # Alice publishes a piece of code through the dialog; the chip appears for both, live.
    alice.get_by_role("button", name="New artifact").click()
    dialog = alice.get_by_role("dialog", name="New artifact")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Language")).to_be_hidden()
    dialog.get_by_label("Title").fill("Tide script")
    dialog.get_by_label("Kind").select_option(label="Code")
    dialog.get_by_label("Language").fill("python")
    dialog.get_by_label("Content").fill("print('high tide 06:12')\n")
    shot(alice, "laptop-15-new-artifact")
    dialog.get_by_role("button", name="Publish artifact").click()
    expect(dialog).to_be_hidden(timeout=WAIT)
    chip = alice.locator(".artifact-chip", has_text="Tide script")
    expect(chip).to_contain_text("code")
    expect(bob.locator(".artifact-chip", has_text="Tide script")).to_be_visible(timeout=WAIT)
    published = orm(Artifact.objects.select_related("created_by_user").get, title="Tide script")
    assert (published.created_by_user, published.kind, published.language) == (
        alice_user,
        "code",
        "python",
    )
    assert orm(lambda: published.versions.get().content) == "print('high tide 06:12')\n"

    # The same dialog at phone width.
    phone = browser.new_context(
        viewport=PHONE, base_url=server.url, storage_state=alice.context.storage_state()
    ).new_page()
    phone.goto(url)
    phone.get_by_role("button", name="New artifact").click()
    expect(phone.get_by_role("dialog", name="New artifact")).to_be_visible()
    shot(phone, "phone-07-new-artifact")

    # A loop-guard cap set on the settings page can be emptied back to the default.
    alice.goto(f"{url}settings/")
    cap = alice.get_by_label("Group conversations")
    saved = alice.get_by_text("Saved.")
    cap.fill("8")
    alice.get_by_role("button", name="Save settings").click()
    expect(saved).to_be_visible()
    assert orm(loop_guard) == {"group_cap": 8}
    expect(saved).to_be_hidden(timeout=WAIT)
    cap.fill("")
    alice.get_by_role("button", name="Save settings").click()
    expect(saved).to_be_visible()
    assert orm(loop_guard) == {}


# Counts the composer's message posts in flight (each slowed a little, as on a slow network).
COUNT_POSTS = """
window.__posts = { inFlight: 0, most: 0 };
const realFetch = window.fetch;
window.fetch = async (url, options = {}) => {
  if (options.method !== "POST" || !/\\/conversations\\/[^/]+\\/messages\\/$/.test(String(url))) {
    return realFetch(url, options);
  }
  __posts.inFlight += 1;
  __posts.most = Math.max(__posts.most, __posts.inFlight);
  try {
    await new Promise((resolve) => setTimeout(resolve, 150));
    return await realFetch(url, options);
  } finally {
    __posts.inFlight -= 1;
  }
};
"""


def test_a_quick_burst_is_stored_in_the_order_typed(orm, cast, server, browser):
    alice_user, _, _ = cast

    def team_with_a_channel():
        team = create_team_workspace(alice_user, "Tide Lab")
        return team, create_conversation(alice_user, team, kind="channel", title="general")

    team, general = orm(team_with_a_channel)
    page = log_in(browser, server, "alice")
    page.context.add_init_script(COUNT_POSTS)
    page.goto(f"/w/{team.id}/c/{general.id}/")
    live(page)
    composer = page.get_by_label("Message #general")
    typed = [f"thought {i}" for i in range(8)]
    for text in typed:
        composer.fill(text)
        composer.press("Enter")
    # Each shows at once, in the order typed, while they are still being sent one by one.
    expect(page.locator(".msg--mine .msg__text")).to_have_count(8)
    expect(page.locator(".is-pending")).to_have_count(0, timeout=WAIT)

    def stored():
        messages = Message.objects.filter(conversation=general).order_by("created_at", "id")
        return list(messages.values_list("body", flat=True))

    assert orm(stored) == typed
    assert page.evaluate("window.__posts.most") == 1
    texts = page.locator(".msg--mine .msg__text").all_inner_texts()
    assert [t.strip() for t in texts] == typed


def test_a_live_page_fetches_what_changed_before_its_socket_listened(orm, cast, server, browser):
    """Events published between a page's rendering and its live socket listening reach nobody:
    on connecting, the page fetches what it shows again. Here a task finishes in between."""
    alice_user, _, _ = cast

    def a_claimed_task():
        team = create_team_workspace(alice_user, "Tide Lab")
        nova = agent_actions.create_agent(alice_user, name="Nova", backend="scripted")
        task = tasks.create_task(alice_user, team, nova, "Summarise the tides.")
        claims.claim(Task, nova.id, "bridge-1", 1, timezone.now(), 60)
        tasks.mark_started(task.id)
        return team, task

    team, task = orm(a_claimed_task)
    page = log_in(browser, server, "alice")
    finished, tries = [], []

    def live_socket(route):
        tries.append(route.url)
        if finished:
            route.connect_to_server()
        else:
            route.close()  # not reachable yet: the page tries again a moment later

    page.route_web_socket(re.compile(r"/ws/live/$"), live_socket)
    page.goto(f"/w/{team.id}/tasks/{task.id}/")
    status = page.locator("[data-task-status]")
    expect(status).to_contain_text("Running")
    wait_for_js(page, "document.body.dataset.live === 'offline'")  # a try has failed
    assert tries
    result = {"text": "High tide at 06:12."}
    orm(tasks.record_result, task.id, "completed", connection_id="bridge-1", result=result)
    finished.append(True)
    live(page)
    expect(status).to_contain_text("Completed", timeout=WAIT)


def test_a_live_refresh_keeps_what_the_person_is_typing(orm, cast, server, browser):
    """A new version arrives while Alice writes a comment on the artifact's page: the page is
    not redrawn under her (her draft stays), and her comment goes out as typed."""
    alice_user, _, _ = cast

    def an_artifact():
        team = create_team_workspace(alice_user, "Tide Lab")
        nova = agent_actions.create_agent(alice_user, name="Nova", backend="scripted")
        general = create_conversation(alice_user, team, kind="channel", title="general")
        artifact = artifact_actions.publish_artifact(
            nova, general, "Tide report", "markdown", "# Tide report\n"
        )
        return team, nova, artifact

    team, nova, artifact = orm(an_artifact)
    page = log_in(browser, server, "alice")
    page.goto(f"/w/{team.id}/artifacts/{artifact.id}/")
    live(page)
    page.wait_for_load_state("networkidle")  # the refresh every connect makes is in
    draft = page.get_by_label("Add a comment")
    draft.fill("Half-way through a thought")

    def new_version():
        fresh = Artifact.objects.select_related("conversation").get(pk=artifact.pk)
        artifact_actions.update_artifact(nova, fresh, "# Tide report\n\n- Low tide\n", "v2")

    # The page fetches itself again on the update: its answer must not replace the draft.
    with page.expect_response(lambda r: r.url == page.url and r.request.method == "GET"):
        orm(new_version)
    expect(draft).to_have_value("Half-way through a thought")
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator(".comment")).to_contain_text("Half-way through a thought", timeout=WAIT)
