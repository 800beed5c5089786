"""Webhook deliveries verified with the official `standardwebhooks` package (the reference
library of the Standard Webhooks spec): a local receiver gets `key.created` and `key.revoked`,
`Webhook(secret).verify(body, headers)` accepts each, refuses a tampered body, and no event
carries the key's secret."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from conftest import http, start_gateway, stop_gateway


class Receiver:
    """A tenant's endpoint on 127.0.0.1: records (headers, raw body) and answers 200."""

    def __init__(self):
        self.got: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, seconds: float = 20) -> list[tuple[dict[str, str], bytes]]:
        until = time.monotonic() + seconds
        while len(self.got) < n and time.monotonic() < until:
            time.sleep(0.05)
        return list(self.got)


@pytest.fixture
def hooked(standin, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    gw = start_gateway(standin, data, {"TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS": "true", "TOLLGATE_WEBHOOK_POLL_MS": "25"})
    rx = Receiver()
    yield gw, rx
    rx.server.shutdown()
    stop_gateway(gw)


def test_deliveries_verify_with_the_official_standardwebhooks_package(hooked):
    gw, rx = hooked
    status, ep = http("POST", f"{gw.mgmt_url}/v1/webhook-endpoints",
                      {"url": rx.url, "events": ["key.created", "key.revoked"]}, gw.key)
    assert status == 201, ep
    secret = ep["secret"]
    assert secret.startswith("whsec_")
    status, listed = http("GET", f"{gw.mgmt_url}/v1/webhook-endpoints", None, gw.key)
    assert status == 200 and "secret" not in listed["data"][0], listed

    status, key = http("POST", f"{gw.mgmt_url}/v1/keys", {"label": "verified"}, gw.key)
    assert status == 201, key
    status, _ = http("DELETE", f"{gw.mgmt_url}/v1/keys/{key['id']}", None, gw.key)
    assert status == 204

    got = rx.wait(2)
    assert len(got) == 2, got
    # Delivery order is not promised (Standard Webhooks: receivers order by timestamp or ignore
    # it); the two events were created in the same second, so read them in creation order.
    got.sort(key=lambda hb: 0 if b'"key.created"' in hb[1] else 1)
    wh = Webhook(secret)
    events = []
    for headers, body in got:
        payload = wh.verify(body, headers)  # raises WebhookVerificationError when the signature is wrong
        assert set(payload) == {"type", "timestamp", "data"}, payload
        assert key["key"] not in body.decode(), "the key's secret is never in an event"
        events.append(payload)
    assert [e["type"] for e in events] == ["key.created", "key.revoked"]
    assert all(e["data"]["keyId"] == key["id"] for e in events)

    headers, body = got[0]
    with pytest.raises(WebhookVerificationError):
        wh.verify(body.replace(b"key.created", b"key.revoked"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(body, headers)
    assert json.loads(body)["data"]["keyId"] == key["id"]
