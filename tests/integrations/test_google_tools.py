"""The Google tools against a local stand-in speaking Gmail's, Calendar's, Drive's, Docs' and
Sheets' REST shapes: Nova, granted them by Alice, works on the account the conversation resolves
to (team A's, else the asking person's); and the email-draft card's buttons send for real."""

import copy
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, transaction

from agntchat.core.exceptions import AppError
from artifacts import actions as artifact_actions
from artifacts import frames
from artifacts.card_library import SEED_TEMPLATES
from artifacts.exceptions import ActionUsed
from conversations import actions as conversation_actions
from conversations.models import Message, Task
from integrations.models import Connection
from tests.concurrency import sessions_waiting_on_me
from tests.conftest import agent_session
from tests.integrations import standin_fixtures
from tests.integrations.google_github_standin import DOC, connect, plain_text
from tests.socket_helpers import agent_communicator, frames_until, next_frame
from tests.waiting import wait_until
from tests.work.tooling import held_message, held_task
from work.actions import set_agent_permission, set_tool_grant
from work.models import ToolCall
from work.tools.registry import REGISTRY

pytestmark = pytest.mark.django_db

TEAM = "ops@team-a.example"
GOOGLE_TOOLS = sorted(name for name, t in REGISTRY.items() if t.connection == "google")


google_api = standin_fixtures.google_api


def grant(owner, agent, *, allow=True):
    """The owner gives AGENT the Google tools and (ALLOW) lets them run without asking."""
    for name in GOOGLE_TOOLS:
        set_tool_grant(owner, agent, REGISTRY[name], True)
        if allow:
            set_agent_permission(owner, agent, REGISTRY[name], "allow")


@pytest.fixture
def team_google(google_api, alice, team_a, nova):
    """Team A's Google account, connected by Alice for the workspace; Nova may use it."""
    google_api.add_token("tok-team", TEAM)
    grant(alice, nova)
    return connect("google", "tok-team", TEAM, workspace=team_a)


def test_the_google_tools_are_granted_not_given_and_writes_ask_first():
    assert GOOGLE_TOOLS == [
        "calendar_create_event", "calendar_list_events", "calendar_update_event",
        "docs_create", "docs_update", "drive_list", "drive_read", "gmail_draft",
        "gmail_read", "gmail_search", "gmail_send", "sheets_update",
    ]  # fmt: skip
    risks = {name: REGISTRY[name].risk for name in GOOGLE_TOOLS}
    reads = {"calendar_list_events", "drive_list", "drive_read", "gmail_read", "gmail_search"}
    assert {n for n, r in risks.items() if r == "read"} == reads
    assert {n for n, r in risks.items() if r == "external"} == set(GOOGLE_TOOLS) - reads
    assert not any(REGISTRY[name].platform for name in GOOGLE_TOOLS)


# ---- Gmail ---------------------------------------------------------------------------------


def test_gmail_draft_saves_an_rfc822_draft_in_the_workspace_account(
    alice, channel, nova, team_google, google_api
):
    held = held_message(nova, channel, alice, "Draft the reply to Ana, please.")
    out = held.output("gmail_draft", {
        "to": "Ana Costa <ana.costa@example.com>", "cc": "finance@example.com",
        "subject": "Re: Q3 numbers — final", "body": "Hi Ana,\n\nAttached: +8% QoQ.\n\nSam",
    })  # fmt: skip
    draft = google_api.draft_email(TEAM, out["draft_id"])
    assert draft["To"] == "Ana Costa <ana.costa@example.com>"
    assert draft["Cc"] == "finance@example.com"
    assert draft["Subject"] == "Re: Q3 numbers — final"
    assert plain_text(draft) == "Hi Ana,\n\nAttached: +8% QoQ.\n\nSam\n"
    assert google_api.sent(TEAM) == []
    (request,) = google_api.requests
    assert (request.method, request.path, request.token) == (
        "POST", "/gmail/v1/users/me/drafts", "tok-team",
    )  # fmt: skip


