"""The account page's Profile: a person's display name and time zone, validated as the REST
API's PATCH /me is, and only ever the signed-in person's own."""

import pytest
from django.test import Client

from workspaces.models import AuditEntry

pytestmark = pytest.mark.django_db


def account_url(person) -> str:
    return f"/w/{person.memberships.get(workspace__kind='personal').workspace_id}/account/"


def field_of(html: str, name: str) -> str:
    """The .field block of the input or select named NAME (up to the next field)."""
    form = next(f for f in html.split("<form")[1:] if f'name="{name}"' in f).split("</form>")[0]
    return next(b for b in form.split('<div class="field')[1:] if f'name="{name}"' in b)


def signed_in(person) -> Client:
    client = Client()
    client.force_login(person)
    return client


def test_the_page_shows_the_profile_with_the_current_zone_selected(alice):
    alice.display_name, alice.timezone = "Alice A.", "Europe/Lisbon"
    alice.save()
    html = signed_in(alice).get(account_url(alice)).content.decode()
    assert html.index('id="profile-title"') < html.index('id="email-title"')  # at the top
    assert 'value="Alice A."' in field_of(html, "display_name")
    zone = field_of(html, "timezone")
    assert '<option value="Europe/Lisbon" selected>' in zone
    assert zone.count("<option") > 300 and zone.index("Africa/") < zone.index("Europe/")
    assert "autofocus" not in html  # the cursor no longer jumps to the password, further down


def test_saving_changes_the_name_and_zone_and_the_sidebar_shows_the_name(alice):
    page = signed_in(alice)
    saved = page.post(
        account_url(alice),
        {"action": "profile", "display_name": "  Alice Liddell ", "timezone": "Asia/Tokyo"},
    )
    assert saved.status_code == 302 and saved["Location"] == account_url(alice)
    alice.refresh_from_db()
    assert (alice.display_name, alice.timezone) == ("Alice Liddell", "Asia/Tokyo")
    html = page.get(account_url(alice)).content.decode()
    assert "Your profile is saved." in html
    foot = html.split('class="sidebar__foot"')[1]
    assert ">Alice Liddell</a>" in foot
    entry = AuditEntry.objects.get(action="profile.changed")
    assert entry.actor_user == alice and entry.target_label == "Alice Liddell"
    assert entry.details == {"fields": ["display_name", "timezone"]}
    # Saving what is already there changes nothing, and records nothing.
    page.post(
        account_url(alice),
        {"action": "profile", "display_name": "Alice Liddell", "timezone": "Asia/Tokyo"},
    )
    assert AuditEntry.objects.filter(action="profile.changed").count() == 1


@pytest.mark.parametrize(
    "form, field, says",
    [
        (
            {"display_name": "Alice", "timezone": "Mars/Olympus_Mons"},
            "timezone",
            "Unknown time zone.",
        ),
        ({"display_name": "Alice", "timezone": ""}, "timezone", "This field is required."),
        ({"display_name": "x" * 81, "timezone": "Asia/Tokyo"}, "display_name", "at most 80"),
    ],
)
def test_bad_input_is_refused_under_its_field_and_changes_nothing(alice, form, field, says):
    alice.display_name = "Old Name"
    alice.save()
    refused = signed_in(alice).post(account_url(alice), {"action": "profile", **form})
    assert refused.status_code == 200
    html = refused.content.decode()
    block = field_of(html, field)
    assert "has-error" in block and says in block
    assert "Your profile is saved." not in html
    assert ">Old Name</a>" in html.split('class="sidebar__foot"')[1]  # the sidebar as it was
    alice.refresh_from_db()
    assert (alice.display_name, alice.timezone) == ("Old Name", "UTC")
    assert not AuditEntry.objects.filter(action="profile.changed").exists()


def test_the_page_edits_only_the_signed_in_person(alice, bob, team_a):
    """Bob on a page of a workspace he shares with alice (or anyone else's form fields) edits
    bob; without the CSRF token nobody's profile changes."""
    bob_page = signed_in(bob)
    bob_page.post(
        f"/w/{team_a.id}/account/",
        {
            "action": "profile",
            "display_name": "Mallory",
            "timezone": "Asia/Tokyo",
            "user": alice.pk,
        },
    )
    alice.refresh_from_db()
    bob.refresh_from_db()
    assert (alice.display_name, alice.timezone) == ("", "UTC")
    assert (bob.display_name, bob.timezone) == ("Mallory", "Asia/Tokyo")

    forged = Client(enforce_csrf_checks=True)
    forged.force_login(alice)
    refused = forged.post(
        account_url(alice), {"action": "profile", "display_name": "Forged", "timezone": "UTC"}
    )
    assert refused.status_code == 403
    alice.refresh_from_db()
    assert alice.display_name == ""


def test_a_workspace_the_person_is_not_in_is_not_found(alice, charlie, team_b):
    page = signed_in(alice)
    url = f"/w/{team_b.id}/account/"
    assert page.get(url).status_code == 404
    answer = page.post(url, {"action": "profile", "display_name": "Nope", "timezone": "UTC"})
    assert answer.status_code == 404
    alice.refresh_from_db()
    charlie.refresh_from_db()
    assert alice.display_name == "" and charlie.display_name == ""


def test_signed_out_the_page_changes_nothing(alice):
    answer = Client().post(
        account_url(alice), {"action": "profile", "display_name": "Anon", "timezone": "UTC"}
    )
    assert answer.status_code == 302 and "/login/" in answer["Location"]
    alice.refresh_from_db()
    assert alice.display_name == ""
