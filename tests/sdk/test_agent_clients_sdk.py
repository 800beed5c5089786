"""What agent clients call besides chat, through the gateway with the official SDKs (issue 19):
model lists, count_tokens, base URLs with or without /v1, and errors the SDKs raise right."""

import anthropic
import openai
import pytest

from conftest import ANTHROPIC_SECRET, http


def newest_seq(gateway) -> int:
    status, body = http("GET", f"{gateway.mgmt_url}/v1/receipts?limit=1", key=gateway.key)
    assert status == 200, body
    return body["receipts"][0]["seq"] if body["receipts"] else 0


def anthropic_client(gateway, base_suffix=""):
    return anthropic.Anthropic(base_url=gateway.gateway_url + base_suffix, api_key=gateway.key, max_retries=0,
                               timeout=30)


def test_openai_models_list_and_retrieve(gateway, standin):
    client = openai.OpenAI(base_url=f"{gateway.gateway_url}/v1", api_key=gateway.key, max_retries=0)
    before = newest_seq(gateway)
    ids = [m.id for m in client.models.list()]
    assert "gpt-4o-mini" in ids and "claude-haiku-4-5" in ids, ids
    assert ids == sorted(ids)
    m = client.models.retrieve("gpt-4o-mini")
    assert (m.id, m.object, m.owned_by) == ("gpt-4o-mini", "model", "openai")
    assert m.created > 1_700_000_000
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nonexistent")
    assert standin.requests == [], "the list is the gateway's own"
    assert newest_seq(gateway) == before, "model lists leave no receipt"


@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_anthropic_models_list_iterates_to_the_end(gateway, suffix):
    client = anthropic_client(gateway, suffix)
    openai_ids = [m["id"] for m in http("GET", f"{gateway.gateway_url}/v1/models", key=gateway.key)[1]["data"]]
    # Small pages: the SDK's auto-pager must follow after_id = last_id until has_more is false.
    seen = [m.id for m in client.models.list(limit=3)]
    assert seen == openai_ids
    for m in client.models.list(limit=1000):
        assert m.type == "model" and m.display_name and m.created_at.year >= 2025
    info = client.models.retrieve("claude-haiku-4-5")
    assert (info.id, info.type) == ("claude-haiku-4-5", "model")


@pytest.mark.parametrize("suffix", ["", "/v1"])
def test_anthropic_count_tokens_passes_through_without_a_receipt(gateway, standin, suffix):
    client = anthropic_client(gateway, suffix)
    before = newest_seq(gateway)
    counted = client.messages.count_tokens(
        model="claude-haiku-4-5",
        messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                  {"role": "user", "content": "three"}],
        extra_headers={"anthropic-beta": "token-counting-2024-11-01"},
    )
    assert counted.input_tokens == 30
    sent = standin.to("/v1/messages/count_tokens")
    assert len(sent) == 1
    assert sent[0].headers["x-api-key"] == ANTHROPIC_SECRET
    assert sent[0].headers["anthropic-beta"] == "token-counting-2024-11-01"
    assert gateway.key not in str(sent[0].headers)
    assert newest_seq(gateway) == before, "count_tokens is not a model call: no receipt"

    # The beta surface (Claude Code's own client adds `?beta=true`, which passes through too:
    # tests/agent_clients.rs).
    beta = client.beta.messages.count_tokens(model="claude-haiku-4-5", messages=[{"role": "user", "content": "x"}])
    assert beta.input_tokens == 10


def test_messages_through_a_base_url_ending_in_v1(gateway, standin):
    msg = anthropic_client(gateway, "/v1").messages.create(
        model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == "Hello from stand-in"
    assert len(standin.to("/v1/messages")) == 1


def test_anthropic_overloaded_is_raised_as_overloaded(gateway):
    with pytest.raises(anthropic.OverloadedError) as e:
        anthropic_client(gateway).messages.create(
            model="claude-overloaded", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 529
    assert e.value.body["error"]["type"] == "overloaded_error"


def test_a_policy_block_is_not_retried(gateway, standin):
    status, body = http("POST", f"{gateway.mgmt_url}/v1/policies",
                        {"name": "no o1", "yaml": "rules:\n  - {id: no-o1, match: {model: \"o1*\"}, action: deny}\n"},
                        gateway.key)
    assert status == 201, body
    try:
        # With retries on, the SDK would retry a retryable status; x-should-retry: false stops it.
        client = openai.OpenAI(base_url=f"{gateway.gateway_url}/v1", api_key=gateway.key, max_retries=3)
        raw = client.chat.completions.with_raw_response
        with pytest.raises(openai.PermissionDeniedError) as e:
            raw.create(model="o1-mini", messages=[{"role": "user", "content": "hi"}])
        assert e.value.response.headers["x-should-retry"] == "false"
        assert e.value.body["type"] == "policy_denied"
        assert standin.requests == []
    finally:
        http("DELETE", f"{gateway.mgmt_url}/v1/policies/{body['id']}", key=gateway.key)


def test_a_mid_stream_block_is_raised_by_both_sdks(gateway, standin):
    yaml = 'guardrails:\n  applyTo: [response]\n  patterns:\n    - {pattern: "stand-in", action: block, category: test}\n'
    status, body = http("POST", f"{gateway.mgmt_url}/v1/policies", {"name": "no stand-ins", "yaml": yaml}, gateway.key)
    assert status == 201, body
    try:
        client = openai.OpenAI(base_url=f"{gateway.gateway_url}/v1", api_key=gateway.key, max_retries=0)
        got = []
        with pytest.raises(openai.APIError) as e:
            for chunk in client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                                        messages=[{"role": "user", "content": "hi"}]):
                got.extend(c.delta.content or "" for c in chunk.choices)
        assert "stand-in" not in "".join(got)
        assert "guardrail" in str(e.value).lower() or "blocked" in str(e.value).lower(), e.value

        with pytest.raises(anthropic.APIError) as e:
            with anthropic_client(gateway).messages.stream(
                    model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
                text = "".join(s.text_stream)
                assert "stand-in" not in text
        assert "guardrail" in str(e.value).lower() or "blocked" in str(e.value).lower(), e.value
    finally:
        http("DELETE", f"{gateway.mgmt_url}/v1/policies/{body['id']}", key=gateway.key)