def test_gmail_search_and_read_give_headers_and_the_plain_text_body(
    alice, channel, nova, team_google, google_api
):
    invoice = google_api.add_message(
        TEAM, sender="Ana <ana@example.com>", to=TEAM, subject="Invoice 42",
        text="Please pay by Friday.\nThanks", html="<p>Please <b>pay</b> by Friday.</p>",
        attachment=("invoice.csv", "item,amount\nwork,100\n"),
    )  # fmt: skip
    google_api.add_message(TEAM, sender="bob@example.com", to=TEAM, subject="Lunch?", text="12?")
    held = held_message(nova, channel, alice)

    found = held.output("gmail_search", {"q": "from:ana invoice", "max": 5})
    assert found["account"] == TEAM
    assert [(m["id"], m["subject"], m["from"]) for m in found["messages"]] == [
        (invoice, "Invoice 42", "Ana <ana@example.com>")
    ]
    assert found["messages"][0]["snippet"] == "Please pay by Friday. Thanks"

    read = held.output("gmail_read", {"id": invoice})
    assert (read["subject"], read["to"], read["from"]) == (
        "Invoice 42",
        TEAM,
        "Ana <ana@example.com>",
    )
    assert read["text"] == "Please pay by Friday.\nThanks"
    assert read["attachments"] == ["invoice.csv"]


def test_gmail_read_of_a_missing_message_says_what_was_not_found(alice, channel, nova, team_google):
    error = held_message(nova, channel, alice).error("gmail_read", {"id": "18c-nope"})
    assert error == {
        "code": "google_not_found",
        "message": f"The message 18c-nope was not found in the Google account {TEAM}.",
    }


def test_gmail_send_sends_a_saved_draft_or_a_new_email(
    alice, channel, nova, team_google, google_api
):
    held = held_message(nova, channel, alice)
    draft = held.output("gmail_draft", {"to": "ana@example.com", "subject": "Hi", "body": "One"})
    sent = held.output("gmail_send", {"draft_id": draft["draft_id"]})
    assert sent["message_id"] == draft["message_id"]
    held.output("gmail_send", {"to": "bob@example.com", "subject": "Two", "body": "Second"})
    assert [(m["To"], m["Subject"]) for m in google_api.sent(TEAM)] == [
        ("ana@example.com", "Hi"), ("bob@example.com", "Two"),
    ]  # fmt: skip
    assert google_api.box(TEAM).drafts == {}
    # Sending a draft that is gone: not found, named.
    again = held.error("gmail_send", {"draft_id": draft["draft_id"]})
    assert again["message"] == (
        f"The draft {draft['draft_id']} was not found in the Google account {TEAM}."
    )
    # Half an email is refused before anything is asked of Google.
    before = len(google_api.requests)
    assert held.error("gmail_send", {"to": "x@example.com"})["code"] == "email_invalid"
    assert len(google_api.requests) == before


def test_sending_mail_waits_for_a_person_by_default(alice, channel, nova, team_a, google_api):
    google_api.add_token("tok-team", TEAM)
    connect("google", "tok-team", TEAM, workspace=team_a)
    grant(alice, nova, allow=False)
    held = held_message(nova, channel, alice)
    answer = held.call("gmail_send", {"to": "ana@example.com", "subject": "Hi", "body": "x"})
    assert not answer.ok and answer.pending is not None
    assert ToolCall.objects.get(tool="gmail_send").status == "waiting"
    # Reading does not ask.
    assert held.output("gmail_search", {"q": "x"})["messages"] == []
    assert [r.path for r in google_api.requests] == ["/gmail/v1/users/me/messages"]


# ---- which account ---------------------------------------------------------------------------


def test_the_same_agent_uses_each_workspaces_account(alice, channel, nova, team_google, google_api):
    # Nova works in team A (its workspace account) and in Alice's personal workspace (hers).
    google_api.add_token("tok-alice", "alice@gmail.example")
    connect("google", "tok-alice", "alice@gmail.example", user=alice)
    personal = alice.owned_workspaces.get(kind="personal")

    in_team = held_message(nova, channel, alice)
    assert in_team.output("gmail_search", {"q": "x"})["account"] == TEAM
    in_team_tokens = google_api.tokens_seen()
    del google_api.requests[:]
    in_personal = held_task(nova, personal, alice, "Check my mail.")
    assert in_personal.output("gmail_search", {"q": "x"})["account"] == "alice@gmail.example"

    assert set(in_team_tokens) == {"tok-team"}
    assert set(google_api.tokens_seen()) == {"tok-alice"}


