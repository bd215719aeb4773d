"""A person's own account. Mail goes only to an address its person proved they read (a signed
link, opened while signed in as them): anyone can sign up with a stranger's address, and the
daily digest would otherwise be the product's mail, aimed at them. Sign-ups per address are
limited. A person changes their password, which signs their other sessions out."""

import time

import pytest
from django.contrib.sessions.models import Session
from django.core import mail, signing
from django.test import Client
from django_q.models import OrmQ

from conversations import actions
from workspaces import accounts
from workspaces.jobs import send_digests
from workspaces.models import AuditEntry, User

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def sent_links() -> list[str]:
    """Run the queued verification jobs, as the worker would; the links they mailed."""
    for queued in OrmQ.objects.all():
        task = queued.task
        queued.delete()
        if task["func"] == "workspaces.accounts.send_verification":
            accounts.send_verification(*task["args"])
    return [
        line.strip()
        for message in mail.outbox
        for line in message.body.splitlines()
        if "/account/verify/" in line
    ]


def test_a_new_address_gets_no_mail_until_its_link_is_opened(alice, team_a, channel, settings):
    settings.AGNTCHAT_URL = "https://chat.example.com"
    browser = Client()
    signed_up = browser.post(
        "/signup/",
        {
            "username": "erin",
            "email": "erin@example.org",
            "password1": "pw-erin-881234",
            "password2": "pw-erin-881234",
        },
    )
    assert signed_up.status_code == 302
    erin = User.objects.get(username="erin")
    assert not erin.email_verified
    team_a.memberships.create(user=erin)
    actions.post_message(alice, channel, "@erin welcome")
    assert send_digests() == 0  # not verified: nothing is mailed

    [link] = sent_links()
    assert link.startswith("https://chat.example.com/account/verify/")
    assert mail.outbox[0].to == ["erin@example.org"]
    path = link.removeprefix("https://chat.example.com")
    # Someone else's session cannot use it; not signed in, it asks to sign in first.
    assert signed_in(alice).get(path).status_code == 302
    assert Client().get(path)["Location"].startswith("/login/")
    erin.refresh_from_db()
    assert not erin.email_verified
    opened = browser.get(path, follow=True)
    assert b"erin@example.org is confirmed" in opened.content
    erin.refresh_from_db()
    assert erin.email_verified and erin.verified_email == "erin@example.org"
    assert AuditEntry.objects.filter(action="email.verified", actor_user=erin).exists()
    assert send_digests() == 1 and mail.outbox[-1].to == ["erin@example.org"]


def test_a_link_for_another_address_a_tampered_or_an_old_one_verifies_nothing(bob, monkeypatch):
    bob.email, bob.verified_email = "bob@new.example.org", ""
    bob.save()
    token = accounts.verification_token(bob)
    for bad, says in (
        (token[:-2] + "xx", "not valid"),
        (accounts.verification_token(User(pk=bob.pk, email="bob@old.example.org")), "no longer"),
    ):
        with pytest.raises(accounts.VerificationInvalid, match=says):
            accounts.verify_email(bob, bad)
    later = time.time() + (accounts.VERIFY_DAYS + 1) * 86400
    monkeypatch.setattr(signing.time, "time", lambda: later)
    with pytest.raises(accounts.VerificationInvalid, match="expired"):
        accounts.verify_email(bob, token)
    bob.refresh_from_db()
    assert not bob.email_verified


def test_verification_emails_and_sign_ups_are_limited(bob, settings):
    settings.VERIFICATION_EMAILS_PER_HOUR = 2
    bob.verified_email = ""
    bob.save()
    page = signed_in(bob)
    url = f"/w/{bob.memberships.get().workspace_id}/account/"
    for _ in range(3):
        answered = page.post(url, {"action": "verify"}, follow=True)
    assert b"Too many verification emails" in answered.content
    assert len(sent_links()) == 2

    settings.SIGNUPS_PER_HOUR_PER_ADDRESS = 1
    form = {"password1": "pw-signup-881234", "password2": "pw-signup-881234"}
    assert Client().post("/signup/", {"username": "one", **form}).status_code == 302
    refused = Client().post("/signup/", {"username": "two", **form})
    assert refused.status_code == 200 and b"Too many sign-ups from your address" in refused.content
    assert not User.objects.filter(username="two").exists()


def test_verification_emails_to_one_address_are_limited_whoever_asks(alice, bob, settings):
    """Bob moving from address to address, or many accounts giving one address, cannot mail a
    stranger more than a few links an hour."""
    settings.VERIFICATION_EMAILS_PER_HOUR_PER_RECIPIENT = 2
    victim = "dana@example.net"
    for person in (alice, bob):
        person.email, person.verified_email = victim, ""
        person.save()
    alice_page, bob_page = signed_in(alice), signed_in(bob)
    alice_url = f"/w/{alice.memberships.get().workspace_id}/account/"
    bob_url = f"/w/{bob.memberships.get().workspace_id}/account/"
    assert b"on its way" in alice_page.post(alice_url, {"action": "verify"}, follow=True).content
    assert b"on its way" in bob_page.post(bob_url, {"action": "verify"}, follow=True).content
    refused = bob_page.post(bob_url, {"action": "verify"}, follow=True)
    assert b"Too many verification emails to this address: try again in" in refused.content
    assert len(sent_links()) == 2 and [m.to for m in mail.outbox] == [[victim], [victim]]
    # The same address written otherwise is the same address.
    bob.email = " Dana@Example.NET"
    bob.save()
    refused = bob_page.post(bob_url, {"action": "verify"}, follow=True)
    assert b"Too many verification emails to this address" in refused.content
    # Another address of bob's is mailed: the limit is the address's, not his.
    bob.email = "bob@elsewhere.example.org"
    bob.save()
    assert b"on its way" in bob_page.post(bob_url, {"action": "verify"}, follow=True).content
    assert len(sent_links()) == 3 and mail.outbox[-1].to == ["bob@elsewhere.example.org"]


