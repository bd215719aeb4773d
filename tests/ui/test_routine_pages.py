"""Routine pages without a browser: on an agent's page its owner sees its routines (schedule in
words, next run, enabled, edit, delete, runs), its pulse (checklist, schedule, reports) and its
pending reminders, each change a form calling the REST API, times in the person's time zone; the
routine page lists runs and the pulse page reports. Alice owns team A and Nova; Bob, a member,
sees Nova's page but none of this; Charlie, an outsider with team B, gets 404."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agents import actions as agent_actions
from conversations.models import Task
from routines import actions, reminders
from routines.models import Routine, RoutineRun
from workspaces import actions as workspace_actions

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 3, 8, 2, tzinfo=UTC)
NEW_YORK = ZoneInfo("America/New_York")


def page(client, user, url):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def main(html):
    """The page's own content, without the sidebar."""
    return html.split('id="main"')[1]


def routine(alice, nova, workspace, name="Inbox sweep", **schedule):
    schedule = schedule or {"interval_minutes": 60}
    return actions.create_routine(
        alice,
        nova,
        workspace,
        name=name,
        instructions=f"{name}: list what needs an answer.",
        now=T0,
        **schedule,
    )


def pulse(alice, nova, workspace):
    return actions.create_routine(
        alice,
        nova,
        workspace,
        name="",
        instructions="",
        interval_minutes=60 * 24,
        checklist=["Open pull requests older than a week", "Failed deploys"],
        now=T0,
    )


@pytest.fixture
def set_up(alice, team_a, nova):
    """Alice in New York: two routines of Nova in team A (one paused), its pulse, a reminder."""
    workspace_actions.update_profile(alice, zone_name="America/New_York")
    hourly = routine(alice, nova, team_a)
    standup = routine(
        alice, nova, team_a, name="Standup", cron="0 9 * * 1-5", timezone_name="Europe/Lisbon"
    )
    actions.update_routine(alice, standup, enabled=False, now=T0)
    due = datetime(2030, 1, 15, 14, 0, tzinfo=UTC)
    reminder = reminders.set_reminder(
        nova, team_a, "Send the quarterly numbers", due, user=alice, now=due - timedelta(days=1)
    )
    return {"hourly": hourly, "standup": standup, "pulse": pulse(alice, nova, team_a),
            "reminder": reminder}  # fmt: skip


def test_the_owner_sees_routines_with_schedules_in_words_and_can_change_them(
    client, alice, team_a, nova, set_up
):
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/"))
    hourly, standup = set_up["hourly"], set_up["standup"]
    row = html.split(f'data-routine="{hourly.id}"')[1].split("</tr>")[0]
    assert "Every hour" in row and "Inbox sweep" in row
    # Next run, in Alice's time zone: 09:02 UTC is 04:02 in New York.
    assert f'datetime="{hourly.next_run_at.astimezone(NEW_YORK).isoformat()}"' in row
    assert "Thu 3 Dec, 04:02" in row
    assert f'href="/w/{team_a.id}/agents/{nova.id}/routines/{hourly.id}/"' in row
    assert f'action="/api/v1/routines/{hourly.id}/"' in row and 'name="enabled"' in row
    assert " checked" in row.split('name="enabled"')[1].split(">")[0]
    assert 'data-api="DELETE"' in row
    paused = html.split(f'data-routine="{standup.id}"')[1].split("</tr>")[0]
    assert "At 09:00 AM, Monday through Friday (Europe/Lisbon)" in paused and "Paused" in paused
    assert " checked" not in paused.split('name="enabled"')[1].split(">")[0]
    # Its edit form, with the cron way chosen and the routine's own time zone.
    edit = html.split(f'id="edit-routine-{standup.id}"')[1].split("</tr>")[0]
    assert 'data-api="PATCH"' in edit and 'value="0 9 * * 1-5"' in edit
    assert 'value="Europe/Lisbon"' in edit and 'value="cron" data-choice checked' in edit
    # Adding one: to the REST API, every N minutes by default, cron read in Alice's time zone.
    add = html.split('class="stack add-routine"')[1].split("</form>")[0]
    assert 'data-api="POST" action="/api/v1/routines/"' in html
    assert (
        f'name="agent" value="{nova.id}"' in add and f'name="workspace" value="{team_a.id}"' in add
    )
    for field in ('name="instructions"', 'name="intervalMinutes"', 'name="cron"'):
        assert field in add, field
    assert 'name="timezone" list="time-zones" value="America/New_York"' in add
    assert '<option value="Europe/Lisbon">' in html  # the time zones offered
    assert "2 of 10" in html


