"""Long words where people put them, in a real browser: a task about a shared document's link, an
agent with a long name. Alice's pages keep to the screen's width (nothing to scroll sideways but a
table's own box) on a laptop and on a phone."""

import pytest

from agents import actions as agent_actions
from conversations.actions import create_conversation
from tests.ui.browser import LAPTOP, MARKS, PHONE, log_in, shot, tide_lab

pytestmark = MARKS
LINK = "https://docs.google.com/document/d/1Xq7TbV0aWkP3nYcR8sLm2HdJf5GzE9uQo4iKt6BvNpA/edit"
LONG_NAME = "Harbour schedules release coordinator"


@pytest.fixture
def story(orm):
    def build():
        team, nova = tide_lab()
        agent_actions.create_agent(team.owner, name=LONG_NAME, handle="coordinator")
        room = create_conversation(team.owner, team, kind="channel", title="general")
        return team, room

    return orm(build)


# Elements that stick out of the window, other than inside a box that scrolls sideways itself
# (a .table-wrap, a phone's table) and stays within the window.
STICKING_OUT = """() => {
  const width = window.innerWidth, out = [];
  for (const element of document.querySelectorAll("#main *")) {
    const box = element.getBoundingClientRect();
    if (!box.width || box.right <= width + 1) continue;
    let up = element.parentElement, held = false;
    for (; up && !held; up = up.parentElement) {
      held = ["auto", "scroll"].includes(getComputedStyle(up).overflowX)
        && up.getBoundingClientRect().right <= width + 1 && up.id !== "main";
    }
    if (!held) out.push(`${element.tagName}.${element.className}: ${Math.round(box.right)}px`);
  }
  const main = document.querySelector("#main");
  if (main.scrollWidth > main.clientWidth + 1) out.push(`#main scrolls: ${main.scrollWidth}px`);
  return out;
}"""


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_long_words_keep_to_the_window(orm, story, browser, viewport):
    team, room = story
    chromium, server = browser
    label = "phone" if viewport == PHONE else "laptop"
    page = log_in(chromium, server, "alice", viewport=viewport)
    page.goto(f"/w/{team.id}/tasks/")
    # No task yet: the new task form is open.
    page.get_by_label("Instructions").fill(f"Check {LINK} against the tide tables")
    page.get_by_role("button", name="Start task").click()
    page.locator("[data-task-id]").first.wait_for()

    for name, path in [
        ("tasks", f"/w/{team.id}/tasks/"),
        ("agents", f"/w/{team.id}/agents/"),
        ("direct", f"/w/{team.id}/direct/"),
    ]:
        page.goto(path)
        page.locator("#main").wait_for()
        shot(page, f"walkthrough-long-words-{name}-{label}")
        assert page.evaluate(STICKING_OUT) == [], name
