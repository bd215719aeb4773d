"""Long names in a real browser: a person, a workspace, an agent, a channel and an artifact each
named with one long word (as long as each may be) never make a page wider than the screen, at
laptop or phone width. Each such name breaks inside its box, or is cut short with an ellipsis
where the line is one control (a button, a pill, a one-line title)."""

import pytest

from agents import actions as agent_actions
from artifacts.actions import publish_artifact
from conversations.actions import create_conversation
from tests.ui.browser import MARKS, PHONE, log_in, shot, tide_lab
from workspaces.actions import rename_workspace, update_profile

pytestmark = MARKS

WORD = "W" * 80  # the most a person's, a workspace's, an agent's or a channel's name may hold


@pytest.fixture
def story(orm):
    def build():
        team, _ = tide_lab(with_bob=True)
        alice = team.owner
        update_profile(alice, display_name=WORD)
        rename_workspace(team.memberships.get(user=alice), WORD)
        agent = agent_actions.create_agent(alice, name=WORD, handle="longname", backend="scripted")
        channel = create_conversation(
            alice, team, kind="channel", title=WORD.lower(), agent_ids=[agent.id]
        )
        artifact = publish_artifact(agent, channel, "A" * 200, "markdown", "# Notes")
        return team, channel, agent, artifact

    return orm(build)


# Text of a long name that reaches past the right edge of the screen, unless it is cut short on
# purpose (an ellipsis, a clamped title) by the box around it.
SPILLED = """() => {
  const spilled = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!/[Ww]{20}|A{20}/.test(node.data) || !node.parentElement.checkVisibility()) continue;
    let cut = false;
    for (let el = node.parentElement; el && !cut; el = el.parentElement) {
      const style = getComputedStyle(el);
      cut = style.textOverflow === "ellipsis" || style.webkitLineClamp !== "none" ||
        style.clip !== "auto"; // a label for screen readers only
    }
    const range = document.createRange();
    range.selectNodeContents(node);
    const right = range.getBoundingClientRect().right;
    if (!cut && right > window.innerWidth + 1) {
      spilled.push(`${node.parentElement.tagName}.${node.parentElement.className} to ${Math.round(right)}`);
    }
  }
  return [document.documentElement.scrollWidth, window.innerWidth, spilled];
}"""


def test_long_names_stay_on_the_screen(story, browser):
    team, channel, agent, artifact = story
    chromium, server = browser
    w = f"/w/{team.id}"
    pages = {
        "conversation": f"{w}/c/{channel.id}/",
        "channel-settings": f"{w}/c/{channel.id}/settings/",
        "agent": f"{w}/agents/{agent.id}/",
        "artifact": f"{w}/artifacts/{artifact.id}/",
    }
    problems = []
    for size, viewport in (("laptop", None), ("phone", PHONE)):
        page = log_in(chromium, server, "bob", **({"viewport": viewport} if viewport else {}))
        for name, url in pages.items():
            page.goto(url)
            width, screen, spilled = page.evaluate(SPILLED)
            if width > screen or spilled:
                problems.append(f"{name} at {size}: {width} px wide on {screen}; {spilled}")
            shot(page, f"long-names-{name}-{size}")
        page.context.close()
    assert not problems, "\n".join(problems)