def test_the_owner_sees_the_pulse_and_pending_reminders(client, alice, team_a, nova, set_up):
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/"))
    the_pulse = set_up["pulse"]
    section = html.split('id="pulse-title"')[1].split("</section>")[0]
    assert "<li>Open pull requests older than a week</li><li>Failed deploys</li>" in section
    assert "Every day" in section and "Pulse enabled" in section
    assert f'href="/w/{team_a.id}/agents/{nova.id}/pulse/"' in section
    assert f'action="/api/v1/routines/{the_pulse.id}/"' in section
    assert 'name="checklist" rows="4" data-type="lines"' in section
    assert "Open pull requests older than a week\nFailed deploys</textarea>" in section
    assert 'action="/api/v1/routines/"' not in section  # it has its pulse: no second one
    # The pulse is not one of its routines.
    assert f'data-routine="{the_pulse.id}"' not in html

    reminder = set_up["reminder"]
    section = html.split('id="reminders-title"')[1].split("</section>")[0]
    item = section.split(f'data-reminder="{reminder.id}"')[1].split("</li>")[0]
    assert "Send the quarterly numbers" in item and "set by you" in item
    assert "Tue 15 Jan 2030, 09:00" in item  # 14:00 UTC in New York
    assert f'action="/api/v1/reminders/{reminder.id}/"' in item and 'data-api="DELETE"' in item
    assert 'action="/api/v1/reminders/"' in section and 'type="datetime-local" name="at"' in section
    assert "America/New_York" in section and 'action="/api/v1/me/"' in section
    reminders.cancel_reminder(reminder)
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/"))
    assert "Send the quarterly numbers" not in html and "No reminder waiting." in html


def test_a_new_agent_offers_a_pulse_to_start(client, alice, team_a, nova):
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/"))
    section = html.split('id="pulse-title"')[1].split("</section>")[0]
    assert 'data-api="POST" action="/api/v1/routines/"' in section and "Start the pulse" in section
    assert "No routine here yet." in html and "0 of 10" in html


def test_another_member_who_sees_the_agent_sees_none_of_it(client, bob, team_a, nova, set_up):
    html = main(page(client, bob, f"/w/{team_a.id}/agents/{nova.id}/"))
    for absent in (
        'id="routines-title"',
        'id="pulse-title"',
        'id="reminders-title"',
        "/api/v1/routines/",
        "/api/v1/reminders/",
        "Inbox sweep",
        "Failed deploys",
        "Send the quarterly numbers",
        "/pulse/",
        "/routines/",
    ):
        assert absent not in html, absent


def test_an_agent_away_from_this_workspace_gets_no_forms_here(client, alice, team_a):
    personal = alice.memberships.get(workspace__kind="personal").workspace
    orbit = agent_actions.create_agent(
        alice, name="Orbit", backend="scripted", pinned_workspace_ids=[personal.id]
    )
    pulse(alice, orbit, personal)
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{orbit.id}/"))
    assert 'action="/api/v1/routines/"' not in html and 'action="/api/v1/reminders/"' not in html
    assert f'runs in <a href="/w/{personal.id}/agents/{orbit.id}/">' in html


def test_the_routine_page_lists_runs_with_their_tasks_and_missed_slots(
    client, alice, team_a, nova, set_up
):
    hourly = set_up["hourly"]
    actions.run_due_routines(now=T0 + timedelta(hours=1, minutes=1))
    actions.run_due_routines(now=T0 + timedelta(hours=4, minutes=30))  # two slots missed
    RoutineRun.objects.create(
        routine=hourly, slot=T0 + timedelta(hours=6), error="Nova does not appear in Team A."
    )
    full = page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/routines/{hourly.id}/")
    html = main(full)
    assert "Every hour" in html and "Inbox sweep: list what needs an answer." in html
    rows = [r.split("</tr>")[0] for r in html.split("data-run=")[1:]]
    assert len(rows) == 3
    newest, catch_up, first = rows
    assert "Not run" in newest and "Nova does not appear in Team A." in newest
    tasks = list(Task.objects.filter(agent=nova).order_by("created_at"))
    assert f'href="/w/{team_a.id}/tasks/{tasks[1].id}/"' in catch_up and "Queued" in catch_up
    assert "2 slots missed" in catch_up
    assert "Thu 3 Dec 2026, 05:02" in catch_up and "Thu 3 Dec 2026, 06:02" in catch_up  # NY
    assert "Thu 3 Dec 2026, 07:02" in catch_up  # the slot it ran for
    assert f'href="/w/{team_a.id}/tasks/{tasks[0].id}/"' in first and "missed" not in first
    # Results come back in Alice's DM with Nova.
    assert f'href="/w/{team_a.id}/c/{hourly.conversation_id}/"' in full.split('id="main"')[0]


