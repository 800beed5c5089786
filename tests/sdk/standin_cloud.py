"""The stand-in's Bedrock, Vertex and Google-token answers (mixed into standin._Handler).

- `POST /model/{id}/converse` and `/converse-stream`: Bedrock Converse. Like AWS, it checks the
  SigV4 signature first (recomputed with botocore from the keys the test trusted, answering 403
  `InvalidSignatureException` when it differs), then the body (400 `ValidationException`);
  `converse-stream` answers in real event-stream frames (aws_eventstream.py).
- `POST /v1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent` and
  `:streamGenerateContent` (SSE with `alt=sse`): Gemini, 401 unless the bearer token is one the
  stand-in's `/token` issued.
- `POST /token`: Google's OAuth2 token endpoint for the JWT-bearer grant. The assertion is
  verified like Google does (PyJWT, RS256, with the public key of the service account the test
  trusted; `iss`, `aud` = this token URI, `scope`, `exp`/`iat`), else 400 `invalid_grant`.

What they answer, as for Anthropic (standin.py): text; two parallel tool calls when the request
declares tools; the text AFTER_TOOLS once the last turn carries the tools' results; Bedrock streams a
`throttlingException` after its first delta when the last message is THROTTLE.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import jwt

import aws_eventstream
from sigv4_check import recompute

THROTTLED = "Too many requests, please wait before trying again."
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


@dataclass
class Grant:
    """A JWT-bearer grant the token endpoint accepted: the assertion and its verified parts."""
    assertion: str
    header: dict
    claims: dict
    token: str


def _credential(authorization: str) -> tuple[str, str, str, str] | None:
    """(access key id, date, region, service) from a SigV4 Authorization header."""
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,", authorization or "")
    return m.groups() if m else None


class CloudRoutes:
    """Request handling for the cloud APIs; `self` is the stand-in's request handler."""

    def _cloud(self, body: bytes) -> bool:
        """Answers the request if it is for one of the cloud APIs; False if it is not."""
        path = urlsplit(self.path).path
        if path == "/token":
            self._token(body)
        elif path.startswith("/model/") and path.endswith(("/converse", "/converse-stream")):
            self._bedrock(path, body)
        elif path.startswith("/v1/projects/") and ":" in path.rsplit("/", 1)[-1]:
            self._vertex(path, body)
        else:
            return False
        return True

    # --- Google token endpoint ------------------------------------------------------------

    def _token(self, body: bytes):
        standin = self.server.standin
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}

        def refuse(why: str):
            self._json(400, {"error": "invalid_grant", "error_description": why})

        if form.get("grant_type") != JWT_BEARER:
            return self._json(400, {"error": "unsupported_grant_type",
                                    "error_description": f"grant_type={form.get('grant_type')!r}"})
        assertion = form.get("assertion", "")
        try:
            header = jwt.get_unverified_header(assertion)
            issuer = jwt.decode(assertion, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError as e:
            return refuse(f"Malformed JWT: {e}")
        account = standin.service_accounts.get(issuer)
        if account is None:
            return refuse(f"Invalid JWT: unknown issuer {issuer!r}")
        public_key, key_id = account
        try:
            claims = jwt.decode(
                assertion, public_key, algorithms=["RS256"], audience=f"{standin.url}/token", issuer=issuer,
                options={"require": ["iss", "aud", "iat", "exp", "scope"]},
            )
        except jwt.PyJWTError as e:
            return refuse(f"Invalid JWT Signature or claims: {e}")
        if header.get("kid") not in (None, key_id):
            return refuse(f"Invalid JWT: kid {header.get('kid')!r} is not the key {key_id!r}")
        if claims["exp"] - claims["iat"] > 3600:
            return refuse("Invalid JWT: the lifetime is over an hour")
        if CLOUD_PLATFORM not in claims["scope"].split():
            return refuse(f"Invalid JWT: scope {claims['scope']!r} does not grant Vertex AI")
        token = f"ya29.standin-{uuid.uuid4().hex}"
        standin.grants.append(Grant(assertion, header, claims, token))
        standin.tokens.add(token)
        self._json(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    # --- Bedrock Converse -----------------------------------------------------------------

    def _aws_error(self, status: int, code: str, message: str):
        raw = json.dumps({"message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("x-amzn-ErrorType", f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/")
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _sigv4_refusal(self, body: bytes) -> tuple[str, str] | None:
        """Why AWS would refuse this request's signature, as (error code, message); None if valid."""
        authorization = self.headers.get("Authorization", "")
        cred = _credential(authorization)
        if cred is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        akid, _, region, service = cred
        keys = self.server.standin.aws_keys.get(akid)
        if keys is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        secret, want_region = keys
        if (region, service) != (want_region, "bedrock"):
            return "InvalidSignatureException", f"Credential should be scoped to {want_region}/bedrock"
        url = f"http://{self.headers['Host']}{self.path}"
        headers = {k: v for k, v in self.headers.items()}
        if recompute(self.command, url, headers, body, akid, secret, region) != authorization:
            return "InvalidSignatureException", (
                "The request signature we calculated does not match the signature you provided.")
        return None

    def _bedrock(self, path: str, body: bytes):
        refusal = self._sigv4_refusal(body)
        if refusal:
            return self._aws_error(403, *refusal)
        try:
            req = json.loads(body)
        except ValueError:
            return self._aws_error(400, "SerializationException", "Malformed input request")
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            return self._aws_error(400, "ValidationException", "A conversation must start with a user message.")
        for tool in (req.get("toolConfig") or {}).get("tools", []):
            spec = tool.get("toolSpec") or {}
            if not spec.get("name") or "json" not in (spec.get("inputSchema") or {}):
                return self._aws_error(400, "ValidationException", f"Malformed toolSpec: {tool}")

        from standin import AFTER_TOOLS, DELTAS, THROTTLE, TOOL_TEXT, USAGE, tool_calls

        last = messages[-1].get("content") or []
        names = [t["toolSpec"]["name"] for t in (req.get("toolConfig") or {}).get("tools", [])]
        if any("toolResult" in block for block in last):
            kind, texts, calls = "text", [AFTER_TOOLS], []
        elif names:
            kind, texts, calls = "tools", [TOOL_TEXT[:8], TOOL_TEXT[8:]], tool_calls(names)
        else:
            kind, texts, calls = "text", DELTAS, []
        prompt, completion = USAGE["bedrock"][kind]
        usage = {"inputTokens": prompt, "outputTokens": completion, "totalTokens": prompt + completion}
        stop = "tool_use" if calls else "end_turn"
        ids = [f"tooluse_{uuid.uuid4().hex[:22]}" for _ in calls]

        if path.endswith("/converse"):
            content = [{"text": "".join(texts)}] + [
                {"toolUse": {"toolUseId": i, "name": name, "input": args}} for i, (name, args) in zip(ids, calls)]
            return self._json(200, {"output": {"message": {"role": "assistant", "content": content}},
                                    "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 312}})

        ev = aws_eventstream.event
        # Real Bedrock pads payloads with a "p" member (to hide lengths); a reader must ignore it.
        frames = [ev("messageStart", {"role": "assistant", "p": "abcdefghijkl"})]
        if any(block.get("text") == THROTTLE for block in last):
            # A modelled exception after the stream began, as Bedrock sends when throttled.
            frames.append(ev("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": texts[0]}}))
            frames.append(aws_eventstream.exception("throttlingException", {"message": THROTTLED}))
            return self._eventstream(frames)
        # Text blocks start with their first delta; tool blocks with contentBlockStart.
        frames += [ev("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}}) for t in texts]
        frames.append(ev("contentBlockStop", {"contentBlockIndex": 0}))
        for index, (tool_id, (name, args)) in enumerate(zip(ids, calls), start=1):
            start = {"toolUse": {"toolUseId": tool_id, "name": name}}
            frames.append(ev("contentBlockStart", {"contentBlockIndex": index, "start": start, "p": "abc"}))
            raw = json.dumps(args)
            for piece in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                frames.append(ev("contentBlockDelta", {"contentBlockIndex": index,
                                                       "delta": {"toolUse": {"input": piece}}}))
            frames.append(ev("contentBlockStop", {"contentBlockIndex": index}))
        frames.append(ev("messageStop", {"stopReason": stop}))
        frames.append(ev("metadata", {"usage": usage, "metrics": {"latencyMs": 312}, "p": "abcdefgh"}))
        self._eventstream(frames)

    def _eventstream(self, frames: list[bytes]):
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        data = b"".join(frames)
        # Cut at arbitrary places, not at frame boundaries, as TCP would: the gateway's decoder
        # must put frames back together across reads.
        for i in range(0, len(data), 61):
            self._chunk(data[i : i + 61])
        self._chunk(b"")

    # --- Vertex Gemini --------------------------------------------------------------------

    def _vertex(self, path: str, body: bytes):
        standin = self.server.standin
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer "):] not in standin.tokens:
            return self._json(401, {"error": {"code": 401, "status": "UNAUTHENTICATED",
                                              "message": "Request had invalid authentication credentials."}})
        m = re.fullmatch(r"/v1/projects/([^/]+)/locations/([^/]+)/publishers/google/models/([^/:]+):(\w+)", path)
        if not m or m.group(4) not in ("generateContent", "streamGenerateContent"):
            return self._not_found()
        model, op = unquote(m.group(3)), m.group(4)

        def invalid(message: str):
            self._json(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": message}})

        try:
            req = json.loads(body)
        except ValueError:
            return invalid("Invalid JSON payload received.")
        contents = req.get("contents")
        if not isinstance(contents, list) or not contents:
            return invalid("contents is not specified")
        names = []
        for tool in req.get("tools") or []:
            for decl in tool.get("functionDeclarations") or []:
                if not decl.get("name"):
                    return invalid(f"function_declarations[].name is empty: {decl}")
                names.append(decl["name"])

        from standin import AFTER_TOOLS, DELTAS, TOOL_TEXT, USAGE, tool_calls

        last = contents[-1].get("parts") or []
        if any("functionResponse" in part for part in last):
            kind, texts, calls = "text", [AFTER_TOOLS], []
        elif names:
            kind, texts, calls = "tools", [TOOL_TEXT], tool_calls(names)
        else:
            kind, texts, calls = "text", DELTAS, []
        prompt, completion = USAGE["vertex"][kind]

        def usage(done: int) -> dict:
            return {"promptTokenCount": prompt, "candidatesTokenCount": done, "totalTokenCount": prompt + done}

        def answer(parts: list, finish: str | None, usage_now: dict) -> dict:
            candidate = {"content": {"role": "model", "parts": parts}}
            if finish:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "usageMetadata": usage_now, "modelVersion": f"{model}-001",
                    "createTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
                    "responseId": uuid.uuid4().hex[:20]}

        call_parts = [{"functionCall": {"name": name, "args": args}} for name, args in calls]
        if op == "generateContent":
            return self._json(200, answer([{"text": "".join(texts)}] + call_parts, "STOP", usage(completion)))
        # Streamed: like Vertex, every chunk carries usageMetadata with the candidate tokens so
        # far (cumulative, not per chunk); function calls come whole, together, in their own chunk.
        pieces = [[{"text": t}] for t in texts] + ([call_parts] if call_parts else [])
        chunks = []
        for i, parts in enumerate(pieces, start=1):
            done = i == len(pieces)
            chunks.append(answer(parts, "STOP" if done else None, usage(completion * i // len(pieces))))
        if "sse" in parse_qs(urlsplit(self.path).query).get("alt", []):
            # Vertex separates its SSE events with CRLF pairs.
            self._sse([(None, c) for c in chunks], eol="\r\n")
        else:
            self._json(200, chunks)  # without alt=sse: one JSON array
