"""The event-stream frames the Rust codec writes (src/providers/bedrock/eventstream.rs, the
`aws-smithy-eventstream` crate) read back by botocore's own decoder, the one boto3 reads
`converse_stream` answers with: prelude and message CRCs, headers and payloads all agree.
The Rust test `encoding_the_golden_events_gives_the_committed_frames` proves the .eventstream
file is what the codec writes for the .events.jsonl events. No gateway needed."""

import json
from pathlib import Path

from botocore.eventstream import EventStreamBuffer

STREAM = Path(__file__).parent.parent / "fixtures/translate/converse/stream"


def test_botocore_decodes_the_rust_frames_to_the_golden_events():
    want = [json.loads(line) for line in (STREAM / "two_tool_calls.events.jsonl").read_text().splitlines()]
    data = (STREAM / "two_tool_calls.eventstream").read_bytes()
    buffer = EventStreamBuffer()
    # Fed in uneven pieces, as a socket would deliver them.
    for i in range(0, len(data), 37):
        buffer.add_data(data[i : i + 37])
    got = []
    for message in buffer:
        headers = message.headers
        assert headers[":message-type"] == "event"
        assert headers[":content-type"] == "application/json"
        got.append({headers[":event-type"]: json.loads(message.payload)})
    assert got == want
