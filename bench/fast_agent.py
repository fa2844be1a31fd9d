"""bench/fast_agent: a trivial A2A JSON-RPC agent on raw uvloop + httptools, to measure what sits in front of it.

It answers `SendMessage` with a completed Task (a fresh task id, one text artifact) or, with
`--reply message`, a Message; `GetTask` with a completed task of the asked id; and serves
its Agent Card at `/.well-known/agent-card.json`. No framework, no SDK: it must be far
faster than anything it is benchmarked behind (bench/gateway.py checks it is at least 10x).

    .venv/bin/python bench/fast_agent.py --port 9001 [--reply task|message]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from typing import Any

import httptools
import orjson


def card(url: str) -> bytes:
    return orjson.dumps({
        "name": "fast", "description": "answers every message at once", "version": "1.0.0",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": False},
        "defaultInputModes": ["text/plain", "image/*", "audio/*"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "echo", "description": "echo", "tags": ["fast"]}],
    })


class Agent(asyncio.Protocol):
    """One keep-alive connection: parse requests with httptools, answer each as soon as its body is in."""

    reply = "task"
    card_body = b"{}"
    prefix = ""  # its port: task ids unique among several fast agents behind one gateway
    ids = itertools.count(1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        if method == b"GET" and url.endswith(b"/.well-known/agent-card.json"):
            self.send(200, self.card_body)
        elif method == b"POST":
            self.send(200, self.answer(body))
        else:
            self.send(404, b'{"error":"not found"}')
        if not self.parser.should_keep_alive():
            self.transport.close()

    def answer(self, body: bytes) -> bytes:
        try:
            doc = orjson.loads(body)
            rid, method, params = doc.get("id"), doc.get("method"), doc.get("params") or {}
        except (orjson.JSONDecodeError, AttributeError):
            return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}'
        result: dict[str, Any]
        if method == "SendMessage":
            msg = params.get("message") or {}
            n = next(self.ids)
            ctx = msg.get("contextId") or f"c-{n}"
            if self.reply == "message":
                result = {"message": {"messageId": f"r-{n}", "role": "ROLE_AGENT", "contextId": ctx,
                                      "parts": [{"text": "ok"}]}}
            else:
                result = {"task": {"id": f"t-{self.prefix}{n}", "contextId": ctx, "status": {"state": "TASK_STATE_COMPLETED"},
                                   "artifacts": [{"artifactId": "a1", "parts": [{"text": "ok"}]}]}}
        elif method == "GetTask":
            result = {"id": params.get("id"), "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
        else:
            return orjson.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result})

    def send(self, status: int, body: bytes) -> None:
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        self.transport.write(head + body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--reply", choices=("task", "message"), default="task")
    args = ap.parse_args()
    Agent.reply = args.reply
    Agent.card_body = card(f"http://127.0.0.1:{args.port}/")
    Agent.prefix = f"{args.port}-"

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Agent, "127.0.0.1", args.port, backlog=1024)
        async with server:
            await server.serve_forever()

    import uvloop

    uvloop.run(serve())


if __name__ == "__main__":
    main()
