"""Anthropic, Bedrock and Vertex behind the gateway, driven by the official clients.

The `openai` SDK asks for `claude-…` (Anthropic Messages), `bedrock/<model id>` (Converse,
SigV4, event-stream frames) and `vertex/gemini-…` (generateContent, service-account token):
chat, streamed text, and two parallel tool calls both whole and streamed (accumulated by the
SDK's own `client.chat.completions.stream` helper), and the tool results sent back. Every answer
has a receipt naming the provider that answered, with the stand-in's token counts and the cost
from conf/pricing.yaml. The `anthropic` SDK streams tool_use natively. The Bedrock signature is
recomputed by botocore from the recorded request; the Vertex JWT grant is verified with the
service account's public key (the stand-ins refuse a bad signature or grant, as AWS and Google do).
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import anthropic
import jwt
import openai
import pytest
import yaml
from botocore.eventstream import EventStreamBuffer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import aws_eventstream
from conftest import ANTHROPIC_SECRET, http, start_gateway, stop_gateway
from sigv4_check import recompute, signed_header_names
from standin import AFTER_TOOLS, DELTAS, OVERLOADED, TEXT, THROTTLE, TOOL_ARGS, TOOL_TEXT, USAGE
from standin_cloud import THROTTLED

AKID = "AKIDSTANDINSDKTESTS1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSDKTESTKEY"
AWS_REGION = "us-east-1"
BEDROCK_MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
PROJECT = "tollgate-sdk-tests"
LOCATION = "europe-west4"
SA_EMAIL = f"gateway@{PROJECT}.iam.gserviceaccount.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"

PRICES = yaml.safe_load((Path(__file__).parent.parent.parent / "conf/pricing.yaml").read_text())["models"]

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather and time in Paris?"}]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a time zone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}},
]
EXPECTED_CALLS = [("get_weather", TOOL_ARGS["get_weather"]), ("get_time", TOOL_ARGS["get_time"])]


@dataclass(frozen=True)
class Case:
    provider: str
    model: str  # as the client asks for it

    @property
    def upstream_model(self) -> str:
        return self.model.split("/", 1)[1] if "/" in self.model else self.model

    def upstream_path(self, stream: bool) -> str:
        """The path and query the gateway must call on the provider."""
        if self.provider == "anthropic":
            return "/v1/messages"
        if self.provider == "bedrock":
            return f"/model/{quote(self.upstream_model, safe='')}/converse{'-stream' if stream else ''}"
        op = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/{self.upstream_model}:{op}"

    def system_sent(self, body: dict) -> str:
        if self.provider == "anthropic":
            return body["system"] if isinstance(body["system"], str) else body["system"][0]["text"]
        if self.provider == "bedrock":
            return body["system"][0]["text"]
        return body["systemInstruction"]["parts"][0]["text"]

    def tool_results_sent(self, body: dict) -> list[tuple[str, str]]:
        """(call id or function name, result text) of the tool results in the last turn sent."""
        if self.provider == "anthropic":
            blocks = body["messages"][-1]["content"]
            return [(b["tool_use_id"], _text(b["content"])) for b in blocks if b["type"] == "tool_result"]
        if self.provider == "bedrock":
            blocks = body["messages"][-1]["content"]
            return [(b["toolResult"]["toolUseId"], _text(b["toolResult"]["content"])) for b in blocks if "toolResult" in b]
        parts = body["contents"][-1]["parts"]
        return [(p["functionResponse"]["name"], _text(p["functionResponse"]["response"]["content"]))
                for p in parts if "functionResponse" in p]


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


CASES = [
    Case("anthropic", "claude-haiku-4-5"),
    Case("bedrock", f"bedrock/{BEDROCK_MODEL}"),
    Case("vertex", "vertex/gemini-2.0-flash"),
]


def cost(model: str, prompt: int, completion: int) -> float:
    """conf/pricing.yaml's price: USD per million tokens, rounded to 1e-9 as receipts are."""
    price = PRICES[model.split("/", 1)[1] if model.startswith(("bedrock/", "vertex/")) else model]
    return round((prompt * price["input"] + completion * price["output"]) / 1e6, 9)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service_account(standin) -> tuple[dict, rsa.RSAPrivateKey]:
    """A service-account key file as Google issues it, with a fresh RSA key, trusted by the
    stand-in's token endpoint."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    key_id = secrets.token_hex(20)
    file = {
        "type": "service_account", "project_id": PROJECT, "private_key_id": key_id, "private_key": pem,
        "client_email": SA_EMAIL, "client_id": "109876543210987654321",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": f"{standin.url}/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": f"https://www.googleapis.com/robot/v1/metadata/x509/{quote(SA_EMAIL)}",
        "universe_domain": "googleapis.com",
    }
    standin.trust_service_account(SA_EMAIL, key.public_key(), key_id)
    return file, key


@pytest.fixture(scope="module")
def gateway(standin, service_account, tmp_path_factory):
    """A gateway of its own (its Vertex token cache starts empty) with all four providers on
    the stand-in; named `gateway` so a failure shows its log (conftest.py)."""
    gw = start_gateway(standin, tmp_path_factory.mktemp("tollgate-providers"))
    try:
        add_cloud_providers(gw, standin, service_account[0])
        yield gw
    finally:
        stop_gateway(gw)


def add_cloud_providers(gw, standin, service_account_file: dict):
    """Bedrock and Vertex credentials on the stand-in, as tests/all_providers.rs sets them."""
    standin.trust_aws(AKID, AWS_SECRET, AWS_REGION)
    for provider, body in (
        ("bedrock", {"access_key_id": AKID, "secret_access_key": AWS_SECRET, "region": AWS_REGION,
                     "base_url": standin.url}),
        ("vertex", {"service_account_json": json.dumps(service_account_file), "region": LOCATION,
                    "base_url": standin.url}),
    ):
        status, answer = http("PUT", f"{gw.mgmt_url}/v1/providers/{provider}", body, gw.key)
        assert status == 200, f"PUT /v1/providers/{provider}: {status} {answer}"


class ReceiptIds:
    """The `x-tollgate-receipt-id` of every answer a client received (an httpx response hook,
    so it sees streamed answers too, before their bodies are read)."""

    def __init__(self):
        self.ids: list[str | None] = []

    def hook(self, response):
        self.ids.append(response.headers.get("x-tollgate-receipt-id"))


@pytest.fixture
def receipts():
    return ReceiptIds()


@pytest.fixture
def client(gateway, receipts):
    http_client = openai.DefaultHttpxClient(event_hooks={"response": [receipts.hook]})
    return openai.OpenAI(base_url=gateway.gateway_url + "/v1", api_key=gateway.key, max_retries=0, timeout=30,
                         http_client=http_client)


def upstream_calls(standin) -> list:
    """What the gateway sent to the providers in this test (token grants aside)."""
    return [r for r in standin.requests if urlsplit(r.path).path != "/token"]


def the_upstream_call(standin):
    """The one call the gateway sent upstream for this test's one request (none resent)."""
    calls = upstream_calls(standin)
    assert len(calls) == 1, "expected one upstream call, got: " + "; ".join(map(str, calls))
    return calls[0]


