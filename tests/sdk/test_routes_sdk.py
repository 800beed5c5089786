"""A fallback route seen through the official OpenAI SDK with its own retries off
(`max_retries=0`): the first target's credential points at a closed port, the gateway moves on to
the second, and the SDK sees one answer (docs/decisions/routes.md)."""

import openai

from conftest import http, start_gateway, stop_gateway


def test_a_fallback_route_gives_the_sdk_one_answer(standin, tmp_path):
    gw = start_gateway(standin, tmp_path)
    try:
        dead = {"api_key": "sk-dead-credential", "base_url": "http://127.0.0.1:1"}
        status, body = http("PUT", f"{gw.mgmt_url}/v1/providers/openai/credentials/dead", dead, gw.key)
        assert status == 200, body
        route = {"strategy": "fallback", "retries": {"attempts": 2, "backoffMs": 0},
                 "targets": [{"provider": "openai", "credential": "dead", "model": "gpt-4o-mini"},
                             {"provider": "openai", "credential": "default", "model": "gpt-4o-mini"}]}
        status, body = http("PUT", f"{gw.mgmt_url}/v1/routes/sdk-fallback", route, gw.key)
        assert status == 200, body

        client = openai.OpenAI(base_url=gw.gateway_url + "/v1", api_key=gw.key, max_retries=0, timeout=30)
        raw = client.chat.completions.with_raw_response.create(
            model="sdk-fallback", messages=[{"role": "user", "content": "Say hello"}])
        assert raw.headers["x-tollgate-attempts"] == "2"
        r = raw.parse()
        assert r.choices[0].message.content == "Hello from stand-in"
        assert len(standin.to("/v1/chat/completions")) == 1

        status, receipt = http("GET", f"{gw.mgmt_url}/v1/receipts/{raw.headers['x-tollgate-receipt-id']}", key=gw.key)
        assert status == 200, receipt
        assert [(a["credential"], a["outcome"]) for a in receipt["attempts"]] == [("dead", "retry"), ("default", "ok")]
    finally:
        stop_gateway(gw)
