"""The official OpenAI SDK's Responses API through the gateway: creates (plain, streamed, with a
function tool) are model calls with one receipt each; retrieve, input items, token counts and
delete pass through with none; a stored response is its tenant's alone; a guardrail block
mid-stream makes the SDK raise."""

from __future__ import annotations

import json
import os
import subprocess
import time

import openai
import pytest

from conftest import OPENAI_SECRET, http
from standin import TEXT
from standin_responses import INPUT_TOKENS, OUTPUT_TOKENS

MODEL = "gpt-4o-mini"
# gpt-4o-mini in the price table: $0.15 / $0.60 per million input / output tokens.
COST = (INPUT_TOKENS * 0.15 + OUTPUT_TOKENS * 0.60) / 1e6
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                         "additionalProperties": False},
          "strict": True}]


def sdk(gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.gateway_url + "/v1", api_key=key, max_retries=0, timeout=30)


@pytest.fixture
def client(gateway):
    return sdk(gateway, gateway.key)


def receipt(gateway, receipt_id: str, key: str | None = None) -> dict:
    status, body = http("GET", f"{gateway.mgmt_url}/v1/receipts/{receipt_id}", key=key or gateway.key)
    assert status == 200, body
    return body


def newest_seq(gateway, key: str) -> int:
    status, body = http("GET", f"{gateway.mgmt_url}/v1/receipts?limit=1", key=key)
    assert status == 200, body
    return body["receipts"][0]["seq"] if body["receipts"] else 0


def assert_billed(r: dict):
    assert r["kind"] == "model_call", r
    assert (r["provider"], r["model"]) == ("openai", MODEL)
    assert (r["promptTokens"], r["completionTokens"]) == (INPUT_TOKENS, OUTPUT_TOKENS)
    assert r["costUsd"] == pytest.approx(COST, abs=1e-15)
    assert r["upstreamStatus"] == "ok"