def test_without_a_workspace_account_each_person_uses_their_own(
    alice, bob, channel, nova, google_api
):
    grant(alice, nova)
    for person, token in ((alice, "tok-alice"), (bob, "tok-bob")):
        google_api.add_token(token, person.email)
        connect("google", token, person.email, user=person)
    asked = held_message(nova, channel, bob, "@nova search my mail").output(
        "gmail_search", {"q": "x"}
    )
    assert asked["account"] == "bob@example.com"
    assert set(google_api.tokens_seen()) == {"tok-bob"}


def test_a_personal_account_serves_only_an_agent_its_person_chose(
    alice, bob, team_a, channel, nova, google_api
):
    """Bob's plain message, handed to Alice's agent by the channel's turn rules, uses no account
    of Bob's (Alice set Nova's tools, and would read the output); neither does work Bob left
    behind when he left the workspace, nor a message from an outside chat stored as him."""
    grant(alice, nova)
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    error = held_message(nova, channel, bob, "Morning all").error("gmail_search", {"q": "x"})
    assert error["code"] == "not_connected"
    left = held_message(nova, channel, bob, "@nova search my mail")
    team_a.memberships.filter(user=bob).delete()
    assert left.error("gmail_search", {"q": "x"})["code"] == "not_connected"
    assert google_api.tokens_seen() == []


def test_a_send_from_a_persons_own_mailbox_is_theirs_to_approve_each_time(
    alice, bob, team_a, channel, nova, google_api
):
    """Bob asks Nova (Alice's agent) to send from his mailbox: Bob decides, not Alice nor an
    admin, and not "always" (a standing allow would cover every member's mailbox)."""
    from work import approvals
    from work.models import PermissionRequest

    grant(alice, nova, allow=False)  # the Google tools ask first
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    held = held_message(nova, channel, bob, "@nova tell my landlord I quit")
    args = {"to": "landlord@example.com", "subject": "Rent", "body": "I quit."}
    assert held.call("gmail_send", args).pending is not None
    request = PermissionRequest.objects.get(call__tool="gmail_send")
    assert approvals.may_decide(bob, request) and not approvals.may_decide(alice, request)
    with pytest.raises(approvals.NotADecider):
        approvals.decide_permission(alice, request, approve=True)
    with pytest.raises(AppError, match="approved each time"):
        approvals.decide_permission(bob, request, approve=True, always=True)
    assert google_api.sent("bob@example.com") == []
    approvals.decide_permission(bob, request, approve=True)
    request.refresh_from_db()
    assert request.status == "approved" and request.decided_by == bob


def test_with_no_account_connected_the_model_is_told_who_should_connect_one(
    alice, channel, nova, google_api
):
    grant(alice, nova)
    error = held_message(nova, channel, alice).error("gmail_search", {"q": "x"})
    assert error["code"] == "not_connected"
    assert "No Google account is connected" in error["message"]
    assert google_api.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_refused_token_turns_into_a_reconnect_message(alice, channel, nova, google_api):
    # Google no longer knows the token (revoked): 401, and there is no refresh token.
    grant(alice, nova)
    connection = connect("google", "tok-revoked", "alice@gmail.example", user=alice)
    error = held_message(nova, channel, alice).error("gmail_search", {"q": "x"})
    assert error["code"] == "reconnect_needed"
    assert "alice@gmail.example needs to be connected again" in error["message"]
    assert "reconnect it in Settings → Connections" in error["message"]
    connection.refresh_from_db()
    assert connection.status == Connection.Status.RECONNECT
    assert google_api.tokens_seen() == ["tok-revoked"]


def test_a_network_failure_says_google_could_not_be_reached(
    alice, channel, nova, team_google, google_api, settings
):
    google_api.stop()
    error = held_message(nova, channel, alice).error("gmail_search", {"q": "x"})
    assert error["code"] == "provider_unreachable"
    assert error["message"].startswith("Could not reach Google")
    google_api.start()  # for the fixture's stop


# ---- Calendar ------------------------------------------------------------------------------


