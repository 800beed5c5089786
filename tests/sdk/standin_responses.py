"""The stand-in's OpenAI Responses API (see standin.py), in OpenAI's own wire shapes.

- POST /v1/responses: a `response` object, or with `stream: true` its typed SSE events
  (response.created, response.in_progress, response.output_item.added,
  response.content_part.added, response.output_text.delta..., response.output_text.done,
  response.content_part.done, response.output_item.done, response.completed), each with its
  `sequence_number`. Answers are stored under fresh ids.
- GET /v1/responses/{id}, DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: the
  stored response; 404 in OpenAI's envelope for an id it never issued (or deleted).
- POST /v1/responses/input_tokens: {object: "response.input_tokens", input_tokens}.

With `tools` in the request and the input text `TOOLS`, the answer is a `get_weather` function
call (arguments streamed in two pieces); a `function_call_output` input answers text that
quotes it; `ECHO:a|b` answers `ab`, streamed as `a`, `b`. Usage is always 12 input and 5
output tokens.
"""

from __future__ import annotations

import threading
import uuid

INPUT_TOKENS, OUTPUT_TOKENS = 12, 5
USAGE = {"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
         "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
         "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}
ARGS = '{"city":"Paris"}'

_stored: dict[str, tuple[dict, list[dict]]] = {}
_lock = threading.Lock()


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _not_found(handler, rid: str):
    handler._json(404, {"error": {"message": f"Response with id '{rid}' not found.",
                                  "type": "invalid_request_error", "param": None, "code": None}})


def _last_text(req) -> str:
    inp = req.get("input")
    if isinstance(inp, str):
        return inp
    if not inp:
        return ""
    last = inp[-1]
    if last.get("type") == "function_call_output":
        return f"tool said {last.get('output')}"
    content = last.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [])


def _input_items(req) -> list[dict]:
    inp = req.get("input")
    if isinstance(inp, str):
        inp = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": inp}]}]
    return [{"id": _id("msg"), "status": "completed", **item} for item in inp or []]


def post(handler, path: str, req) -> bool:
    """Answers a POST under /v1/responses; False when the path is not one of these."""
    if path == "/v1/responses/input_tokens":
        handler._json(200, {"object": "response.input_tokens", "input_tokens": len(_last_text(req)) // 4 + 3})
        return True
    if path != "/v1/responses":
        return False
    from standin import DELTAS  # standin imports this module: import at use, not at load

    text = _last_text(req)
    if req.get("tools") and text == "TOOLS":
        item = {"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": "get_weather",
                "arguments": ARGS, "status": "completed"}
        deltas = []
    else:
        if text.startswith("ECHO:"):
            deltas = text[len("ECHO:"):].split("|")
        elif text.startswith("tool said"):
            deltas = [f"{text}."]
        else:
            deltas = DELTAS
        item = {"type": "message", "id": _id("msg"), "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(deltas), "annotations": [], "logprobs": []}]}
    rid = _id("resp")

    def response(status, output, usage):
        return {"id": rid, "object": "response", "created_at": 1741476542, "status": status,
                "background": False, "error": None, "incomplete_details": None,
                "instructions": req.get("instructions"), "max_output_tokens": req.get("max_output_tokens"),
                "model": req.get("model"), "output": output, "parallel_tool_calls": True,
                "previous_response_id": req.get("previous_response_id"),
                "reasoning": {"effort": None, "summary": None}, "store": True, "temperature": 1.0,
                "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": req.get("tools") or [],
                "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None, "metadata": {}}

    done = response("completed", [item], USAGE)
    with _lock:
        _stored[rid] = (done, _input_items(req))
    if not req.get("stream"):
        handler._json(200, done)
        return True

    events = [{"type": "response.created", "response": response("in_progress", [], None)},
              {"type": "response.in_progress", "response": response("in_progress", [], None)}]
    if item["type"] == "function_call":
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": {**item, "arguments": "", "status": "in_progress"}})
        half = len(ARGS) // 2
        for piece in (ARGS[:half], ARGS[half:]):
            events.append({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                           "output_index": 0, "delta": piece})
        events.append({"type": "response.function_call_arguments.done", "item_id": item["id"],
                       "output_index": 0, "arguments": ARGS})
    else:
        at = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        events.append({"type": "response.output_item.added", "output_index": 0,
                       "item": {**item, "content": [], "status": "in_progress"}})
        events.append({"type": "response.content_part.added", **at,
                       "part": {"type": "output_text", "text": "", "annotations": []}})
        events += [{"type": "response.output_text.delta", **at, "delta": d, "logprobs": []} for d in deltas]
        full = "".join(deltas)
        events.append({"type": "response.output_text.done", **at, "text": full, "logprobs": []})
        events.append({"type": "response.content_part.done", **at,
                       "part": {"type": "output_text", "text": full, "annotations": []}})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append({"type": "response.completed", "response": done})
    handler._sse([(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)])
    return True


def stored_call(handler, method: str, path: str) -> bool:
    """Answers GET/DELETE on a stored response; False when the path is not one."""
    if not path.startswith("/v1/responses/"):
        return False
    rest = path[len("/v1/responses/"):]
    rid, items = (rest[: -len("/input_items")], True) if rest.endswith("/input_items") else (rest, False)
    with _lock:
        found = _stored.get(rid)
        if found and method == "DELETE":
            del _stored[rid]
    if not found:
        _not_found(handler, rid)
    elif method == "DELETE":
        handler._json(200, {"id": rid, "object": "response", "deleted": True})
    elif items:
        data = found[1]
        handler._json(200, {"object": "list", "data": data, "has_more": False,
                            "first_id": data[0]["id"] if data else None,
                            "last_id": data[-1]["id"] if data else None})
    else:
        handler._json(200, found[0])
    return True
