"""The JSON body worker process (`python -c LAUNCH`): parses the request bodies the gateway hands it, one at a time, so
a large body's parse never holds the gateway's event loop (`gateway.body_parser` starts and feeds it).

On stdin: an 8-byte big-endian body length, a 4-byte depth limit, a 1-byte job, the body. On stdout: an 8-byte
length and the pickled answer of the job: `PARSE` (a JSON-RPC body: `request_body.parse_json_body_as_data`),
`CHECK` (a REST body at the gate: `request_body.check_json_body_as_data`), `SEND` (a REST `message:send` body
read as the SDK reads it: `sdk_requests.read_send_body_as_data`, whose module is loaded at the first such job) or
`SEND_PROTO` (the bytes of a gRPC SendMessageRequest: `sdk_requests.read_send_proto_as_data`), `SEND_V03` (a v0.3 REST
`message:send` body: `read_v03_send_body_as_data`), `PUSH` / `PUSH_V03` (a REST push-config body, 1.0's or v0.3's:
`read_push_config_as_data`), `JSONRPC` (a JSON-RPC body the SDK's dispatcher answers: `read_jsonrpc_as_data`).
It runs niced (`NICENESS`) and exits at the end of stdin."""

from __future__ import annotations

import pickle
import struct
import sys
from typing import Any, BinaryIO

from .request_body import check_json_body_as_data, parse_json_body_as_data

REQUEST_HEAD = struct.Struct(">QIB")
ANSWER_HEAD = struct.Struct(">Q")
PARSE, CHECK, SEND, SEND_PROTO, SEND_V03, PUSH, PUSH_V03, JSONRPC = 0, 1, 2, 3, 4, 5, 6, 7
"""The jobs (see the module's docstring)."""
NICENESS = 10
"""The worker runs at a lower CPU priority than the gateway: on a busy host the other clients' requests (and the
gateway's loop handing bodies over) get the cores first, and large bodies wait for them."""


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer every request on `inp` on `out`, until `inp` ends."""
    while True:
        head = inp.read(REQUEST_HEAD.size)
        if len(head) < REQUEST_HEAD.size:
            return
        size, max_depth, job = REQUEST_HEAD.unpack(head)
        body = inp.read(size)
        if len(body) < size:
            return
        answer = pickle.dumps(run(job, body, max_depth), protocol=5)
        del body
        out.write(ANSWER_HEAD.pack(len(answer)))
        out.write(answer)
        out.flush()


def run(job: int, body: bytes, max_depth: int) -> tuple[Any, ...]:
    """The answer of one job."""
    if job == PARSE:
        return parse_json_body_as_data(body, max_depth)
    if job == CHECK:
        return check_json_body_as_data(body)
    return run_sdk(job, body)


def run_sdk(job: int, body: bytes) -> tuple[Any, ...]:
    """The answer of one of the jobs that read a body as the SDK does (`SEND` and after): the same function whether the
    worker or the gateway's loop (a small body) runs it."""
    from . import sdk_requests  # the SDK's types: loaded by the first such body only

    if job == SEND:
        return sdk_requests.read_send_body_as_data(body)
    if job == SEND_PROTO:
        return sdk_requests.read_send_proto_as_data(body)
    if job == SEND_V03:
        return sdk_requests.read_v03_send_body_as_data(body)
    if job == PUSH or job == PUSH_V03:
        return sdk_requests.read_push_config_as_data(body, v03=job == PUSH_V03)
    if job == JSONRPC:
        return sdk_requests.read_jsonrpc_as_data(body)
    raise ValueError(f"unknown job {job}")


LAUNCH = (f"import os; os.nice({NICENESS}); import runpy; "  # niced before its imports: even its start yields
          "runpy.run_module('mma2a.json_worker', run_name='__main__')")
"""What `python -c` runs to start the worker."""

if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
