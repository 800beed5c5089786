"""The translated Anthropic stream (src/translate), accumulated by the openai SDK's own stream
helper state, the one `client.chat.completions.stream` uses: both parallel tool calls come out
whole. The chunks are the golden file the Rust test `translate::tests::
stream_with_two_tool_calls_matches_its_golden_chunks` proves the translator emits byte for byte.
No gateway needed."""

import json
from pathlib import Path

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

CHUNKS = Path(__file__).parent.parent / "fixtures/translate/stream/two_tool_calls.chunks.jsonl"

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]


def test_two_parallel_tool_calls_accumulate():
    state = ChatCompletionStreamState(input_tools=TOOLS)
    events = []
    for line in CHUNKS.read_text().splitlines():
        # Strict validation: every chunk must be a well-formed ChatCompletionChunk.
        events.extend(state.handle_chunk(ChatCompletionChunk.model_validate(json.loads(line))))
    final = state.get_final_completion()

    assert final.usage.prompt_tokens == 492
    assert final.usage.completion_tokens == 89
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking both now."
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [
        ("toolu_01A", "get_weather", {"city": "Paris", "unit": "c"}),
        ("toolu_01B", "get_time", {"tz": "Asia/Tokyo"}),
    ]
    done = [(e.index, e.name, json.loads(e.arguments)) for e in events if e.type == "tool_calls.function.arguments.done"]
    assert done == [(0, "get_weather", {"city": "Paris", "unit": "c"}), (1, "get_time", {"tz": "Asia/Tokyo"})]
