"""Form errors people can read, where they belong: the password rules' errors under the new
password (Django puts them on the confirmation), and a bad agent handle in plain words."""

import pytest

pytestmark = pytest.mark.django_db


def field_of(html: str, name: str) -> str:
    """The .field block of the input named NAME (up to the next field, or the form's end)."""
    form = next(f for f in html.split("<form")[1:] if f'name="{name}"' in f).split("</form>")[0]
    return next(b for b in form.split('<div class="field')[1:] if f'name="{name}"' in b)


def test_account_password_rules_show_under_the_new_password(client, alice, team_a):
    client.force_login(alice)
    response = client.post(
        f"/w/{team_a.id}/account/",
        {
            "action": "password",
            "old_password": "wrong-old-password",
            "new_password1": "short",
            "new_password2": "short",
        },
    )
    html = response.content.decode()
    new, confirm = field_of(html, "new_password1"), field_of(html, "new_password2")
    assert "too short" in new and "has-error" in new
    assert "too short" not in confirm and "has-error" not in confirm


def test_signup_password_rules_show_under_the_password_and_a_mismatch_under_its_confirmation(
    client,
):
    short = client.post(
        "/signup/", {"username": "dora", "password1": "short", "password2": "short"}
    ).content.decode()
    assert "too short" in field_of(short, "password1")
    assert "too short" not in field_of(short, "password2")
    mismatch = client.post(
        "/signup/",
        {"username": "dora", "password1": "pw-dora-881234", "password2": "pw-dora-881235"},
    ).content.decode()
    assert "match" not in field_of(mismatch, "password1")
    assert "match" in field_of(mismatch, "password2")
    assert "has-error" in field_of(mismatch, "password2")


def test_a_bad_agent_handle_is_refused_in_plain_words(alice, api):
    response = api(alice).post(
        "/api/v1/agents/", {"name": "Tide bot", "handle": "bad handle!"}, format="json"
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Use letters, digits, - and _ only." in body and "slug" not in body
