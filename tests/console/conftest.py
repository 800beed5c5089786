"""Fixtures of the console's browser tests: the running gateway (started by
tests/console_browser.rs, which passes its addresses in the environment), Debian's chromium
through Playwright, and small clients of the gateway and the management API."""

import json
import os
import sqlite3
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import sync_playwright

CONSOLE = os.environ["TOLLGATE_CONSOLE_URL"]
GATEWAY = os.environ["TOLLGATE_GATEWAY_URL"]
MANAGER = os.environ["TOLLGATE_MANAGER_KEY"]
# A manager key of a second tenant (tests/console_browser.rs), where one is made.
OTHER_TENANT_KEY = os.environ.get("TOLLGATE_OTHER_TENANT_KEY", "")
DB = os.environ["TOLLGATE_SQLITE"]
CHROMIUM = os.environ.get("TOLLGATE_CHROMIUM", "/usr/bin/chromium")
SHOTS = os.environ.get("TOLLGATE_CONSOLE_SCREENSHOTS", "")


def call(base, method, path, key=None, body=None, headers=None):
    """One HTTP call: (status, headers, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw, status, hdrs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode(errors="replace")


def api(method, path, key=MANAGER, body=None):
    status, _, out = call(CONSOLE, method, path, key, body)
    assert status < 300, f"{method} {path}: {status} {out}"
    return out


def sql(statement, params=()):
    """Tampering, as an attacker with the database would (the server keeps running)."""
    con = sqlite3.connect(DB, timeout=30)
    try:
        cur = con.execute(statement, params)
        con.commit()
        return cur.rowcount
    finally:
        con.close()


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        # As root (CI), Chromium's sandbox needs user namespaces it may not have.
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture()
def page(browser):
    ctx = browser.new_context(base_url=CONSOLE, viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    dialogs = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors = []
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.dialogs = dialogs
    pg.console_errors = errors
    yield pg
    ctx.close()


def sign_in(pg, key=MANAGER):
    pg.goto("/console/")
    assert pg.url.endswith("/console/sign-in"), pg.url
    pg.fill("#key", key)
    pg.click("button[type=submit]")
    pg.wait_for_url("**/console/")
    return pg


def shot(pg, name):
    if SHOTS:
        pg.screenshot(path=os.path.join(SHOTS, name + ".png"), full_page=False)