def test_a_sign_up_with_an_address_mailed_too_often_says_so(settings):
    settings.VERIFICATION_EMAILS_PER_HOUR_PER_RECIPIENT = 1
    form = {"email": "dana@example.net", "password1": "pw-signup-881234"}
    form["password2"] = form["password1"]
    assert Client().post("/signup/", {"username": "one", **form}).status_code == 302
    second = Client().post("/signup/", {"username": "two", **form}, follow=True)
    assert second.status_code == 200
    assert User.objects.filter(username="two").exists()  # signed up, only not mailed
    assert b"No link was sent to dana@example.net. Too many verification emails" in second.content
    sent_links()
    assert [m.to for m in mail.outbox] == [["dana@example.net"]]


def test_changing_the_password_signs_the_other_sessions_out(alice):
    here, elsewhere = signed_in(alice), signed_in(alice)
    url = f"/w/{alice.memberships.get(workspace__kind='personal').workspace_id}/account/"
    assert b"alice@example.com" in here.get(url).content
    wrong = here.post(
        url,
        {
            "action": "password",
            "old_password": "not-it",
            "new_password1": "a-new-pass-9921",
            "new_password2": "a-new-pass-9921",
        },
    )
    assert wrong.status_code == 200 and b"incorrect" in wrong.content
    changed = here.post(
        url,
        {
            "action": "password",
            "old_password": "pw-alice-123456",
            "new_password1": "a-new-pass-9921",
            "new_password2": "a-new-pass-9921",
        },
        follow=True,
    )
    assert b"Your password is changed" in changed.content
    alice.refresh_from_db()
    assert alice.check_password("a-new-pass-9921")
    assert here.get(url).status_code == 200  # this session goes on
    assert elsewhere.get(url).status_code == 302  # the other one is signed out
    assert Session.objects.count() >= 1
    assert AuditEntry.objects.filter(action="password.changed", actor_user=alice).exists()


def test_changing_the_password_can_revoke_the_api_tokens_the_old_one_made(alice):
    """A token minted with a stolen password outlives the change unless it goes too: offered,
    checked, when the person has any."""
    from workspaces.actions import issue_api_token

    here = signed_in(alice)
    url = f"/w/{alice.memberships.get(workspace__kind='personal').workspace_id}/account/"
    form = {"action": "password", "old_password": "pw-alice-123456"}
    assert b'name="revoke_tokens"' not in here.get(url).content  # none to revoke
    _, kept = issue_api_token(alice, "laptop")
    page = here.get(url).content.decode()
    assert 'name="revoke_tokens" value="1" checked' in page and "my 1 API token " in page
    # Left unchecked: the token stays.
    here.post(url, {**form, "new_password1": "a-new-pass-9921", "new_password2": "a-new-pass-9921"})
    assert Client().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {kept}").status_code == 200
    _, stolen = issue_api_token(alice, "attacker")
    changed = here.post(
        url,
        {
            **form,
            "old_password": "a-new-pass-9921",
            "new_password1": "another-pass-4417",
            "new_password2": "another-pass-4417",
            "revoke_tokens": "1",
        },
        follow=True,
    )
    assert b"and your API tokens revoked" in changed.content
    for token in (kept, stolen):
        assert Client().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    assert AuditEntry.objects.filter(action="api_token.revoked").count() == 2


def test_where_a_person_signed_up_is_theirs_for_the_lockout(settings):
    """Others' failures from elsewhere lock a username from unknown addresses only: the address
    a person signed up from is known from the start (they never typed a password there yet)."""
    settings.LOGIN_FAILURES_PER_USERNAME_ANYWHERE = 3
    form = {"username": "fern", "password1": "pw-fern-881234", "password2": "pw-fern-881234"}
    assert Client().post("/signup/", form, REMOTE_ADDR="198.51.100.30").status_code == 302
    for n in range(3):
        Client().post(
            "/api/v1/auth/token/",
            {"username": "fern", "password": "guess"},
            content_type="application/json",
            REMOTE_ADDR=f"203.0.113.{n}",
        )
    signed_in = Client().post(
        "/api/v1/auth/token/",
        {"username": "fern", "password": "pw-fern-881234"},
        content_type="application/json",
        REMOTE_ADDR="198.51.100.30",
    )
    assert signed_in.status_code == 201, signed_in.content


@pytest.mark.django_db(transaction=True)
def test_changing_the_password_closes_every_live_socket_of_the_person(alice):
    """A stolen session's socket that never pings would have gone on hearing everything until
    its next check; the password change closes it at once (4401)."""
    from asgiref.sync import async_to_sync

    from tests.socket_helpers import live_socket_for, next_frame

    url = f"/w/{alice.memberships.get(workspace__kind='personal').workspace_id}/account/"

    async def scenario():
        from asgiref.sync import sync_to_async

        stolen = await live_socket_for(alice)
        here = Client()
        await sync_to_async(here.force_login)(alice)
        await sync_to_async(here.post)(
            url,
            {
                "action": "password",
                "old_password": "pw-alice-123456",
                "new_password1": "a-new-pass-9921",
                "new_password2": "a-new-pass-9921",
            },
        )
        error = await next_frame(stolen, timeout=15)  # through Redis: slow on a loaded machine
        closed = await stolen.receive_output(timeout=15)
        return error["code"], closed

    code, closed = async_to_sync(scenario)()
    assert code == "unauthorized" and closed == {"type": "websocket.close", "code": 4401}
