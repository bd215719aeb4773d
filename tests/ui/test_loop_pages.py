"""Goal loop pages without a browser: on an agent's page its owner sees its loops here (goal,
status, iterations of max, tokens of budget, deadline in her time zone, why it stopped) with
Pause / Resume / Stop as fits, and a form starting one, each a form calling the REST API; the
loop page shows the guardrails and each iteration newest first. Alice owns team A and Nova;
Bob, a member, sees Nova's page but none of this; Charlie, an outsider with team B, gets 404."""

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from agents import actions as agent_actions
from conversations.models import Task
from routines import loops
from tests.routines.test_loops import iterate
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

NEW_YORK = ZoneInfo("America/New_York")


def page(client, user, url):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def main(html):
    """The page's own content, without the sidebar."""
    return html.split('id="main"')[1]


def section(html):
    return html.split('id="loops-title"')[1].split("</section>")[0]


def row_of(html, loop):
    return html.split(f'data-loop="{loop.id}"')[1].split("</tr>")[0]


@pytest.fixture
def set_up(alice, team_a, nova):
    """Alice in New York: a running loop of Nova in team A with a deadline and a budget, one
    iteration done; a paused one; one stopped by its iteration limit."""
    workspace_actions.update_profile(alice, zone_name="America/New_York")
    now = timezone.now()
    deadline = (now + timedelta(days=3)).replace(second=0, microsecond=0)
    green = loops.start_loop(
        alice, nova, team_a, "Get the test suite green", token_budget=1000, deadline=deadline,
        interval_minutes=30, now=now,
    )  # fmt: skip
    loops.advance_loops(now=now)
    iterate(nova, now, progress="3 of 10 tests fixed", tokens=400)
    paused = loops.start_loop(alice, nova, team_a, "Tidy the backlog", now=now)
    loops.set_loop_status(alice, paused, "paused", now=now)
    short = loops.start_loop(alice, nova, team_a, "Draft the newsletter", max_iterations=1, now=now)
    loops.advance_loops(now=now)
    iterate(nova, now, progress="an outline")
    return {"green": green, "paused": paused, "short": short, "deadline": deadline}


