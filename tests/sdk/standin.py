"""A stand-in for the OpenAI, Anthropic, Bedrock and Vertex APIs (and Google's token endpoint)
on a real local socket. The cloud APIs are in standin_cloud.py, OpenAI's Responses API in
standin_responses.py.

It records every request as the gateway sent it, so tests can check what left the gateway
(which key, which body), and it answers in the providers' own wire formats, so the official
SDKs on the other side of the gateway parse real-looking responses, streaming included.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import standin_responses
from standin_cloud import CloudRoutes

TEXT = "Hello from stand-in"
DELTAS = ["Hello", " from", " stand-in"]
CHAT_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
EMBEDDING_USAGE = {"prompt_tokens": 5, "total_tokens": 5}
MODELS = ["gpt-4o-mini", "text-embedding-3-small", "claude-haiku-4-5"]

# Anthropic, Bedrock and Vertex answer a request that declares tools with TOOL_TEXT and two
# parallel calls (the first two tools declared, arguments from TOOL_ARGS), and a request whose
# last turn carries tool results with AFTER_TOOLS.
TOOL_TEXT = "Checking both now."
TOOL_ARGS = {"get_weather": {"city": "Paris", "unit": "celsius"}, "get_time": {"timezone": "Europe/Paris"}}
AFTER_TOOLS = "Sunny and 18 C in Paris, where it is 14:05."
# Bedrock's converse-stream fails mid-stream (standin_cloud.py) on this last message.
THROTTLE = "THROTTLE"
# Anthropic's stream fails mid-way with an `overloaded_error` event on this last message.
OVERLOADED = "OVERLOADED"
# (prompt, completion) tokens each provider reports, by kind of answer: distinct, so a receipt
# shows which answer it was read from.
USAGE = {
    "anthropic": {"text": (13, 6), "tools": (412, 57)},
    "bedrock": {"text": (17, 9), "tools": (492, 89)},
    "vertex": {"text": (21, 8), "tools": (60, 25)},
}


def tool_calls(names: list[str]) -> list[tuple[str, dict]]:
    """The (name, arguments) of the parallel calls made to a request declaring tools `names`."""
    return [(name, TOOL_ARGS.get(name, {})) for name in names[:2]]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    # Which connection it came on (the gateway's port) and when, to tell a retry from a resend.
    peer_port: int = 0
    at: float = 0.0

    def __str__(self):
        return f"{self.method} {self.path} (port {self.peer_port}, at {self.at:.3f}, {len(self.body)} body bytes)"

    def json(self):
        return json.loads(self.body)


class Standin:
    def __init__(self):
        self.requests: list[Recorded] = []
        # Webhook deliveries (POST /webhooks), kept apart from `requests`: the schemathesis run
        # points webhook endpoints here, and the gateway it drives goes on delivering (budget
        # events, retries) while later tests count what reached the providers.
        self.webhooks: list[Recorded] = []
        # Trusted by the cloud stand-ins (standin_cloud.py), set by the tests: AWS access key id
        # -> (secret, region); service-account email -> (public key, private_key_id).
        self.aws_keys: dict[str, tuple[str, str]] = {}
        self.service_accounts: dict[str, tuple[object, str]] = {}
        # Accepted JWT-bearer grants and the tokens issued for them. Not cleared between tests:
        # the gateway caches a token across them.
        self.grants: list = []
        self.tokens: set[str] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.standin = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "Standin":
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def clear(self):
        self.requests.clear()

    def trust_aws(self, access_key_id: str, secret_access_key: str, region: str):
        self.aws_keys[access_key_id] = (secret_access_key, region)

    def trust_service_account(self, client_email: str, public_key, private_key_id: str):
        self.service_accounts[client_email] = (public_key, private_key_id)

    def to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if urlsplit(r.path).path == path]

    def places_containing(self, needle: str) -> list[str]:
        """Where `needle` occurs in what was received: paths, header values, bodies."""
        found = []
        for r in self.requests:
            where = f"{r.method} {r.path}"
            if needle in r.path:
                found.append(f"{where}: path")
            found += [f"{where}: header {k}" for k, v in r.headers.items() if needle in v]
            if needle.encode() in r.body:
                found.append(f"{where}: body")
        return found


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Clients and connection pools drop idle keep-alive connections; that is not a failure.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(CloudRoutes, BaseHTTPRequestHandler):
    # HTTP/1.1 so the gateway can pool connections and sees chunked streaming like the real APIs.
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._record(b"")
        if standin_responses.stored_call(self, "GET", urlsplit(self.path).path):
            return
        if urlsplit(self.path).path == "/v1/models":
            # One list that satisfies both vendors' model-list shapes, for either provider test.
            now = int(time.time())
            data = [
                {"id": m, "object": "model", "type": "model", "created": now, "owned_by": "standin",
                 "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                for m in MODELS
            ]
            self._json(200, {"object": "list", "data": data, "has_more": False,
                             "first_id": MODELS[0], "last_id": MODELS[-1]})
        else:
            self._not_found()

    def do_DELETE(self):
        self._record(self._read_body())
        if not standin_responses.stored_call(self, "DELETE", urlsplit(self.path).path):
            self._not_found()

    def do_POST(self):
        body = self._read_body()
        if urlsplit(self.path).path == "/webhooks":
            self._record(body, into=self.server.standin.webhooks)
            self.send_response(204)
            self.end_headers()
            return
        self._record(body)
        if self._cloud(body):
            return
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return self._json(400, {"error": {"type": "invalid_request_error", "message": "stand-in: bad JSON"}})
        if standin_responses.post(self, urlsplit(self.path).path, req):
            return
        route = {
            "/v1/chat/completions": self._chat,
            "/v1/embeddings": self._embeddings,
            "/v1/messages": self._messages,
            "/v1/messages/count_tokens": self._count_tokens,
        }.get(urlsplit(self.path).path)
        if req.get("model") == "claude-overloaded":
            return self._json(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        if route:
            route(req)
        else:
            self._not_found()

    def _read_body(self) -> bytes:
        # The gateway may rewrite the body (e.g. to add stream_options) and re-frame it as chunked.
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                out += self.rfile.read(size + 2)[:size]
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return out
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _record(self, body: bytes, into: list | None = None):
        headers: dict[str, str] = {}
        for k, v in self.headers.items():
            # Repeated headers are joined, not overwritten, so a second Authorization cannot hide.
            k = k.lower()
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        (self.server.standin.requests if into is None else into).append(
            Recorded(self.command, self.path, headers, body, self.client_address[1], time.time()))

    # --- OpenAI ---------------------------------------------------------------------------

    def _chat(self, req):
        model, cid, now = req.get("model"), f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if not req.get("stream"):
            return self._json(200, {
                "id": cid, "object": "chat.completion", "created": now, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT, "refusal": None},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": CHAT_USAGE, "system_fingerprint": None,
            })
        include_usage = (req.get("stream_options") or {}).get("include_usage") is True

        def chunk(delta, finish=None, choices=True, usage=None):
            c = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": model,
                 "system_fingerprint": None,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
                 if choices else []}
            # Like OpenAI: with include_usage every chunk carries "usage", null until the last.
            if include_usage:
                c["usage"] = usage
            return c

        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        events += [chunk({"content": d}) for d in DELTAS]
        events.append(chunk({}, finish="stop"))
        if include_usage:
            events.append(chunk(None, choices=False, usage=CHAT_USAGE))
        self._sse([(None, e) for e in events] + [(None, "[DONE]")])

    def _embeddings(self, req):
        inputs = req.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        data = []
        for i, _ in enumerate(inputs):
            vec = [round(0.125 * (i + 1) * (k + 1), 3) for k in range(8)]
            # The official SDK asks for base64 (packed little-endian float32) unless told otherwise.
            if req.get("encoding_format") == "base64":
                vec = base64.b64encode(struct.pack("<8f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vec})
        self._json(200, {"object": "list", "data": data, "model": req.get("model"), "usage": EMBEDDING_USAGE})

    # --- Anthropic ------------------------------------------------------------------------
    # Text; with `tools`, TOOL_TEXT then two tool_use blocks (streamed as input_json_delta); the
    # AFTER_TOOLS text for tool results; an `error` event mid-stream for OVERLOADED.

    def _messages(self, req):
        model, mid = req.get("model"), f"msg_{uuid.uuid4().hex[:24]}"
        if not req.get("max_tokens") or not req.get("messages"):
            return self._json(400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "max_tokens and messages: Field required"}})
        names = [t.get("name") for t in req.get("tools") or []]
        if not all(names) or not all("input_schema" in t for t in req.get("tools") or []):
            return self._json(400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "tools.0.input_schema: Field required"}})
        last = req["messages"][-1].get("content")
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            kind, texts, calls = "text", [AFTER_TOOLS], []
        elif names:
            kind, texts, calls = "tools", [TOOL_TEXT[:8], TOOL_TEXT[8:]], tool_calls(names)
        else:
            kind, texts, calls = "text", [DELTAS[0], "".join(DELTAS[1:])], []
        prompt, completion = USAGE["anthropic"][kind]
        ids = [f"toolu_{uuid.uuid4().hex[:24]}" for _ in calls]
        stop = "tool_use" if calls else "end_turn"
        message = {"id": mid, "type": "message", "role": "assistant", "model": model,
                   "content": [{"type": "text", "text": "".join(texts)}] + [
                       {"type": "tool_use", "id": i, "name": name, "input": args}
                       for i, (name, args) in zip(ids, calls)],
                   "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": prompt, "output_tokens": completion}}
        if not req.get("stream"):
            return self._json(200, message)
        start = dict(message, content=[], stop_reason=None, usage={"input_tokens": prompt, "output_tokens": 1})
        events = [
            {"type": "message_start", "message": start},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "ping"},
        ]
        events += [{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
                   for t in texts]
        events.append({"type": "content_block_stop", "index": 0})
        for index, (tool_id, (name, args)) in enumerate(zip(ids, calls), start=1):
            events.append({"type": "content_block_start", "index": index,
                           "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}}})
            # Like Anthropic: an empty first partial_json, then the arguments in pieces that are
            # not JSON on their own.
            raw = json.dumps(args)
            for piece in ("", raw[:5], raw[5:17], raw[17:]):
                events.append({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": piece}})
            events.append({"type": "content_block_stop", "index": index})
        events += [
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": completion}},
            {"type": "message_stop"},
        ]
        if last == OVERLOADED:
            # As Anthropic does under load: an error event after the stream began, then the end.
            events = events[:4] + [{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
        self._sse([(e["type"], e) for e in events])

    def _count_tokens(self, req):
        # A fixed count per message, so a test can tell the answer passed through unchanged.
        self._json(200, {"input_tokens": 10 * len(req.get("messages") or [])})

    # --- wire -----------------------------------------------------------------------------

    def _json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _not_found(self):
        self._json(404, {"error": {"type": "not_found_error", "message": f"stand-in: no route {self.path}"}})

    def _sse(self, events, eol: str = "\n"):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        # One chunk per event, flushed, so a buffering gateway would show up as late delivery.
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            event = (f"event: {name}{eol}" if name else "") + f"data: {text}{eol}{eol}"
            self._chunk(event.encode())
        self._chunk(b"")

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
