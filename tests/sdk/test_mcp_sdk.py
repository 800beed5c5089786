"""Issue 20: the official MCP Python SDK on both sides of `/mcp/{server}`.

A real FastMCP server over Streamable HTTP is the tenant's tool server; the official client
(streamable_http_client + ClientSession) connects through the gateway with the Tollgate key as its
bearer. The receipts are checked with the auditor's own verifier (receipt_verifier.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError

from conftest import free_port, http, start_gateway, stop_gateway
from receipt_verifier import load_key_registry, parse_jsonl, verify_export

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("mcp") / "seen.jsonl"
    log.touch()
    proc = subprocess.Popen([sys.executable, str(HERE / "mcp_tool_server.py"), str(port), str(log)])
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=2)
        except urllib.error.HTTPError:
            break  # answering (a GET without a session is refused): up
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the FastMCP server did not start"
            time.sleep(0.1)
            continue
        break
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def gw(standin, tool_server, tmp_path_factory):
    """A gateway of its own (its policy must not reach the other tests' tenant), with the tool
    server registered as `tools` and an allowlist of [search] with email redaction."""
    g = start_gateway(standin, tmp_path_factory.mktemp("tollgate-mcp"), {"TOLLGATE_MAX_BODY_BYTES": "65536"})
    url, _ = tool_server
    status, body = http("POST", f"{g.mgmt_url}/v1/tool-servers",
                        {"name": "tools", "url": url, "headers": {"X-Server-Token": "server-token-7"}}, g.key)
    assert status == 201, body
    yaml = "allowlist:\n  tools: [search]\nguardrails:\n  pii: {email: redact}\n"
    status, body = http("POST", f"{g.mgmt_url}/v1/policies", {"name": "tools", "enabled": True, "yaml": yaml}, g.key)
    assert status == 201, body
    yield g
    stop_gateway(g)


def seen(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def seen_calls(log: Path) -> list[dict]:
    out = []
    for r in seen(log):
        try:
            msg = json.loads(r["body"])
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("method") == "tools/call":
            out.append(msg)
    return out


async def session_run(url: str, key: str, work):
    # The Tollgate key is the client's bearer: the header every request of the session carries.
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def tool_receipts(g, key=None) -> list[dict]:
    status, page = http("GET", f"{g.mgmt_url}/v1/receipts?kind=tool_call&limit=200", key=key or g.key)
    assert status == 200, page
    return page["receipts"]


def test_initialize_list_and_call_through_the_gateway(gw, tool_server):
    _, log = tool_server

    async def work(s: ClientSession):
        tools = await s.list_tools()
        result = await s.call_tool("search", {"q": "mail bob@example.com"})
        return tools, result

    tools, result = asyncio.run(session_run(f"{gw.gateway_url}/mcp/tools", gw.key, work))
    assert [t.name for t in tools.tools] == ["search"], "the allowlist hides shell.exec"
    assert not result.isError
    assert result.content[0].text == "found: mail [REDACTED:EMAIL]"

    calls = seen_calls(log)
    assert calls and calls[-1]["params"]["arguments"] == {"q": "mail [REDACTED:EMAIL]"}, "redacted before the server"
    everything = json.dumps(seen(log))
    assert gw.key not in everything, "the server never saw the Tollgate key"
    assert all(r["headers"].get("x-server-token") == "server-token-7" for r in seen(log) if r["method"] == "POST")

    receipts = tool_receipts(gw)
    r = receipts[0]
    assert (r["kind"], r["provider"], r["model"], r["upstreamStatus"]) == ("tool_call", "tools", "search", "ok")
    names = [f'{c["name"]}:{c["result"]}' for c in r["checks"]]
    assert names[:3] == ["ALLOWLIST:PASS", "GUARDRAIL:REDACT", "UPSTREAM:PASS"], names
    assert len(receipts) == 1, "initialize, notifications and tools/list leave no receipt"

    # The auditor's verifier: the whole chain, signatures and all.
    status, keys = http("GET", f"{gw.mgmt_url}/v1/compliance/signing-keys", key=gw.key)
    assert status == 200
    req = urllib.request.Request(f"{gw.mgmt_url}/v1/receipts/export?format=jsonl",
                                 headers={"Authorization": f"Bearer {gw.key}"})
    records = parse_jsonl(urllib.request.urlopen(req, timeout=30).read().decode())
    verify_export(records, load_key_registry(keys))
    assert any(rec["kind"] == "tool_call" for rec in records)


def test_a_tool_outside_the_allowlist_is_a_json_rpc_error_and_never_sent(gw, tool_server):
    _, log = tool_server
    before = len(seen_calls(log))

    async def work(s: ClientSession):
        with pytest.raises(McpError) as e:
            await s.call_tool("shell.exec", {"cmd": "rm -rf /"})
        return e.value

    err = asyncio.run(session_run(f"{gw.gateway_url}/mcp/tools", gw.key, work))
    assert "allowlist" in err.error.message
    assert len(seen_calls(log)) == before, "the server was not reached"
    r = tool_receipts(gw)[0]
    assert r["model"] == "shell.exec"
    assert [f'{c["name"]}:{c["result"]}' for c in r["checks"]] == ["ALLOWLIST:BLOCK", "UPSTREAM:SKIPPED"]


def test_another_tenants_server_is_not_found_and_not_reached(gw, tool_server):
    _, log = tool_server
    binary_env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    out = subprocess.run([os.environ["TOLLGATE_BIN"], "tenant", "create", "--name", "other", "--json"],
                         env={**binary_env, "TOLLGATE_DATA_DIR": str(gw.dir)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    other = json.loads(out.stdout)["key"]
    deadline = time.monotonic() + 15
    while http("GET", f"{gw.mgmt_url}/v1/keys", key=other)[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    before = len(seen(log))
    with pytest.raises(Exception):
        asyncio.run(session_run(f"{gw.gateway_url}/mcp/tools", other, lambda s: s.list_tools()))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {"q": "x"}}}
    status, answer = http("POST", f"{gw.gateway_url}/mcp/tools", body, other)
    assert status == 404, answer
    assert len(seen(log)) == before


def raw(gw, path: str, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(f"{gw.gateway_url}{path}", data=data, method="POST", headers={
        "Authorization": f"Bearer {gw.key}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_bad_input_and_a_server_that_is_down(gw, tool_server):
    _, log = tool_server
    before = len(seen_calls(log))
    status, body = raw(gw, "/mcp/tools", b"{nope")
    assert (status, body["error"]["code"]) == (400, -32700)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {}}}
    status, body = raw(gw, "/mcp/tools", json.dumps([call, call]).encode())
    assert (status, body["error"]["code"]) == (400, -32600)
    status, body = raw(gw, "/mcp/nowhere", json.dumps(call).encode())
    assert status == 404 and body["error"]["type"] == "not_found"
    status, body = raw(gw, "/mcp/tools", b" " * 70000)
    assert status == 413 and body["error"]["type"] == "payload_too_large"
    assert len(seen_calls(log)) == before

    status, body = http("POST", f"{gw.mgmt_url}/v1/tool-servers",
                        {"name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp"}, gw.key)
    assert status == 201, body
    status, body = raw(gw, "/mcp/down", json.dumps({**call, "id": "c-9"}).encode())
    assert status == 200 and body["id"] == "c-9" and body["error"]["data"]["type"] == "upstream_error", body
    r = tool_receipts(gw)[0]
    assert (r["provider"], r["upstreamStatus"]) == ("down", "error")
    assert "UPSTREAM:FAIL" in [f'{c["name"]}:{c["result"]}' for c in r["checks"]]