def test_calendar_lists_creates_and_patches_events(alice, channel, nova, team_google, google_api):
    google_api.add_event(TEAM, "Standup", {"dateTime": "2026-03-02T09:00:00+00:00"},
                         {"dateTime": "2026-03-02T09:15:00+00:00"})  # fmt: skip
    google_api.add_event(TEAM, "Later", {"dateTime": "2026-04-01T09:00:00+00:00"},
                         {"dateTime": "2026-04-01T10:00:00+00:00"})  # fmt: skip
    held = held_message(nova, channel, alice)
    listed = held.output("calendar_list_events", {
        "time_min": "2026-03-01T00:00:00Z", "time_max": "2026-03-08T00:00:00Z",
    })  # fmt: skip
    assert [(e["summary"], e["start"]) for e in listed["events"]] == [
        ("Standup", "2026-03-02T09:00:00+00:00")
    ]

    made = held.output("calendar_create_event", {
        "summary": "Q3 review", "start": "2026-03-03T14:00:00+01:00",
        "end": "2026-03-03T15:00:00+01:00", "time_zone": "Europe/Lisbon",
        "attendees": ["ana@example.com"], "location": "Room 2",
    })  # fmt: skip
    event = google_api.box(TEAM).calendars["primary"][made["id"]]
    assert event["start"] == {"dateTime": "2026-03-03T14:00:00+01:00", "timeZone": "Europe/Lisbon"}
    assert event["attendees"] == [{"email": "ana@example.com", "responseStatus": "needsAction"}]
    assert google_api.requests[-1].query["sendUpdates"] == ["all"]

    patched = held.output(
        "calendar_update_event", {"event_id": made["id"], "summary": "Q3 review (moved)"}
    )
    assert google_api.requests[-1].method == "PATCH"
    assert google_api.requests[-1].body == {"summary": "Q3 review (moved)"}
    assert (patched["summary"], event["location"]) == ("Q3 review (moved)", "Room 2")
    assert event["start"]["dateTime"] == "2026-03-03T14:00:00+01:00"


def test_calendar_errors_reach_the_model_as_google_said_them(alice, channel, nova, team_google):
    held = held_message(nova, channel, alice)
    bad = held.error("calendar_create_event", {
        "summary": "x", "start": "2026-03-03T14:00:00+00:00", "end": "2026-03-03T13:00:00+00:00",
    })  # fmt: skip
    assert bad == {
        "code": "google_refused",
        "message": "Google refused (400): The specified time range is empty.",
    }
    missing = held.error("calendar_update_event", {"event_id": "ev-gone", "summary": "y"})
    assert missing["message"] == (
        f"The event ev-gone in calendar primary was not found in the Google account {TEAM}."
    )


# ---- Drive, Docs, Sheets -------------------------------------------------------------------


def test_drive_lists_and_reads_docs_sheets_and_text_files(
    alice, channel, nova, team_google, google_api
):
    doc = google_api.add_doc(TEAM, "Q3 plan", "Goals\nShip the thing.")
    sheet = google_api.add_sheet(TEAM, "Q3 budget", {
        "Summary": [["Item", "Cost"], ["Cloud", "120"], ["Travel", "80"]],
        "Raw": [["x"]],
    })  # fmt: skip
    notes = google_api.add_file(TEAM, "notes.txt", "text/plain", b"plain notes\n")
    google_api.add_file(TEAM, "photo.png", "image/png", b"\x89PNG\r\n\x1a\n\0\0")
    held = held_message(nova, channel, alice)

    listed = held.output("drive_list", {"q": "name contains 'Q3'"})
    assert sorted(f["name"] for f in listed["files"]) == ["Q3 budget", "Q3 plan"]
    assert google_api.requests[-1].query["q"] == ["(name contains 'Q3') and trashed = false"]

    read = held.output("drive_read", {"file_id": doc})
    assert (read["name"], read["mimeType"], read["text"]) == (
        "Q3 plan",
        DOC,
        "Goals\nShip the thing.\n",
    )
    values = held.output("drive_read", {"file_id": sheet})
    assert values["range"] == "Summary!A1:B3"
    assert values["values"] == [["Item", "Cost"], ["Cloud", "120"], ["Travel", "80"]]
    assert held.output("drive_read", {"file_id": sheet, "range": "Raw!A1"})["values"] == [["x"]]
    assert held.output("drive_read", {"file_id": notes})["text"] == "plain notes\n"
    missing = held.error("drive_read", {"file_id": "f-gone"})
    assert missing["message"] == f"The file f-gone was not found in the Google account {TEAM}."


