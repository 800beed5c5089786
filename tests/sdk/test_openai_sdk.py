"""The official OpenAI SDK, pointed at the gateway, works as if it talked to OpenAI."""

import openai
import pytest

from conftest import OPENAI_SECRET

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Say hello"}]


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=gateway.gateway_url + "/v1", api_key=gateway.key, max_retries=0, timeout=30)


def test_chat_completion(client, standin):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert r.choices[0].message.content == "Hello from stand-in"
    assert r.model == MODEL
    assert r.usage.prompt_tokens == 11
    assert r.usage.completion_tokens == 7
    assert len(standin.to("/v1/chat/completions")) == 1


def test_streaming_chat_completion(client, standin):
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello from stand-in"

    (upstream,) = standin.to("/v1/chat/completions")
    body = upstream.json()
    assert body["stream"] is True
    # The client did not ask for usage; the gateway must, or it cannot meter the stream.
    assert (body.get("stream_options") or {}).get("include_usage") is True, body


def test_embeddings(client):
    r = client.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
    assert [d.index for d in r.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in r.data)
    assert r.usage.prompt_tokens == 5


def test_upstream_gets_provider_key_never_tollgate_key(client, gateway, standin):
    client.chat.completions.create(model=MODEL, messages=MESSAGES)
    for _ in client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True):
        pass
    client.embeddings.create(model="text-embedding-3-small", input="one")

    assert len(standin.requests) == 3
    for r in standin.requests:
        assert r.headers.get("authorization") == f"Bearer {OPENAI_SECRET}", r.path
    assert standin.places_containing("tollgate_sk_") == []
    assert standin.places_containing(gateway.key) == []


def test_invalid_key_is_401_in_openai_shape(gateway, standin):
    bad = openai.OpenAI(base_url=gateway.gateway_url + "/v1", api_key="tollgate_sk_not_a_real_key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert e.value.status_code == 401
    error = e.value.response.json()["error"]
    assert error["type"] == "unauthorized"
    assert error["code"] == 401
    assert standin.requests == [], "a rejected request must not reach the provider"
