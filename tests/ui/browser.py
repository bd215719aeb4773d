"""Helpers for tests in a real browser: headless Debian Chromium driven by Playwright (sync API)
against a real daphne server on the test database, with real agent bridges."""

import copy
import os
import shlex
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import expect

from agents import actions as agent_actions
from artifacts.card_library import SEED_TEMPLATES
from conversations.actions import create_conversation
from tests.socket_helpers import LoggedProcess, start_bridge
from tests.waiting import wait_until
from workspaces.actions import (
    accept_invitation,
    create_invitation,
    create_team_workspace,
    update_profile,
)
from workspaces.models import User

# Debian's Chromium, or another given by CHROMIUM. Without one the browser tests are skipped,
# saying so (make test lists skips with their reasons).
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
NO_CHROMIUM = (
    f"no Chromium at {CHROMIUM}: the browser tests need it "
    "(Debian/Ubuntu: apt-get install chromium; elsewhere set CHROMIUM=/path/to/chromium)"
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The committed pictures are refreshed on purpose (UPDATE_SCREENSHOTS=1 make test ARGS=tests/ui);
# an ordinary run still takes every screenshot (so a broken screen fails) but keeps them aside.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "agntchat-screenshots"
)
# Every browser test file's marks (pytestmark = MARKS): a live server needs committed data, the
# tests are slow, and they are skipped without Chromium.
MARKS = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=NO_CHROMIUM),
]
# The work map's node count once its first load has drawn (wait_for_js(page, f"{MAP_NODES} === 6")).
MAP_NODES = "() => window.workMap && window.workMap.loads() > 0 && window.workMap.cy.nodes().length"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PASSWORD = "pw-ui-test-83415"
WAIT = 15_000  # ms: a live event, a bridge reply


def wait_for_js(page, expression: str, arg=None, timeout: float = WAIT / 1000) -> None:
    """Until EXPRESSION (JavaScript: an expression, or a function of ARG) is true in PAGE.
    Playwright's wait_for_function evaluates its predicate with eval, which the pages'
    Content-Security-Policy refuses (no 'unsafe-eval'); page.evaluate goes around it."""
    wait_until(lambda: page.evaluate(expression, arg), timeout=timeout, what=expression)


class Orm:
    """Runs database work on one worker thread. Playwright's sync API keeps an event loop
    running on the test's own thread, where Django (rightly) refuses synchronous queries."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orm")

    def __call__(self, fn, *args, **kwargs):
        return self.pool.submit(fn, *args, **kwargs).result(timeout=60)

    def close(self):
        from django.db import connections

        self.pool.submit(connections.close_all).result()
        self.pool.shutdown()


def person(username: str, name: str) -> User:
    return User.objects.create_user(
        username, f"{username}@example.com", PASSWORD, display_name=name
    )


def log_in(browser, server, username: str, viewport=LAPTOP, **options):
    """A fresh browser context logged in through the real login form; returns its page. OPTIONS
    go to the context (a ``timezone_id``, say)."""
    context = browser.new_context(viewport=viewport, base_url=server.url, **options)
    page = context.new_page()
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


def live(page):
    """Wait until the page's live socket said hello."""
    expect(page.locator("body")).to_have_attribute("data-live", "connected", timeout=WAIT)
    return page


# Every page of the context gets a switch on its live socket: drop_live closes the socket and
# keeps it from coming back (its reconnects go to a closed port and fail, as with the network
# gone) until restore_live, after which the page's own retry connects again.
LIVE_SWITCH = """(() => {
  const Native = window.WebSocket;
  const live = (window.__live = { blocked: false, sockets: [] });
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      live.sockets.push(this);
      // Blocked: closed while still connecting, the page's live socket fails (code 1006) as it
      // would with the network down.
      if (live.blocked && String(url).includes("/ws/live/")) this.close();
    }
  };
})();"""


def with_live_switch(page):
    """PAGE's context, its next pages and navigations with the switch of LIVE_SWITCH."""
    page.context.add_init_script(LIVE_SWITCH)
    return page


