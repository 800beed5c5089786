"""Single sign-on through a real OpenID provider (oidc-provider, tests/console/oidc/provider.mjs,
started by tests/console_browser.rs): the browser signs in on the provider's own login form;
the console verifies the ID token and maps its claims to a tenant and a role. An ID token for
another audience, or one already expired, is refused. A developer's or manager's playground run
goes through the gateway with the session's own key, revoked at sign-out; an auditor's is refused."""

import os
import urllib.request

import pytest

from conftest import CONSOLE, api, shot

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
    # A forged playground run: refused (by the API), and no key is made for the session.
    prompt = api("POST", "/v1/prompts", body={"name": "audited", "content": "Hi"})
    version = api("GET", f"/v1/prompts/{prompt['id']}/versions")[0]["id"]
    token = page.locator("input[name=_csrf]").first.input_value()
    r = page.request.post(CONSOLE + "/console/prompts/run", headers={"Origin": CONSOLE}, form={
        "_csrf": token, "promptId": prompt["id"], "versionId": version, "model": "gpt-4o-mini"})
    assert r.status == 403 and "auditors cannot run prompts" in r.text(), r.text()
    assert not console_keys("auditor@example.com")


def console_keys(subject):
    """The tenant's live keys made for SSO sessions of `subject`."""
    return [k for k in api("GET", "/v1/keys?limit=200")["data"] if k["label"] == "console:" + subject]


def run_prompt(page, prompt_id):
    page.goto(f"/console/prompts?prompt={prompt_id}")
    page.fill("#f-variables", '{"name": "Ada"}')
    page.fill("#f-model", "gpt-4o-mini")
    page.click("form[action='/console/prompts/run'] button[type=submit]")
    page.wait_for_selector("#run-result, #message")
    result = page.locator("#run-result")
    assert result.count() == 1, page.content()
    assert "Hello from stand-in" in result.inner_text(), result.inner_text()


@pytest.mark.parametrize("role", ["developer", "manager"])
def test_sso_playground_runs_with_the_sessions_own_key(page, role):
    mode("normal")
    subject = f"{role}.runner@example.com"
    prompt = api("POST", "/v1/prompts", body={"name": f"sso {role}", "content": "Say hello to {{name}}"})
    through_provider(page, subject)
    page.wait_for_url("**/console/")
    assert page.locator("#role").inner_text() == role
    assert not console_keys(subject)
    run_prompt(page, prompt["id"])
    keys = console_keys(subject)
    assert [k["role"] for k in keys] == [role], keys
    newest = api("GET", "/v1/receipts?kind=model_call&limit=1")["receipts"][0]
    assert newest["actor"] == keys[0]["id"], newest
    assert "tollgate_sk_" not in page.content()
    shot(page, f"sso-playground-{role}")
    # The next run reuses the key.
    run_prompt(page, prompt["id"])
    assert [k["id"] for k in console_keys(subject)] == [keys[0]["id"]]
    assert api("GET", "/v1/receipts?kind=model_call&limit=1")["receipts"][0]["actor"] == keys[0]["id"]
    # Sign-out revokes it.
    page.click("#sign-out")
    page.wait_for_url("**/console/sign-in")
    assert not console_keys(subject)
    revoked = [r for r in api("GET", "/v1/receipts?kind=admin&limit=50")["receipts"]
               if r.get("subject") == keys[0]["id"] and r["model"] == "keys.delete"]
    assert [r["actor"] for r in revoked] == ["sso:" + subject], revoked


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