def test_docs_are_created_appended_to_and_replaced(alice, channel, nova, team_google, google_api):
    held = held_message(nova, channel, alice)
    made = held.output("docs_create", {"title": "Minutes", "text": "Present: Ana, Sam"})
    document_id = made["document_id"]
    assert made["url"] == f"https://docs.google.com/document/d/{document_id}/edit"
    docs = google_api.box(TEAM).docs
    assert docs[document_id] == "Present: Ana, Sam\n"
    held.output("docs_update", {"document_id": document_id, "text": "\nDecided: ship."})
    assert docs[document_id] == "Present: Ana, Sam\nDecided: ship.\n"
    held.output("docs_update", {"document_id": document_id, "text": "All new.", "mode": "replace"})
    assert docs[document_id] == "All new.\n"
    # Replacing an empty document inserts only (there is nothing before the final newline).
    empty = held.output("docs_create", {"title": "Empty"})["document_id"]
    held.output("docs_update", {"document_id": empty, "text": "Now text.", "mode": "replace"})
    assert docs[empty] == "Now text.\n"


def test_sheets_update_writes_values_as_typed(alice, channel, nova, team_google, google_api):
    sheet = google_api.add_sheet(TEAM, "Budget", {"Sheet1": [["Item", "Cost"]]})
    held = held_message(nova, channel, alice)
    out = held.output("sheets_update", {
        "spreadsheet_id": sheet, "range": "Sheet1!A2:B4",
        "values": [["Cloud", 120], ["Travel", 80.5], ["Total", "=SUM(B2:B3)"]],
    })  # fmt: skip
    assert out == {"updatedRange": "Sheet1!A2:B4", "updatedRows": 3, "updatedCells": 6}
    assert google_api.requests[-1].query["valueInputOption"] == ["USER_ENTERED"]
    grid = google_api.box(TEAM).sheets[sheet]["Sheet1"]
    assert [grid[(row, 1)] for row in range(4)] == ["Cost", 120, 80.5, "=SUM(B2:B3)"]
    too_big = held.error("sheets_update", {
        "spreadsheet_id": sheet, "range": "Sheet1!A1:A1", "values": [["a", "b"]],
    })  # fmt: skip
    assert too_big["code"] == "google_refused"
    assert "Requested writing within range [Sheet1!A1:A1]" in too_big["message"]


# ---- through the agent socket ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_tool_call_frame_drafts_through_the_socket(alice, channel, nova, google_api):
    await sync_to_async(google_api.add_token)("tok-team", TEAM)
    await sync_to_async(grant)(alice, nova)
    await sync_to_async(connect)("google", "tok-team", TEAM, workspace=channel.workspace)
    comm = agent_communicator(await sync_to_async(agent_session)(nova))
    assert (await comm.connect())[0]
    assert (await next_frame(comm))["type"] == "hello"
    await sync_to_async(conversation_actions.post_message)(alice, channel, "Draft it")
    work = await next_frame(comm)
    await comm.send_json_to({
        "type": "tool.call", "id": work["id"], "callId": "c-draft", "name": "gmail_draft",
        "input": {"to": "ana@example.com", "subject": "Numbers", "body": "Here they are."},
    })  # fmt: skip
    seen = await frames_until(comm, lambda f: f.get("callId") == "c-draft", timeout=10)
    result = seen[-1]
    assert result["type"] == "tool.result" and result["ok"] is True, result
    draft_id = json.loads(result["output"])["draft_id"]
    assert google_api.draft_email(TEAM, draft_id)["Subject"] == "Numbers"
    assert google_api.tokens_seen() == ["tok-team"]
    await comm.disconnect()


# ---- the email-draft card's buttons --------------------------------------------------------


@pytest.fixture
def library(db):
    artifact_actions.seed_card_templates()


def email_card(nova, channel) -> Message:
    card = copy.deepcopy(next(t["sample"] for t in SEED_TEMPLATES if t["name"] == "email_draft"))
    frame = {"type": "card.post", "conversationId": str(channel.id), "card": card}
    return Message.objects.get(pk=frames.post_card(nova, frame)["messageId"])


def click(client, message, action_id):
    return client.post(
        f"/api/v1/messages/{message.id}/card-actions/",
        {"itemIndex": 0, "actionId": action_id},
        format="json",
    )


