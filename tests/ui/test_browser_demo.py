"""The demo in a real browser: a fresh seed_demo with Scout's and Nova's bridges running as
`make run` starts them (their scripted tables from the seed), the demo person finds a finished
example of each feature in #general, tries a suggested prompt and sees the agents do it live.
Then the small things around it: a thread card's body comes into view and Esc closes it, the
agent page's header follows a save, a channel name wraps on a phone. Screens go to
docs/screenshots/ (laptop and phone)."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect, sync_playwright

from agents.models import Agent
from agntchat.ui import demo
from conversations.actions import create_conversation
from conversations.models import Conversation, Task
from tests.socket_helpers import Daphne, start_bridge
from tests.ui.browser import CHROMIUM, CHROMIUM_ARGS, LAPTOP, MARKS, PHONE, WAIT, live, shot
from workspaces.models import User

pytestmark = MARKS


@pytest.fixture
def seeded(orm, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    orm(call_command, "seed_demo", stdout=StringIO())
    password = (tmp_path / "demo_password").read_text().strip()
    general = orm(Conversation.objects.get, title="general", workspace__name="Demo team")
    return password, general


@pytest.fixture
def server(seeded):
    daphne = Daphne()
    yield daphne
    daphne.stop()


@pytest.fixture
def bridges(orm, server, seeded, tmp_path):
    """Scout's and Nova's bridges with the tables seed_demo wrote for the Procfile's bridges."""
    started = []
    for spec in demo.AGENTS:
        agent = orm(Agent.objects.get, handle=spec["handle"])
        options = (tmp_path / f"demo_{spec['handle']}.json").read_text()
        workdir = tmp_path / spec["handle"]
        workdir.mkdir()
        started.append(orm(start_bridge, server, agent, workdir, options))
    yield started
    for process in started:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def browser(server):
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def demo_login(browser, server, password, viewport=LAPTOP):
    page = browser.new_context(viewport=viewport, base_url=server.url).new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
    return live(page)


def send(page, text):
    composer = page.get_by_label("Message #general")
    composer.fill(text)
    composer.press("Enter")


def test_the_demo_shows_each_feature_finished_and_live(orm, seeded, server, bridges, browser):
    password, general = seeded
    page = demo_login(browser, server, password)
    # The first visit lands in #general: the intro and a finished example of each feature.
    expect(page).to_have_url(re.compile(f"/c/{general.id}/"))
    messages = page.locator("[role=log]")
    expect(messages).to_contain_text("Welcome to the agntchat demo")
    sample = page.locator(".thread-card").first
    expect(sample).to_contain_text("Resolved")
    expect(sample).to_contain_text(demo.THREAD_SUMMARY)
    expect(page.locator(".cards")).to_contain_text("Harbour Hall")
    expect(page.get_by_role("button", name="Book ✓")).to_be_visible()
    expect(messages).to_contain_text(demo.NOTE_TITLE)
    expect(messages).to_contain_text("Launch checklist ready")
    shot(page, "laptop-20-demo-first-visit")

    # The owner of both agents opens their side thread inline: the body comes into view.
    sample.get_by_role("button", name=re.compile("Scout ↔ Nova")).click()
    body = sample.locator(".thread-card__body")
    expect(body.locator(".msg", has_text=demo.THREAD_ANSWER[7:])).to_be_visible()
    expect(body).to_be_in_viewport()
    page.keyboard.press("Escape")
    expect(body).to_be_hidden()

    # Live: Scout asks Nova aside, Nova answers, Scout resolves it; the new card follows.
    send(page, demo.THREAD_PROMPT)
    cards = page.locator(".thread-card")
    expect(cards).to_have_count(2, timeout=WAIT)
    expect(cards.last).to_contain_text("Resolved", timeout=WAIT)
    expect(cards.last).to_contain_text(demo.THREAD_SUMMARY)
    threads = orm(lambda: list(Conversation.objects.filter(kind="thread").order_by("created_at")))
    assert [t.thread_status for t in threads] == ["resolved", "resolved"]
    cards.last.get_by_role("button", name=re.compile("Scout ↔ Nova")).click()
    expect(cards.last.locator(".msg", has_text=demo.THREAD_QUESTION)).to_be_visible(timeout=WAIT)
    expect(cards.last.locator(".thread-card__body")).to_be_in_viewport()
    shot(page, "laptop-21-demo-side-thread-live")
    page.keyboard.press("Escape")

    # Live: a /task with progress, then its result relayed here.
    send(page, demo.TASK_PROMPT)
    expect(page.locator("[data-working], .working").first).to_contain_text(
        re.compile("|".join(demo.TASK_STEPS)), timeout=WAIT
    )
    expect(messages.locator(".msg", has_text="Launch checklist ready")).to_have_count(
        2, timeout=WAIT
    )
    status, steps = orm(
        lambda: (
            (task := Task.objects.order_by("-created_at").first()).status,
            [e.data.get("message") for e in task.events.order_by("seq")],
        )
    )
    assert status == "completed" and [m for m in steps if m] == demo.TASK_STEPS

    # A card's button reaches Scout, whose answer comes back live.
    page.get_by_role("button", name="More details").first.click()
    expect(messages.locator(".msg", has_text=demo.DETAILS)).to_have_count(1, timeout=WAIT)

    # On a phone: the channel title is whole, not "# gene…".
    phone = demo_login(browser, server, password, PHONE)
    title = phone.locator(".conv-head__title")
    expect(title).to_contain_text("general")
    assert title.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    shot(phone, "phone-20-demo")


def test_small_things_around_the_demo(orm, seeded, server, browser):
    password, general = seeded
    user = orm(User.objects.get, username="demo")
    long_name = orm(
        lambda: create_conversation(
            user,
            general.workspace,
            kind="channel",
            title="design-reviews-for-the-spring-launch",
        )
    )
    # A long channel name on a phone: wrapped, every word of it on screen.
    phone = demo_login(browser, server, password, PHONE)
    phone.goto(f"/w/{general.workspace_id}/c/{long_name.id}/")
    name = phone.locator(".conv-head__title > span").last
    expect(name).to_have_text("design-reviews-for-the-spring-launch")
    shot(phone, "phone-21-long-channel-name")
    assert name.evaluate(
        "e => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"
    )

    # The agent page's header shows the saved name and role at once.
    page = demo_login(browser, server, password)
    scout = orm(Agent.objects.get, handle="scout")
    page.goto(f"/w/{general.workspace_id}/agents/{scout.id}/")
    page.get_by_text("Configuration").first.click()
    page.get_by_label("Name", exact=True).fill("Scout Prime")
    page.get_by_label("Role").fill("lead scout")
    page.get_by_role("button", name="Save configuration").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    header = page.locator(".conv-head")
    expect(header.locator("h1")).to_have_text(re.compile("Scout Prime"))
    expect(header).to_contain_text("lead scout")
    expect(page).to_have_title(re.compile("^Scout Prime ·"))
    shot(page, "laptop-22-agent-saved")