def test_the_pulse_page_lists_reports_newest_first_with_each_items_outcome(
    client, alice, team_a, nova, set_up
):
    the_pulse = set_up["pulse"]
    html = page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/pulse/")
    assert "No report yet." in html
    actions.run_due_routines(now=T0 + timedelta(days=1))
    actions.run_due_routines(now=T0 + timedelta(days=2))
    first, second = [run.task for run in the_pulse.runs.order_by("slot")]
    actions.file_pulse_report(
        the_pulse,
        first,
        [{"item": "Open pull requests older than a week", "status": "ok"},
         {"item": "Failed deploys", "status": "skipped", "finding": "No deploy access."}],
    )  # fmt: skip
    actions.file_pulse_report(
        the_pulse,
        second,
        [{"item": "Open pull requests older than a week", "status": "ok", "finding": "None."},
         {"item": "Failed deploys", "status": "flagged", "finding": "web-3 failed twice"}],
        summary="One thing to look at.",
    )  # fmt: skip
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/pulse/"))
    reports = [r.split("</ul>")[0] for r in html.split("data-report=")[1:]]
    assert len(reports) == 2
    newest, oldest = reports
    assert "1 flagged" in newest and "One thing to look at." in newest
    assert 'status outcome status--queued">flagged' in newest and "web-3 failed twice" in newest
    assert f'href="/w/{team_a.id}/tasks/{second.id}/"' in newest
    assert "All clear" in oldest and 'status--cancelled">skipped' in oldest
    assert 'status outcome status--completed">ok' in oldest and "No deploy access." in oldest


def test_the_new_pages_are_404_for_everyone_but_the_owner_here(
    client, alice, bob, charlie, team_a, team_b, nova, set_up
):
    hourly = set_up["hourly"]
    urls = [
        f"/w/{team_a.id}/agents/{nova.id}/routines/{hourly.id}/",
        f"/w/{team_a.id}/agents/{nova.id}/pulse/",
    ]
    for who in (bob, charlie):
        client.force_login(who)
        for url in urls:
            assert client.get(url).status_code == 404, (who, url)
    client.force_login(charlie)
    for url in (
        f"/w/{team_b.id}/agents/{nova.id}/routines/{hourly.id}/",
        f"/w/{team_b.id}/agents/{nova.id}/pulse/",
    ):
        assert client.get(url).status_code == 404, url
    # Alice: a routine under another agent or another workspace is not found there.
    client.force_login(alice)
    orbit = agent_actions.create_agent(alice, name="Orbit", handle="orbit", backend="scripted")
    other = workspace_actions.create_team_workspace(alice, "Elsewhere")
    elsewhere = routine(alice, nova, other, name="Elsewhere sweep")
    for url in (
        f"/w/{team_a.id}/agents/{orbit.id}/routines/{hourly.id}/",
        f"/w/{team_a.id}/agents/{nova.id}/routines/{elsewhere.id}/",
        f"/w/{team_a.id}/agents/{nova.id}/routines/{team_a.id}/",
    ):
        assert client.get(url).status_code == 404, url
    assert client.get(f"/w/{other.id}/agents/{nova.id}/routines/{elsewhere.id}/").status_code == 200
    # Its routines elsewhere count towards the ten but are listed where they run.
    html = main(page(client, alice, f"/w/{team_a.id}/agents/{nova.id}/"))
    assert "Elsewhere sweep" not in html and "3 of 10 (1 in other workspaces)" in html
    assert Routine.objects.filter(agent=nova, kind="routine").count() == 3
