"""Single sign-on through a real OpenID provider (oidc-provider, tests/console/oidc/provider.mjs,
started by tests/console_browser.rs): the browser signs in on the provider's own login form;
the console verifies the ID token and maps its claims to a tenant and a role. An ID token for
another audience, or one already expired, is refused."""

import os
import urllib.request

from conftest import shot

IDP = os.environ["TOLLGATE_IDP_URL"]


def mode(m):
    with urllib.request.urlopen(f"{IDP}/__mode?m={m}", timeout=10) as r:
        assert r.status == 200


def through_provider(page, login):
    page.goto("/console/sign-in")
    page.click("#sso")
    page.wait_for_selector("input[name=login]")
    assert page.url.startswith(IDP), page.url
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    if "/interaction/" in page.url:  # the consent step
        page.click("button[type=submit]")
    page.wait_for_load_state()


def test_sso_signs_in_a_manager(page):
    mode("normal")
    through_provider(page, "manager@example.com")
    page.wait_for_url("**/console/")
    assert page.locator("#role").inner_text() == "manager"
    assert "manager@example.com" in page.locator("#who").inner_text()
    page.goto("/console/keys")
    assert page.locator("#keys").count() == 1
    shot(page, "sso-overview")


def test_sso_auditor_has_no_write_controls(page):
    mode("normal")
    through_provider(page, "auditor@example.com")
    page.wait_for_url("**/console/")
    assert page.locator("#role").inner_text() == "auditor"
    page.goto("/console/receipts")
    assert page.locator("form[method=post]").count() == 1  # sign-out only


def test_wrong_audience_is_refused(page):
    mode("wrong-aud")
    try:
        through_provider(page, "manager@example.com")
        page.wait_for_selector("#sign-in-error")
        text = page.locator("#sign-in-error").inner_text()
        assert "refused" in text and "audience" in text.lower(), text
        assert page.url.split("?")[0].endswith("/console/auth/callback")
        page.goto("/console/keys")
        assert page.url.endswith("/console/sign-in")
    finally:
        mode("normal")


def test_expired_id_token_is_refused(page):
    mode("expired")
    try:
        through_provider(page, "manager@example.com")
        page.wait_for_selector("#sign-in-error")
        text = page.locator("#sign-in-error").inner_text()
        assert "refused" in text and "expired" in text.lower(), text
        page.goto("/console/keys")
        assert page.url.endswith("/console/sign-in")
    finally:
        mode("normal")
