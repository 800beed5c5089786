"""The translated Bedrock ConverseStream (src/providers/translate/converse.rs), accumulated by the openai
SDK's own stream helper state, the one `client.chat.completions.stream` uses: two parallel tool
calls whose argument deltas interleave come out whole, with the usage from `metadata`. The
chunks are the golden file the Rust test `translate::converse::tests::
stream_with_two_tool_calls_matches_its_golden_chunks` proves the translator emits from the real
frames in two_tool_calls.eventstream. No gateway needed."""

import json
from pathlib import Path

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from test_translate_stream import TOOLS

CHUNKS = Path(__file__).parent.parent / "fixtures/translate/converse/stream/two_tool_calls.chunks.jsonl"


def test_two_interleaved_tool_calls_accumulate():
    state = ChatCompletionStreamState(input_tools=TOOLS)
    chunks = [ChatCompletionChunk.model_validate(json.loads(line)) for line in CHUNKS.read_text().splitlines()]
    for chunk in chunks:  # model_validate above is strict: every chunk is a well-formed ChatCompletionChunk
        state.handle_chunk(chunk)
    final = state.get_final_completion()

    usage = final.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details.cached_tokens) == (492, 89, 12)
    choice = final.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", "Checking both now.")
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [
        ("tooluse_A1", "get_weather", {"city": "Paris", "unit": "c"}),
        ("tooluse_B2", "get_time", {"tz": "Asia/Tokyo"}),
    ]