def drop_live(page):
    """Close PAGE's live socket and keep it away; returns once the page knows it is offline."""
    page.evaluate("() => { window.__live.blocked = true; window.__live.sockets.at(-1).close(); }")
    expect(page.locator("body")).to_have_attribute("data-live", "offline", timeout=WAIT)


def restore_live(page):
    """Let PAGE's live socket back: it reconnects at its next retry (a few seconds at most)."""
    page.evaluate("() => { window.__live.blocked = false; }")
    return live(page)


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = page.viewport_size
    page.mouse.move(size["width"] - 1, size["height"] - 1)  # no hover highlight in the picture
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def scroll_to(heading):
    """HEADING at the top of the page's scrolling content, for the picture."""
    heading.evaluate(
        """heading => {
          const box = heading.closest("#main") || document.scrollingElement;
          box.scrollTop += heading.getBoundingClientRect().top - box.getBoundingClientRect().top - 12;
        }"""
    )


def run_bridge_command(command: str, workdir, options: str = "{}"):
    """Run the `AGNTCHAT_AGENT_KEY=agk_… …/agntchat-bridge --url …` line the agent page shows,
    as shown, in a fresh shell's environment (the virtualenv not activated)."""
    setting, *args = shlex.split(command)
    name, key = setting.split("=", 1)
    assert name == "AGNTCHAT_AGENT_KEY" and key.startswith("agk_"), command
    assert Path(args[0]).is_absolute() and Path(args[0]).name == "agntchat-bridge", command
    assert args[1:3] == ["--url", args[2]] and len(args) == 3, command
    fresh = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", name)}
    return LoggedProcess(
        [*args, "--workdir", str(workdir)],
        env=dict(fresh, PATH="/usr/bin:/bin", AGNTCHAT_BACKEND_OPTIONS=options, **{name: key}),
    )


def hotel_card() -> dict:
    """The hotels sample of the card library, without pictures (the test machine is offline)."""
    sample = copy.deepcopy(next(t["sample"] for t in SEED_TEMPLATES if t["name"] == "hotels"))
    for item in sample["items"]:
        item.pop("image", None)
    return sample


def tide_lab(*, with_bob: bool = False, alice_zone: str | None = None):
    """Alice's team workspace Tide Lab with Nova, her agent: (team, nova). WITH_BOB: Bob is a
    member; ALICE_ZONE: Alice's time zone (a zone name)."""
    alice = person("alice", "Alice Martin")
    bob = person("bob", "Bob Okafor") if with_bob else None
    if alice_zone:
        update_profile(alice, zone_name=alice_zone)
    team = create_team_workspace(alice, "Tide Lab")
    if bob:
        _, token = create_invitation(team.memberships.get(user=alice))
        accept_invitation(bob, token)
    nova = agent_actions.create_agent(alice, name="Nova", handle="nova", backend="scripted")
    return team, nova


def tide_lab_in_lisbon():
    """Alice, in Lisbon, and Bob in Tide Lab with Nova, Alice's agent: (team, nova)."""
    return tide_lab(with_bob=True, alice_zone="Europe/Lisbon")


def nova_in_general(*, with_bob: bool = False):
    """Tide Lab (``tide_lab``) with #general, where Alice talks with Nova: (team, general, nova)."""
    team, nova = tide_lab(with_bob=with_bob)
    general = create_conversation(
        team.owner, team, kind="channel", title="general", agent_ids=[nova.id]
    )
    return team, general, nova


def open_conversation(browser, server, username: str, team, conversation):
    """USERNAME logged in (``log_in``) on CONVERSATION's page, its live socket connected; returns
    the page."""
    page = log_in(browser, server, username)
    page.goto(f"/w/{team.id}/c/{conversation.id}/")
    return live(page)


def running_bridge(orm, server, agent, tmp_path, options: str):
    """For a fixture (``yield from``): a real bridge process for AGENT against SERVER (the
    scripted backend's OPTIONS, JSON), ended after the test, which fails if it crashed."""
    process = orm(start_bridge, server, agent, tmp_path, options)
    try:
        yield process
    finally:
        process.terminate()
    output = process.communicate(timeout=30)[0]
    assert "Traceback" not in output, output
