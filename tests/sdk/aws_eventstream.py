"""The AWS event-stream framing (`application/vnd.amazon.eventstream`), written from the format
AWS documents, for the stand-in's Bedrock `converse-stream` answers. Independent of the Rust
codec on purpose: a frame both the gateway and botocore's `EventStreamBuffer` read is a frame the
real service could have sent.

One message:
    prelude   total length (u32 BE) | headers length (u32 BE) | CRC32 of those 8 bytes (u32 BE)
    headers   per header: name length (u8) | name | value type (u8, 7 = string) |
              value length (u16 BE) | value
    payload   the event's JSON
    CRC32 of everything before it (u32 BE)
"""

from __future__ import annotations

import json
import struct
import zlib

STRING = 7


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack(">B", len(n)) + n + struct.pack(">BH", STRING, len(v)) + v


def frame(headers: list[tuple[str, str]], payload: bytes) -> bytes:
    """One event-stream message with string headers, in the order given."""
    encoded = b"".join(_header(k, v) for k, v in headers)
    total = 4 + 4 + 4 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _json(body: dict) -> bytes:
    # Compact, as AWS sends it.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def event(event_type: str, body: dict) -> bytes:
    """A Converse stream event (`messageStart`, `contentBlockDelta`, `metadata`, ...)."""
    headers = [(":event-type", event_type), (":content-type", "application/json"), (":message-type", "event")]
    return frame(headers, _json(body))


def exception(exception_type: str, body: dict) -> bytes:
    """A modelled error mid-stream (`throttlingException`, ...)."""
    headers = [(":exception-type", exception_type), (":content-type", "application/json"),
               (":message-type", "exception")]
    return frame(headers, _json(body))
