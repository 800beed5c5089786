"""A real MCP tool server for the gateway tests: the official SDK's FastMCP over Streamable HTTP.

    python mcp_tool_server.py PORT LOGFILE

Every HTTP request it receives is appended to LOGFILE as one JSON line (method, path, headers,
body), so a test can prove what reached the server and what did not (the Tollgate key).
"""

from __future__ import annotations

import json
import sys

import uvicorn
from mcp.server.fastmcp import FastMCP

port, log_path = int(sys.argv[1]), sys.argv[2]
mcp = FastMCP("tollgate-test-tools", host="127.0.0.1", port=port)


@mcp.tool()
def search(q: str) -> str:
    """Search the test corpus."""
    return f"found: {q}"


@mcp.tool(name="shell.exec")
def shell_exec(cmd: str) -> str:
    """Run a shell command (never actually: the gateway must not let it through)."""
    return f"ran: {cmd}"


app = mcp.streamable_http_app()


async def recording(scope, receive, send):
    if scope["type"] != "http":
        return await app(scope, receive, send)
    body = b""
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message)
        body += message.get("body", b"")
        more = message.get("more_body", False)
    with open(log_path, "a") as f:
        f.write(json.dumps({
            "method": scope["method"], "path": scope["path"],
            "headers": {k.decode().lower(): v.decode() for k, v in scope["headers"]},
            "body": body.decode(errors="replace"),
        }) + "\n")

    replay = iter(chunks)

    async def again():
        try:
            return next(replay)
        except StopIteration:
            return await receive()

    return await app(scope, again, send)


if __name__ == "__main__":
    uvicorn.run(recording, host="127.0.0.1", port=port, log_level="warning")
