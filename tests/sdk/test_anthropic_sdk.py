"""The official Anthropic SDK, pointed at the gateway, works as if it talked to Anthropic."""

import anthropic
import pytest

from conftest import ANTHROPIC_SECRET

MODEL = "claude-haiku-4-5"
MESSAGES = [{"role": "user", "content": "Say hello"}]

# The current SDK sends its api_key as a bearer token; older SDKs and most other Anthropic
# clients send x-api-key. The gateway must accept both.
AUTH_STYLES = ["bearer", "x-api-key"]


def make_client(gateway, key, style):
    headers = {"x-api-key": key, "Authorization": anthropic.Omit()} if style == "x-api-key" else None
    return anthropic.Anthropic(base_url=gateway.gateway_url, api_key=key, default_headers=headers,
                               max_retries=0, timeout=30)


@pytest.fixture(params=AUTH_STYLES)
def client(gateway, request):
    return make_client(gateway, gateway.key, request.param)


def test_messages_create(client, standin):
    msg = client.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert msg.content[0].text == "Hello from stand-in"
    assert msg.model == MODEL
    assert msg.usage.input_tokens == 13
    assert msg.usage.output_tokens == 6
    assert len(standin.to("/v1/messages")) == 1


def test_messages_stream(client, standin):
    with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello from stand-in"
    assert final.content[0].text == "Hello from stand-in"
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 13
    assert final.usage.output_tokens == 6
    (upstream,) = standin.to("/v1/messages")
    assert upstream.json()["stream"] is True


def test_upstream_gets_provider_key_never_tollgate_key(client, gateway, standin):
    client.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
        stream.get_final_message()

    assert len(standin.requests) == 2
    for r in standin.requests:
        assert r.headers.get("x-api-key") == ANTHROPIC_SECRET, r.path
        assert "anthropic-version" in r.headers, r.path
    assert standin.places_containing("tollgate_sk_") == []
    assert standin.places_containing(gateway.key) == []


@pytest.mark.parametrize("style", AUTH_STYLES)
def test_invalid_key_is_401_in_anthropic_shape(gateway, standin, style):
    bad = make_client(gateway, "tollgate_sk_not_a_real_key", style)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert e.value.status_code == 401
    body = e.value.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "unauthorized"
    assert body["error"]["code"] == 401
    assert standin.requests == [], "a rejected request must not reach the provider"
