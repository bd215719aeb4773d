"""Routines, the pulse and reminders in a real browser: Alice (in Lisbon) gives Nova a routine
(a bad cron is refused in the server's words), sees its schedule in words and its runs, pauses
it, starts Nova's pulse and changes its checklist, reads a pulse report, and sets a reminder
and cancels it. Database work goes through ``orm`` (tests/ui/browser.py)."""

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from routines import actions
from routines.models import Reminder, Routine
from tests.ui.browser import (
    MARKS,
    PHONE,
    WAIT,
    log_in,
    scroll_to,
    shot,
    tide_lab_in_lisbon,
)

pytestmark = MARKS

LISBON = ZoneInfo("Europe/Lisbon")


@pytest.fixture
def story(orm):
    return orm(tide_lab_in_lisbon)


def run_scheduler(days):
    """The scheduler, as if it next looked DAYS from now (after downtime)."""
    return actions.run_due_routines(now=timezone.now() + timedelta(days=days))


def test_routines_pulse_and_reminders_on_the_agents_page(orm, story, browser):
    team, nova = story
    chromium, server = browser
    alice = log_in(chromium, server, "alice")
    alice.on("dialog", lambda dialog: dialog.accept())  # the "are you sure?" of cancel

    # A routine: a bad cron is refused in the server's words, a good one is listed in words.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    routines = alice.locator("section", has=alice.get_by_role("heading", name="Routines"))
    expect(routines).to_contain_text("No routine here yet.")
    adding = routines.locator("form.add-routine")
    adding.get_by_label("Name").fill("Morning tides")
    adding.get_by_label("Instructions").fill("Post today's high and low water for the harbour.")
    adding.get_by_label("On a cron schedule").check()
    expect(adding.get_by_label("Time zone")).to_have_value("Europe/Lisbon")  # Alice's own
    adding.get_by_label("Cron expression").fill("61 7 * * *")
    adding.get_by_role("button", name="Add routine").click()
    expect(adding.locator("[data-form-error]")).to_contain_text(
        "is not a cron expression", timeout=WAIT
    )
    expect(adding.locator(".field-error")).to_have_text("Not a cron expression.")
    scroll_to(routines.get_by_role("heading", name="Routines"))
    shot(alice, "routines-01-bad-cron")
    adding.get_by_label("Cron expression").fill("30 7 * * 1-5")
    adding.get_by_role("button", name="Add routine").click()
    row = routines.locator("tr[data-routine]", has_text="Morning tides")
    expect(row.locator("[data-schedule]")).to_have_text(
        "At 07:30 AM, Monday through Friday (Europe/Lisbon)", timeout=WAIT
    )
    made = orm(lambda: Routine.objects.get(name="Morning tides"))
    assert (made.cron, made.timezone, made.interval_minutes) == (
        "30 7 * * 1-5",
        "Europe/Lisbon",
        None,
    )
    next_run = made.next_run_at.astimezone(LISBON)
    expect(row.locator("[data-next-run]")).to_have_text(next_run.strftime("%a %-d %b, %H:%M"))
    assert next_run.time() == time(7, 30)
    # A second one, every 45 minutes (the default way), then changed to every two hours.
    adding = routines.locator("form.add-routine")
    routines.get_by_text("Add a routine").click()  # folded away now that there is one
    adding.get_by_label("Instructions").fill("Check the mooring sensors and say if any is off.")
    adding.get_by_label("Every (minutes)").fill("45")
    adding.get_by_role("button", name="Add routine").click()
    sensors = routines.locator("tr[data-routine]", has_text="Check the mooring sensors")
    expect(sensors.locator("[data-schedule]")).to_have_text("Every 45 minutes", timeout=WAIT)
    sensors.get_by_role("button", name="Edit").click()
    editing = routines.locator("tr.routine-edit:visible")
    editing.get_by_label("Name").fill("Mooring sensors")
    editing.get_by_label("Every (minutes)").fill("120")
    editing.get_by_role("button", name="Save routine").click()
    sensors = routines.locator("tr[data-routine]", has_text="Mooring sensors")
    expect(sensors.locator("[data-schedule]")).to_have_text("Every 2 hours", timeout=WAIT)
    scroll_to(routines.get_by_role("heading", name="Routines"))
    shot(alice, "routines-02-added")

    # The scheduler was down for six days: one catch-up run, the missed slots recorded.
    assert orm(run_scheduler, 6) == 2
    row.get_by_role("link", name="Runs of Morning tides").click()
    expect(alice.locator("[data-schedule]")).to_have_text(
        "At 07:30 AM, Monday through Friday (Europe/Lisbon)"
    )
    run = alice.locator("tr[data-run]").first
    expect(run.get_by_role("link", name="Task")).to_be_visible()
    expect(run).to_contain_text("Queued")
    run.locator("summary").click()
    expect(run.locator(".skipped__list li").first).to_contain_text("07:30")
    shot(alice, "routines-03-runs")
    run.get_by_role("link", name="Task").click()
    expect(alice.locator(".pre-wrap").first).to_contain_text("Morning tides")

    # Paused from the agent's page: no next run, and the scheduler leaves it alone.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    alice.get_by_label("Morning tides enabled").uncheck()
    row = alice.locator("tr[data-routine]", has_text="Morning tides")
    expect(row.locator("[data-next-run]")).to_have_text("Paused", timeout=WAIT)
    expect(alice.get_by_label("Morning tides enabled")).not_to_be_checked()
    assert orm(lambda: Routine.objects.get(name="Morning tides").enabled) is False

    # The pulse: a checklist walked once a day, then one more item.
    pulse = alice.locator("section", has=alice.get_by_role("heading", name="Pulse", exact=True))
    starting = pulse.locator("form.add-pulse")
    starting.get_by_label("Checklist").fill("Tide gauge online\n\nHarbour webcam up\n")
    starting.get_by_label("Every (minutes)").fill("1440")
    starting.get_by_role("button", name="Start the pulse").click()
    expect(pulse.locator("[data-checklist] li")).to_have_text(
        ["Tide gauge online", "Harbour webcam up"], timeout=WAIT
    )
    expect(pulse.locator("[data-pulse-schedule]")).to_have_text("Every day")
    pulse.get_by_role("button", name="Edit pulse").click()
    pulse.get_by_label("Checklist").fill(
        "Tide gauge online\nHarbour webcam up\nInvoices due this week"
    )
    pulse.get_by_role("button", name="Save pulse").click()
    expect(pulse.locator("[data-checklist] li")).to_have_count(3, timeout=WAIT)
    the_pulse = orm(lambda: Routine.objects.get(kind="pulse"))
    assert the_pulse.checklist == [
        "Tide gauge online",
        "Harbour webcam up",
        "Invoices due this week",
    ]
    scroll_to(pulse.get_by_role("heading", name="Pulse", exact=True))
    shot(alice, "routines-04-pulse")

    # Its run files a report; the reports page shows each item's outcome.
    def report():
        assert run_scheduler(8) == 2  # the pulse, and Mooring sensors (Morning tides is paused)
        task = the_pulse.runs.get().task
        actions.file_pulse_report(
            the_pulse,
            task,
            [
                {"item": "Tide gauge online", "status": "ok", "finding": "Reading every minute."},
                {
                    "item": "Harbour webcam up",
                    "status": "flagged",
                    "finding": "No picture since 04:10.",
                },
                {
                    "item": "Invoices due this week",
                    "status": "skipped",
                    "finding": "No access to billing.",
                },
            ],
            summary="The webcam is down.",
        )

    orm(report)
    pulse.get_by_role("link", name="Pulse reports").click()
    item = alice.locator(".report-item", has_text="Harbour webcam up")
    expect(item.locator(".outcome")).to_have_text("flagged")
    expect(item).to_contain_text("No picture since 04:10.")
    expect(alice.locator(".report__head").first).to_contain_text("1 flagged")
    shot(alice, "routines-05-pulse-reports")

    # A reminder, set for a date and time read in Lisbon, then cancelled.
    alice.goto(f"/w/{team.id}/agents/{nova.id}/")
    reminders = alice.locator("section", has=alice.get_by_role("heading", name="Reminders"))
    day = (timezone.now() + timedelta(days=10)).astimezone(LISBON).date()
    reminders.get_by_label("Remind me of").fill("Renew the mooring permit")
    reminders.get_by_label("When").fill(f"{day.isoformat()}T09:15")
    reminders.get_by_role("button", name="Set reminder").click()
    item = reminders.locator("[data-reminder]", has_text="Renew the mooring permit")
    expect(item).to_contain_text(f"{day:%a} {day.day} {day:%b %Y}, 09:15", timeout=WAIT)
    expect(item).to_contain_text("set by you")
    made = orm(lambda: Reminder.objects.get())
    assert made.due_at.astimezone(LISBON) == datetime.combine(day, time(9, 15), LISBON)
    scroll_to(reminders.get_by_role("heading", name="Reminders"))
    shot(alice, "routines-06-reminder")
    item.get_by_role("button", name="Cancel reminder").click()
    expect(item).to_have_count(0, timeout=WAIT)
    expect(reminders).to_contain_text("No reminder waiting.")
    assert orm(lambda: Reminder.objects.get().status) == "cancelled"

    # Bob sees Nova's page, and none of this.
    bob = log_in(chromium, server, "bob")
    bob.goto(f"/w/{team.id}/agents/{nova.id}/")
    expect(bob.get_by_role("heading", name="About Nova")).to_be_visible()
    for heading in ("Routines", "Pulse", "Reminders"):
        expect(bob.get_by_role("heading", name=heading, exact=True)).to_have_count(0)

    # On a phone.
    phone = chromium.new_context(
        viewport=PHONE, base_url=server.url, storage_state=alice.context.storage_state()
    ).new_page()
    phone.goto(f"/w/{team.id}/agents/{nova.id}/")
    heading = phone.get_by_role("heading", name="Routines")
    scroll_to(heading)
    shot(phone, "routines-07-phone")
    phone.context.close()
