"""Error pages in a real browser, as a person meets them: Alice leaves a form open in one tab,
logs out and back in in another (which renews her CSRF token), then sends the old form. She gets
the product's page saying what happened and how to go on, not Django's "CSRF verification
failed" page."""

import pytest
from playwright.sync_api import expect

from tests.ui.browser import LAPTOP, MARKS, PASSWORD, PHONE, log_in, person, shot

pytestmark = MARKS


@pytest.fixture
def story(orm):
    return orm(lambda: person("alice", "Alice Martin"))


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_a_form_sent_after_logging_in_again_says_to_reload_it(orm, story, browser, viewport):
    chromium, server = browser
    page = log_in(chromium, server, "alice", viewport=viewport)
    page.goto("/w/new/")
    page.get_by_label("Name").fill("Harbour crew")

    # Another tab: out and in again, which renews the token the open form still carries.
    other = page.context.new_page()
    other.goto("/login/")
    other.request.post(
        f"{server.url}/logout/",
        form={
            "csrfmiddlewaretoken": page.evaluate(
                "() => document.querySelector('meta[name=csrf-token]').content"
            )
        },
    )
    other.goto("/login/")
    other.get_by_label("Username").fill("alice")
    other.get_by_label("Password").fill(PASSWORD)
    other.get_by_role("button", name="Log in").click()
    other.wait_for_url(lambda url: "/login/" not in url)
    other.close()

    page.get_by_role("button", name="Create workspace").click()
    expect(page.get_by_role("heading", name="This form has expired")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("CSRF")
    again = page.get_by_role("link", name="Open the page again")
    assert not page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth")
    shot(page, f"walkthrough-form-expired-{'phone' if viewport == PHONE else 'laptop'}")
    again.click()
    expect(page).to_have_url(f"{server.url}/w/new/")
    page.get_by_label("Name").fill("Harbour crew")
    page.get_by_role("button", name="Create workspace").click()
    expect(page.locator(".flash")).to_contain_text("Harbour crew")