def new_tenant(gateway, standin, name: str) -> str:
    """Another tenant, made with the CLI on the running gateway's data, whose openai credential
    points at the same stand-in; returns its key once the gateway serves it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    env["TOLLGATE_DATA_DIR"] = str(gateway.dir)
    out = subprocess.run([os.environ["TOLLGATE_BIN"], "tenant", "create", "--name", name, "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    key = json.loads(out.stdout)["key"]
    deadline = time.monotonic() + 15
    while http("GET", f"{gateway.mgmt_url}/v1/keys", key=key)[0] != 200:
        assert time.monotonic() < deadline, "the new tenant's key never arrived"
        time.sleep(0.05)
    status, body = http("PUT", f"{gateway.mgmt_url}/v1/providers/openai",
                        {"api_key": OPENAI_SECRET, "base_url": standin.url}, key)
    assert status == 200, body
    while http("POST", f"{gateway.gateway_url}/v1/responses/input_tokens", {"model": MODEL, "input": "x"}, key)[0] != 200:
        assert time.monotonic() < deadline, "the new tenant's credential never arrived"
        time.sleep(0.05)
    return key


@pytest.fixture(scope="module")
def other_key(gateway, standin):
    return new_tenant(gateway, standin, "responses-other")


def test_create(client, gateway, standin):
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello")
    r = raw.parse()
    assert r.id.startswith("resp_")
    assert r.output_text == TEXT
    assert (r.usage.input_tokens, r.usage.output_tokens) == (INPUT_TOKENS, OUTPUT_TOKENS)
    assert_billed(receipt(gateway, raw.headers["x-tollgate-receipt-id"]))
    (up,) = standin.to("/v1/responses")
    assert up.headers["authorization"] == f"Bearer {OPENAI_SECRET}"
    assert standin.places_containing(gateway.key) == []


def test_streamed_create(client, gateway):
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello", stream=True)
    events = list(raw.parse())
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT
    assert events[-1].response.usage.output_tokens == OUTPUT_TOKENS
    assert_billed(receipt(gateway, raw.headers["x-tollgate-receipt-id"]))


def test_stream_helper_accumulates_the_final_response(client, gateway):
    seq = newest_seq(gateway, gateway.key)
    with client.responses.stream(model=MODEL, input="Say hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == TEXT
    assert final.output_text == TEXT
    assert newest_seq(gateway, gateway.key) == seq + 1, "one receipt per create"


def test_function_tool(client, gateway):
    raw = client.responses.with_raw_response.create(model=MODEL, input="TOOLS", tools=TOOLS)
    r = raw.parse()
    (call,) = r.output
    assert (call.type, call.name) == ("function_call", "get_weather")
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert_billed(receipt(gateway, raw.headers["x-tollgate-receipt-id"]))

    # The result goes back chained to the call.
    follow = client.responses.create(model=MODEL, previous_response_id=r.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}])
    assert follow.output_text == 'tool said {"temp": 21}.'

    with client.responses.stream(model=MODEL, input="TOOLS", tools=TOOLS) as stream:
        args = "".join(e.delta for e in stream if e.type == "response.function_call_arguments.delta")
        final = stream.get_final_response()
    assert json.loads(args) == {"city": "Paris"}
    assert final.output[0].type == "function_call"
    assert final.output[0].call_id


def test_retrieve_and_the_other_reads_leave_no_receipt(client, gateway, standin):
    r = client.responses.create(model=MODEL, input="Say hello")
    seq = newest_seq(gateway, gateway.key)

    got = client.responses.retrieve(r.id)
    assert (got.id, got.output_text) == (r.id, TEXT)
    items = client.responses.input_items.list(r.id)
    assert items.data[0].content[0].text == "Say hello"
    count = client.responses.input_tokens.count(model=MODEL, input="Say hello")
    assert count.input_tokens > 0
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)  # the provider's 404: it is gone

    assert newest_seq(gateway, gateway.key) == seq, "reads, counts and deletes are not billed"
    assert [(q.method, q.path.split("?")[0]) for q in standin.requests[-5:]] == [
        ("GET", f"/v1/responses/{r.id}"), ("GET", f"/v1/responses/{r.id}/input_items"),
        ("POST", "/v1/responses/input_tokens"), ("DELETE", f"/v1/responses/{r.id}"),
        ("GET", f"/v1/responses/{r.id}")]


def test_another_tenant_cannot_retrieve_delete_or_chain(client, gateway, standin, other_key):
    mine = client.responses.create(model=MODEL, input="mine")
    theirs = sdk(gateway, other_key)
    standin.clear()
    attempts = {
        "retrieve": lambda: theirs.responses.retrieve(mine.id),
        "delete": lambda: theirs.responses.delete(mine.id),
        "input_items": lambda: theirs.responses.input_items.list(mine.id),
        "chain": lambda: theirs.responses.create(model=MODEL, input="x", previous_response_id=mine.id),
        "stream chain": lambda: list(theirs.responses.create(model=MODEL, input="x", stream=True,
                                                              previous_response_id=mine.id)),
    }
    for name, attempt in attempts.items():
        with pytest.raises(openai.NotFoundError) as e:
            attempt()
        assert e.value.status_code == 404, name
        assert e.value.body["type"] == "not_found", (name, e.value.body)
    assert standin.requests == [], "none of them reached the provider"
    assert client.responses.retrieve(mine.id).id == mine.id, "the owner still can"


def test_a_guardrail_block_mid_stream_makes_the_sdk_raise(gateway, standin):
    key = new_tenant(gateway, standin, "responses-guarded")
    yaml = "guardrails:\n  applyTo: [response]\n  pii:\n    email: block\n"
    status, body = http("POST", f"{gateway.mgmt_url}/v1/policies", {"name": "p", "enabled": True, "yaml": yaml}, key)
    assert status == 201, body
    guarded = sdk(gateway, key)
    seen = []
    with pytest.raises(openai.APIError) as e:
        for event in guarded.responses.create(model=MODEL, input="ECHO:write to bob|@example.com now", stream=True):
            seen.append(event)
    assert "guardrail" in e.value.message
    assert not any(getattr(ev, "delta", "") and "example" in ev.delta for ev in seen)
    assert seen and seen[0].type == "response.created"
    r = receipt(gateway, newest_receipt_id(gateway, key), key)
    assert any(c == {"name": "GUARDRAIL", "result": "BLOCK"} for c in r["checks"]), r["checks"]


def newest_receipt_id(gateway, key: str) -> str:
    status, body = http("GET", f"{gateway.mgmt_url}/v1/receipts?limit=1", key=key)
    assert status == 200, body
    return body["receipts"][0]["receiptId"]