def test_the_owner_sees_her_loops_with_their_guardrails_and_can_act(
    client, alice, team_a, nova, set_up
):
    html = section(main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/")))
    green, paused, short = set_up["green"], set_up["paused"], set_up["short"]
    row = row_of(html, green)
    assert "Get the test suite green" in row and "every 30 minutes" in row
    assert f'href="/w/{team_a.id}/agents/{nova.id}/loops/{green.id}/"' in row
    assert "loop-status--running" in row and "Running" in row
    assert "1 of 10" in row
    assert "400 of 1000" in row and 'data-width="40"' in row  # the token meter
    deadline = set_up["deadline"].astimezone(NEW_YORK)
    assert f'datetime="{deadline.isoformat()}"' in row
    assert deadline.strftime("%a %-d %b, %H:%M") in row
    assert f'action="/api/v1/loops/{green.id}/"' in row
    assert 'name="status" value="paused"' in row and 'name="status" value="stopped"' in row
    assert 'value="running"' not in row and "data-stop-reason" not in row
    row = row_of(html, paused)
    assert "loop-status--paused" in row and "continuous" in row and "0 of 10" in row
    assert 'name="status" value="running"' in row and 'value="paused"' not in row
    assert "no budget" in row and "none" in row  # no budget, no deadline
    row = row_of(html, short)
    assert "loop-status--stopped" in row and "1 of 1" in row
    assert "stopped: It ran its 1 iteration." in row
    assert 'name="status"' not in row  # finished: nothing to press
    # Newest first.
    assert html.index(str(short.id)) < html.index(str(paused.id)) < html.index(str(green.id))
    # Starting one: every setting, to the REST API.
    form = html.split('class="stack add-loop"')[1].split("</form>")[0]
    assert 'data-api="POST" action="/api/v1/loops/"' in html
    assert f'name="agent" value="{nova.id}"' in form
    assert f'name="workspace" value="{team_a.id}"' in form
    for field in (
        'name="goal"',
        'name="_pace" value="continuous" data-choice checked',
        'name="intervalMinutes" data-type="int"',
        'name="maxIterations" data-type="int" min="1" max="100"',
        'name="tokenBudget" data-type="int"',
        'type="datetime-local" name="deadline" data-type="zoned" data-zone="America/New_York"',
        'name="noProgressLimit" data-type="int" min="1" max="20"',
        'class="form-error" data-form-error',
    ):
        assert field in form, field


def test_a_new_agent_offers_a_loop_to_start(client, alice, team_a, nova):
    html = section(main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/")))
    assert "No goal loop here yet." in html and "Start the loop" in html


def test_an_agent_away_from_this_workspace_gets_no_loop_form_here(client, alice, team_a):
    personal = alice.memberships.get(workspace__kind="personal").workspace
    orbit = agent_actions.create_agent(
        alice, name="Orbit", backend="scripted", pinned_workspace_ids=[personal.id]
    )
    loops.start_loop(alice, orbit, personal, "Sort the photos")
    html = section(main(page(client, alice, f"/w/{team_a.id}/agents/{orbit.id}/")))
    assert 'action="/api/v1/loops/"' not in html and "does not appear in Team A" in html
    assert "Sort the photos" not in html and "1 in other workspaces" in html


def test_the_loop_page_shows_the_guardrails_and_iterations_newest_first(
    client, alice, team_a, nova
):
    now = timezone.now()
    loop = loops.start_loop(
        alice, nova, team_a, "Shrink the bundle", max_iterations=5, token_budget=2000,
        no_progress_limit=3, now=now,
    )  # fmt: skip
    url = f"/w/{team_a.id}/agents/{nova.id}/loops/{loop.id}/"
    html = main(page(client, alice, url))
    assert "No iteration yet." in html and "0 of 5" in html and "0 of 3" in html
    loops.advance_loops(now=now)
    iterate(nova, now, progress="412 kB", tokens=300, text="one")
    iterate(nova, now, progress="412 kB", tokens=250, text="two")
    html = main(page(client, alice, url))
    guard = html.split("data-guard")[1].split("</section>")[0]
    assert "3 of 5" in guard and "one under way" in guard  # the third has begun
    assert "550 of 2000" in guard
    assert '<span class="stat__value" data-no-progress>1 of 3</span>' in guard
    rows = [r.split("</tr>")[0] for r in html.split("data-iteration=")[1:]]
    assert len(rows) == 3
    third, second, first = rows
    assert "under way" in third
    assert "outcome--continue" in second and "412 kB" in second and ">250<" in second
    assert "outcome--continue" in first and ">300<" in first and "working" in first
    tasks = list(Task.objects.filter(agent=nova).order_by("created_at"))
    assert f'href="/w/{team_a.id}/tasks/{tasks[0].id}/"' in first
    assert f'href="/w/{team_a.id}/tasks/{tasks[2].id}/"' in third
    assert f'action="/api/v1/loops/{loop.id}/"' in html and 'value="paused"' in html
    # Blocked: the reason in its words, no buttons any more.
    iterate(nova, now, outcome="blocked", reason="I need the CDN credentials.", text="three")
    html = main(page(client, alice, url))
    assert "blocked: I need the CDN credentials." in html and "loop-status--blocked" in html
    assert "outcome--blocked" in html and 'name="status"' not in html


def test_another_member_who_sees_the_agent_sees_none_of_it(client, bob, team_a, nova, set_up):
    html = main(page(client, bob, f"/w/{team_a.id}/agents/{nova.id}/"))
    # (An iteration's task is a task of the workspace, listed under Nova's recent tasks by the
    # tasks' own visibility; the loop itself, its guardrails and its controls are not shown.)
    for absent in (
        'id="loops-title"',
        "Goal loops",
        "/api/v1/loops/",
        "Tidy the backlog",
        "/loops/",
        "data-loop=",
        "of its budget",
    ):
        assert absent not in html, absent


def test_the_loop_page_is_404_for_everyone_but_the_owner_here(
    client, alice, bob, charlie, team_a, team_b, nova, set_up
):
    green = set_up["green"]
    url = f"/w/{team_a.id}/agents/{nova.id}/loops/{green.id}/"
    for who in (bob, charlie):
        client.force_login(who)
        assert client.get(url).status_code == 404, who
    client.force_login(charlie)
    assert client.get(f"/w/{team_b.id}/agents/{nova.id}/loops/{green.id}/").status_code == 404
    # Alice: a loop under another agent or another workspace is not found there.
    client.force_login(alice)
    orbit = agent_actions.create_agent(alice, name="Orbit", handle="orbit", backend="scripted")
    other = workspace_actions.create_team_workspace(alice, "Elsewhere")
    elsewhere = loops.start_loop(alice, nova, other, "Elsewhere goal")
    for bad in (
        f"/w/{team_a.id}/agents/{orbit.id}/loops/{green.id}/",
        f"/w/{team_a.id}/agents/{nova.id}/loops/{elsewhere.id}/",
        f"/w/{other.id}/agents/{nova.id}/loops/{green.id}/",
        f"/w/{team_a.id}/agents/{nova.id}/loops/{team_a.id}/",
    ):
        assert client.get(bad).status_code == 404, bad
    assert client.get(url).status_code == 200
