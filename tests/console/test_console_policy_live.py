"""Issue 43's console gaps in a real browser: the policy editor checks the YAML as it is typed
(htmx posts it, through the console, to POST /v1/policies/validate) and shows the error at its
line and column before anything is saved; the webhooks page leads to an endpoint's deliveries.

Run by tests/console_browser.rs (`console_live_checks_in_a_browser`) against a gateway of its own
that may call webhook receivers on 127.0.0.1."""

import http.server
import threading
import time

from axe_playwright_python.sync_playwright import Axe

from conftest import api, shot, sign_in

BROKEN = "rules:\n  - id: night\n    action: deny\n    colour: red\n"
FIXED = "rules:\n  - id: night\n    action: deny\n"


def serious(page):
    """axe-core's serious and critical violations on the page as it is now."""
    found = Axe().run(page).response["violations"]
    return [f"{v['id']}: {v['help']}" for v in found if v["impact"] in ("serious", "critical")]


def test_the_policy_editor_checks_as_the_user_types(page):
    refused = []
    page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    sign_in(page)
    page.goto("/console/policies")
    before = len(api("GET", "/v1/policies?limit=200")["data"])
    page.fill("#f-name", "typed live")
    editor, check = page.locator("#f-yaml"), page.locator("#yaml-check")
    assert check.get_attribute("role") == "status" and check.get_attribute("aria-live") == "polite"
    editor.click()
    editor.press_sequentially(BROKEN, delay=5)
    at = page.locator("#yaml-check #check-at")
    at.wait_for(timeout=15000)
    text = at.inner_text()
    assert text.startswith("Line 4, column 5: ") and "colour" in text, text
    # Nothing was submitted: the same page, and no policy stored.
    assert page.url.endswith("/console/policies"), page.url
    assert len(api("GET", "/v1/policies?limit=200")["data"]) == before
    assert not serious(page), serious(page)
    at.scroll_into_view_if_needed()
    shot(page, "policy-live-error")

    editor.fill(FIXED)
    ok = page.locator("#yaml-check #check-ok")
    ok.wait_for(timeout=15000)
    assert ok.inner_text() == "Policy is valid (1 rule)", ok.inner_text()
    assert page.locator("#check-at").count() == 0
    # Every check was answered 200 (the browser's own favicon request aside).
    assert not [r for r in refused if not r.endswith("/favicon.ico")], refused

    # Saved, then the editor of the saved policy checks the same way.
    page.click("section.card button[type=submit]")
    page.wait_for_url("**/console/policies/*")
    editor = page.locator("#f-yaml")
    editor.fill("rules:\n  - id: night\n    action: maybe\n")
    page.locator("#yaml-check #check-at").wait_for(timeout=15000)
    assert page.locator("#check-at").inner_text().startswith("Line 3, column ")
    saved = [p for p in api("GET", "/v1/policies?limit=200")["data"] if p["name"] == "typed live"]
    assert len(saved) == 1 and saved[0]["yaml"].replace("\r\n", "\n") == FIXED, saved


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook endpoint that accepts every delivery."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_webhooks_page_shows_an_endpoints_deliveries(page):
    rx = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=rx.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{rx.server_address[1]}/hook"
        ep = api("POST", "/v1/webhook-endpoints", body={"url": url, "events": ["key.created"]})
        api("POST", "/v1/keys", body={"label": "webhook trigger"})  # a key.created event
        sign_in(page)
        page.goto("/console/webhooks")
        assert not serious(page), serious(page)
        page.get_by_role("link", name=f"Recent deliveries to {url}").click()
        page.wait_for_url(f"**/console/webhooks/{ep['id']}")
        assert page.locator("#endpoint-url").inner_text() == url
        # The sender delivers in the background: reload until the row says so (bounded).
        deadline = time.time() + 30
        row = page.locator("#deliveries tr.delivery").first
        while "delivered" not in (row.inner_text() if row.count() else ""):
            assert time.time() < deadline, page.content()
            time.sleep(0.2)
            page.reload()
        cells = [c.inner_text() for c in row.locator("td").all()]
        assert cells[0].startswith("key.created") and cells[1] == "delivered", cells
        assert cells[2] == "1" and cells[3] == "204" and cells[4] == "", cells
        assert not serious(page), serious(page)
        shot(page, "webhook-deliveries")
        page.set_viewport_size({"width": 390, "height": 844})
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1 and not serious(page), (overflow, serious(page))
        page.select_option("#status", "failed")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**status=failed")
        assert "No delivery failed yet." in page.locator("#deliveries").inner_text()
    finally:
        rx.shutdown()