def check_receipt(gateway, receipts: ReceiptIds, case_provider: str, model: str, tokens: tuple[int, int]):
    """The last answer's receipt: the provider that answered, its token counts, its price."""
    receipt_id = receipts.ids[-1]
    assert receipt_id, "every answer to a valid key carries x-tollgate-receipt-id"
    status, rc = http("GET", f"{gateway.mgmt_url}/v1/receipts/{receipt_id}", key=gateway.key)
    assert status == 200, rc
    assert (rc["provider"], rc["model"], rc["upstreamStatus"]) == (case_provider, model, "ok"), rc
    assert (rc["promptTokens"], rc["completionTokens"]) == tokens, rc
    assert rc["costUsd"] == pytest.approx(cost(model, *tokens), abs=1e-9), rc
    assert rc["costUsd"] > 0, rc
    assert rc["verified"] is True, rc


# --- the openai SDK on each provider --------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_chat(case, client, gateway, standin, receipts):
    r = client.chat.completions.create(model=case.model, messages=MESSAGES)
    choice = r.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", TEXT, "stop")
    assert choice.message.tool_calls is None
    tokens = USAGE[case.provider]["text"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (*tokens, sum(tokens))

    sent = the_upstream_call(standin)
    assert sent.path == case.upstream_path(stream=False)
    assert case.system_sent(sent.json()) == "Be brief."
    check_receipt(gateway, receipts, case.provider, case.model, tokens)


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_streamed_text(case, client, gateway, standin, receipts):
    stream = client.chat.completions.create(model=case.model, messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    # Asked for: the last chunk carries the usage and no choices.
    tokens = USAGE[case.provider]["text"]
    assert (chunks[-1].choices, chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == ([], *tokens)

    sent = the_upstream_call(standin)
    assert sent.path == case.upstream_path(stream=True)
    check_receipt(gateway, receipts, case.provider, case.model, tokens)


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_streamed_text_without_usage_asked(case, client, gateway, receipts):
    """The gateway meters the stream all the same, but shows no usage chunk nobody asked for."""
    chunks = list(client.chat.completions.create(model=case.model, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    check_receipt(gateway, receipts, case.provider, case.model, USAGE[case.provider]["text"])


def _check_calls(message):
    calls = message.tool_calls
    assert [(c.type, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("function", name, args) for name, args in EXPECTED_CALLS]
    ids = [c.id for c in calls]
    assert all(ids) and len(set(ids)) == 2, ids


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_tool_calls(case, client, gateway, standin, receipts):
    r = client.chat.completions.create(model=case.model, messages=MESSAGES, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == TOOL_TEXT
    _check_calls(choice.message)
    tokens = USAGE[case.provider]["tools"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == tokens
    check_receipt(gateway, receipts, case.provider, case.model, tokens)


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_streamed_parallel_tool_calls_accumulate(case, client, gateway, standin, receipts):
    """The SDK's accumulating helper: two parallel calls, streamed, come out whole."""
    with client.chat.completions.stream(model=case.model, messages=MESSAGES, tools=TOOLS,
                                        stream_options={"include_usage": True}) as stream:
        events = list(stream)
        final = stream.get_final_completion()

    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == TOOL_TEXT
    _check_calls(choice.message)
    done = [(e.index, e.name, json.loads(e.arguments)) for e in events
            if e.type == "tool_calls.function.arguments.done"]
    assert done == [(i, name, args) for i, (name, args) in enumerate(EXPECTED_CALLS)]
    assert [e.content for e in events if e.type == "content.done"] == [TOOL_TEXT]
    tokens = USAGE[case.provider]["tools"]
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == tokens

    sent = the_upstream_call(standin)
    assert sent.path == case.upstream_path(stream=True)
    check_receipt(gateway, receipts, case.provider, case.model, tokens)


@pytest.mark.parametrize("case", CASES, ids=[c.provider for c in CASES])
def test_tool_results_go_back(case, client, gateway, standin, receipts):
    """The usual loop: the SDK's assistant message and the tools' results sent back as they are."""
    first = client.chat.completions.create(model=case.model, messages=MESSAGES, tools=TOOLS).choices[0].message
    results = {"get_weather": "18 C, sunny", "get_time": "14:05"}
    history = MESSAGES + [first.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": results[c.function.name]} for c in first.tool_calls]
    r = client.chat.completions.create(model=case.model, messages=history, tools=TOOLS)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (AFTER_TOOLS, "stop")

    sent = upstream_calls(standin)[-1].json()
    # Anthropic and Bedrock take the call ids back; Gemini names the function instead.
    key = (lambda c: c.function.name) if case.provider == "vertex" else (lambda c: c.id)
    assert case.tool_results_sent(sent) == [(key(c), results[c.function.name]) for c in first.tool_calls]
    check_receipt(gateway, receipts, case.provider, case.model, USAGE[case.provider]["text"])


# --- the anthropic SDK, native --------------------------------------------------------------

ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


@pytest.fixture
def anthropic_client(gateway, receipts):
    http_client = anthropic.DefaultHttpxClient(event_hooks={"response": [receipts.hook]})
    return anthropic.Anthropic(base_url=gateway.gateway_url, api_key=gateway.key, max_retries=0, timeout=30,
                               http_client=http_client)


def _check_tool_use(message):
    assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
    assert message.content[0].text == TOOL_TEXT
    assert [(b.name, b.input) for b in message.content[1:]] == EXPECTED_CALLS
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == USAGE["anthropic"]["tools"]


def test_anthropic_sdk_tool_use(anthropic_client, gateway, standin, receipts):
    message = anthropic_client.messages.create(model="claude-haiku-4-5", max_tokens=256, tools=ANTHROPIC_TOOLS,
                                               messages=MESSAGES[1:])
    _check_tool_use(message)
    sent = the_upstream_call(standin)
    assert [t["name"] for t in sent.json()["tools"]] == ["get_weather", "get_time"], "passed through"
    assert sent.headers["x-api-key"] == ANTHROPIC_SECRET
    check_receipt(gateway, receipts, "anthropic", "claude-haiku-4-5", USAGE["anthropic"]["tools"])


def test_anthropic_sdk_streams_tool_use(anthropic_client, gateway, standin, receipts):
    with anthropic_client.messages.stream(model="claude-haiku-4-5", max_tokens=256, tools=ANTHROPIC_TOOLS,
                                          messages=MESSAGES[1:]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    _check_tool_use(final)
    # The SDK rebuilt each input from its input_json_delta pieces.
    snapshots = [e.snapshot for e in events if e.type == "input_json"]
    assert snapshots[-1] == TOOL_ARGS["get_time"], snapshots
    stopped = [e.content_block for e in events if e.type == "content_block_stop"]
    assert [(b.type, getattr(b, "input", None)) for b in stopped] == [("text", None)] + [
        ("tool_use", args) for _, args in EXPECTED_CALLS]
    sent = the_upstream_call(standin)
    assert sent.json()["stream"] is True
    check_receipt(gateway, receipts, "anthropic", "claude-haiku-4-5", USAGE["anthropic"]["tools"])


# --- Bedrock: the signature, as botocore computes it ------------------------------------------


def test_bedrock_sigv4_is_botocores(client, gateway, standin):
    model = f"bedrock/{BEDROCK_MODEL}"
    client.chat.completions.create(model=model, messages=MESSAGES)
    for _ in client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, stream=True):
        pass

    sent = upstream_calls(standin)
    assert [r.path for r in sent] == [Case("bedrock", model).upstream_path(s) for s in (False, True)]
    for r in sent:
        authorization = r.headers["authorization"]
        date = r.headers["x-amz-date"]
        assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={AKID}/{date[:8]}/{AWS_REGION}/bedrock/"
                                        "aws4_request, "), authorization
        want = recompute(r.method, standin.url + r.path, r.headers, r.body, AKID, AWS_SECRET, AWS_REGION)
        assert authorization == want
        # What AWS checks covers the host, the body type and what is asked back.
        assert {"host", "x-amz-date", "content-type", "accept"} <= signed_header_names(authorization)
        assert AWS_SECRET not in json.dumps(r.headers) and gateway.key not in json.dumps(r.headers)
    assert standin.places_containing(gateway.key) == []


def test_bedrock_standin_refuses_a_bad_signature(client, standin):
    """The stand-in checks signatures as AWS does, so every Bedrock answer above proves one."""
    client.chat.completions.create(model=f"bedrock/{BEDROCK_MODEL}", messages=MESSAGES)
    r = the_upstream_call(standin)
    tampered = r.body.replace(b"Be brief.", b"Be long..")
    headers = {k: v for k, v in r.headers.items() if k not in ("host", "content-length")}
    status, body = _post(standin.url + r.path, tampered, headers)
    assert status == 403 and "signature" in body["message"], body


def _openai_broken_stream(client):
    """The translated Bedrock stream: a `throttlingException` frame after the first delta."""
    stream = client.chat.completions.create(model=f"bedrock/{BEDROCK_MODEL}", stream=True,
                                            messages=[{"role": "user", "content": THROTTLE}])
    text = []
    with pytest.raises(openai.APIError) as e:
        for chunk in stream:
            text += [c.delta.content or "" for c in chunk.choices]
    # Ended by an error event, which the SDK raises (no `[DONE]`: the answer is not complete).
    assert "".join(text) == DELTAS[0]
    assert THROTTLED in e.value.message


def _anthropic_broken_stream(client):
    """Native Anthropic: an `overloaded_error` event after the first delta."""
    text = []
    with pytest.raises(anthropic.APIError) as e:
        with client.messages.stream(model="claude-haiku-4-5", max_tokens=64,
                                    messages=[{"role": "user", "content": OVERLOADED}]) as stream:
            for t in stream.text_stream:
                text.append(t)
    assert "".join(text) == DELTAS[0]
    assert "Overloaded" in str(e.value)


def _bedrock_native_broken_stream(gw):
    """Native Bedrock `converse-stream`: the exception frame passes through as it came."""
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": THROTTLE}]}]}).encode()
    url = f"{gw.gateway_url}/bedrock/model/{quote(BEDROCK_MODEL, safe='')}/converse-stream"
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {gw.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        receipt_id, data = r.headers["x-tollgate-receipt-id"], r.read()
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    assert [m.headers[":message-type"] for m in buffer][-1] == "exception"
    return receipt_id


BROKEN_STREAMS = {
    "bedrock-translated": ("bedrock", f"bedrock/{BEDROCK_MODEL}"),
    "anthropic-native": ("anthropic", "claude-haiku-4-5"),
    "bedrock-native": ("bedrock", BEDROCK_MODEL),
}


@pytest.mark.parametrize("kind", list(BROKEN_STREAMS))
def test_a_stream_the_provider_broke_off_is_an_upstream_error_and_not_cached(
        kind, standin, service_account, tmp_path_factory):
    """A stream the provider ended with an error after it began: the client's SDK raises it, the
    receipt says the upstream failed (`UPSTREAM: FAIL`, `upstreamStatus: error`, as for an error
    status), and with the answer cache on, asking again goes to the provider again rather than
    replaying the failure. (Found by these tests: both were `ok`, and the failure was cached.)"""
    gw = start_gateway(standin, tmp_path_factory.mktemp("tollgate-cache"))
    try:
        add_cloud_providers(gw, standin, service_account[0])
        policy = {"name": "cache", "enabled": True, "yaml": "cache: {mode: exact, ttlSeconds: 600}\n"}
        status, answer = http("POST", f"{gw.mgmt_url}/v1/policies", policy, gw.key)
        assert status == 201, answer
        ids = ReceiptIds()
        hooks = {"response": [ids.hook]}
        for _ in range(2):
            if kind == "bedrock-translated":
                _openai_broken_stream(openai.OpenAI(
                    base_url=gw.gateway_url + "/v1", api_key=gw.key, max_retries=0, timeout=30,
                    http_client=openai.DefaultHttpxClient(event_hooks=hooks)))
            elif kind == "anthropic-native":
                _anthropic_broken_stream(anthropic.Anthropic(
                    base_url=gw.gateway_url, api_key=gw.key, max_retries=0, timeout=30,
                    http_client=anthropic.DefaultHttpxClient(event_hooks=hooks)))
            else:
                ids.ids.append(_bedrock_native_broken_stream(gw))
        assert len(upstream_calls(standin)) == 2, "the broken stream was replayed from the cache"
        provider, model = BROKEN_STREAMS[kind]
        for receipt_id in ids.ids:
            _, rc = http("GET", f"{gw.mgmt_url}/v1/receipts/{receipt_id}", key=gw.key)
            checks = {c["name"]: c["result"] for c in rc["checks"]}
            assert (rc["provider"], rc["model"]) == (provider, model), rc
            assert (checks["UPSTREAM"], rc["upstreamStatus"]) == ("FAIL", "error"), rc
            assert checks.get("CACHE", "MISS") == "MISS", rc
    finally:
        stop_gateway(gw)


def test_standin_frames_decode_with_botocore():
    """The stand-in's event-stream encoder, read back by botocore's decoder (as boto3 reads it)."""
    want = [("messageStart", {"role": "assistant"}), ("contentBlockDelta", {"contentBlockIndex": 0,
            "delta": {"text": "héllo"}}), ("metadata", {"usage": {"inputTokens": 1, "outputTokens": 2}})]
    data = b"".join(aws_eventstream.event(name, body) for name, body in want)
    data += aws_eventstream.exception("throttlingException", {"message": "slow down"})
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    got = [(m.headers[":message-type"], m.headers.get(":event-type") or m.headers[":exception-type"],
            json.loads(m.payload)) for m in buffer]
    assert got == [("event", n, b) for n, b in want] + [("exception", "throttlingException", {"message": "slow down"})]


def test_standin_frames_are_the_rust_codecs_bytes():
    """Written independently of the Rust codec (aws_eventstream.py), the stand-in's frames for the
    golden events are byte for byte the ones `aws-smithy-eventstream` wrote (the committed file)."""
    golden = Path(__file__).parent.parent / "fixtures/translate/converse/stream"
    events = [json.loads(line) for line in (golden / "two_tool_calls.events.jsonl").read_text().splitlines()]
    frames = b"".join(aws_eventstream.event(*next(iter(e.items()))) for e in events)
    assert frames == (golden / "two_tool_calls.eventstream").read_bytes()


# --- Vertex: the JWT-bearer grant ------------------------------------------------------------


def test_vertex_token_is_a_verified_jwt_grant(client, standin, service_account):
    client.chat.completions.create(model="vertex/gemini-2.0-flash", messages=MESSAGES)
    file, key = service_account
    grants = [g for g in standin.grants if g.claims["iss"] == SA_EMAIL]
    # One token for every Vertex call of this module's gateway: it is cached.
    assert len(grants) == 1, [g.claims for g in grants]
    (grant,) = grants
    # Verified again here, independently of the stand-in, with the key file's public key.
    claims = jwt.decode(grant.assertion, key.public_key(), algorithms=["RS256"], audience=file["token_uri"],
                        issuer=SA_EMAIL, options={"require": ["iss", "aud", "iat", "exp", "scope"]})
    assert CLOUD_PLATFORM in claims["scope"].split()
    assert 0 < claims["exp"] - claims["iat"] <= 3600
    header = jwt.get_unverified_header(grant.assertion)
    assert (header["alg"], header.get("kid")) == ("RS256", file["private_key_id"])
    sent = the_upstream_call(standin)
    assert sent.headers["authorization"] == f"Bearer {grant.token}"


def test_vertex_token_endpoint_refuses_a_forged_grant(standin, service_account):
    """The stand-in's check is real: the same claims signed with another key are refused."""
    file, _ = service_account
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = {"iss": SA_EMAIL, "aud": file["token_uri"], "scope": CLOUD_PLATFORM, "iat": 1, "exp": 2**31}
    forged = jwt.encode(claims, other, algorithm="RS256", headers={"kid": file["private_key_id"]})
    form = f"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={forged}".encode()
    status, body = _post(file["token_uri"], form, {"content-type": "application/x-www-form-urlencoded"})
    assert (status, body["error"]) == (400, "invalid_grant"), body


def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
