"""The translated Vertex Gemini stream (src/providers/translate/gemini), accumulated by the openai SDK's own
stream helper state, the one `client.chat.completions.stream` uses: text and both parallel
function calls (each sent whole, in one chunk) come out whole, and the thought signature rides
along in `extra_content`. The chunks are the golden file the Rust test `translate::gemini::tests::
stream_with_two_function_calls_matches_its_golden_chunks` proves the translator emits. No gateway
needed."""

import json
from pathlib import Path

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

CHUNKS = Path(__file__).parent.parent / "fixtures/translate/gemini/stream/text_and_two_function_calls.chunks.jsonl"

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]


def test_gemini_text_and_two_parallel_function_calls_accumulate():
    state = ChatCompletionStreamState(input_tools=TOOLS)
    events = []
    for line in CHUNKS.read_text().splitlines():
        # Strict validation: every chunk must be a well-formed ChatCompletionChunk.
        events.extend(state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(line))))
    final = state.get_final_completion()

    assert final.usage.prompt_tokens == 60
    assert final.usage.completion_tokens == 65
    assert final.usage.completion_tokens_details.reasoning_tokens == 40
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking both now."
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [
        ("call_chatcmpl-gem1_0", "get_weather", {"city": "Paris", "unit": "c"}),
        ("call_chatcmpl-gem1_1", "get_time", {"tz": "Asia/Tokyo"}),
    ]
    # The signature Gemini 3 needs back on the next turn survives the SDK's accumulation, so a
    # client that appends the message to its history sends it back.
    first = choice.message.tool_calls[0].model_dump()
    assert first["extra_content"] == {"google": {"thought_signature": "c2lnbmF0dXJlMQ=="}}
    done = [(e.index, e.name, json.loads(e.arguments)) for e in events if e.type == "tool_calls.function.arguments.done"]
    assert done == [(0, "get_weather", {"city": "Paris", "unit": "c"}), (1, "get_time", {"tz": "Asia/Tokyo"})]