def test_the_send_button_sends_the_email_as_the_person_who_clicked(
    alice, bob, channel, nova, google_api, library, api
):
    google_api.add_token("tok-bob", "bob@example.com")
    connect("google", "tok-bob", "bob@example.com", user=bob)
    card = email_card(nova, channel)
    sent = click(api(bob), card, "send")
    assert sent.status_code == 200, sent.json()
    (email,) = google_api.sent("bob@example.com")
    assert (email["To"], email["Cc"]) == ("ana.costa@example.com", "finance@example.com")
    assert email["Subject"] == "Re: Q3 planning: numbers before Thursday?"
    assert plain_text(email).startswith("Hi Ana,\n\nThe final Q3 numbers are attached.")
    message_id = next(iter(google_api.box("bob@example.com").messages))
    assert google_api.requests[-1].body["threadId"] == "thr-18c2f0a1"
    card.refresh_from_db()
    assert card.payload["card_outcomes"]["0:send"] == {
        "status": "done", "label": "Sent ✓", "by": str(bob.id),
        "gmail_message_id": message_id, "account": "bob@example.com",
    }  # fmt: skip
    assert sent.json()["work"] is None
    assert 'data-outcome="done" disabled>Sent ✓</button>' in card.payload["card_html"]
    # Nothing for the agent to do, and Send works once.
    assert not Task.objects.exists() and not Message.objects.filter(kind="action").exists()
    assert click(api(alice), card, "send").status_code == 409
    assert len(google_api.sent("bob@example.com")) == 1


def test_save_draft_then_send_sends_that_draft(alice, channel, nova, team_google, google_api,
                                              library, api):  # fmt: skip
    card = email_card(nova, channel)
    saved = click(api(alice), card, "save_draft")
    assert saved.status_code == 200, saved.json()
    assert saved.json()["outcome"]["label"] == "Draft saved ✓"
    draft_id = saved.json()["outcome"]["gmailDraftId"]
    assert google_api.draft_email(TEAM, draft_id)["To"] == "ana.costa@example.com"
    # Saving again updates the same draft; sending sends it, leaving no draft behind.
    assert click(api(alice), card, "save_draft").json()["outcome"]["gmailDraftId"] == draft_id
    assert list(google_api.box(TEAM).drafts) == [draft_id]
    sent = click(api(alice), card, "send")
    assert sent.json()["outcome"]["label"] == "Sent ✓"
    assert google_api.requests[-1].path == "/gmail/v1/users/me/drafts/send"
    assert google_api.box(TEAM).drafts == {}
    assert [m["Subject"] for m in google_api.sent(TEAM)] == [
        "Re: Q3 planning: numbers before Thursday?"
    ]


def test_with_no_google_account_the_buttons_say_connect_one_and_change_nothing(
    alice, channel, nova, google_api, library, api
):
    card = email_card(nova, channel)
    before = (Message.objects.count(), Task.objects.count(), dict(card.payload))
    for action_id, verb in (("send", "send"), ("save_draft", "save a draft")):
        response = click(api(alice), card, action_id)
        assert response.status_code == 409
        error = response.json()["error"]
        assert error["code"] == "not_connected"
        assert error["message"].startswith(f"Connect a Google account to {verb}:")
    card.refresh_from_db()
    assert (Message.objects.count(), Task.objects.count(), card.payload) == before
    assert google_api.requests == []


@pytest.mark.django_db(transaction=True)
def test_two_people_clicking_send_at_once_send_one_email(
    alice, bob, channel, nova, team_google, google_api, library
):
    card = email_card(nova, channel)
    results = []

    def click_send(user):
        try:
            artifact_actions.use_card_action(user, card, 0, "send")
            results.append("sent")
        except ActionUsed:
            results.append("used")
        finally:
            connection.close()

    clickers = [threading.Thread(target=click_send, args=(user,)) for user in (alice, bob)]
    # Both clicks wait on the card's row before either can look at it.
    with transaction.atomic():
        Message.objects.select_for_update().get(pk=card.pk)
        for thread in clickers:
            thread.start()
        wait_until(
            lambda: len(sessions_waiting_on_me()) >= 2, what="both clicks waiting on the lock"
        )
    for thread in clickers:
        thread.join(timeout=20)
    assert sorted(results) == ["sent", "used"]
    assert len(google_api.sent(TEAM)) == 1
