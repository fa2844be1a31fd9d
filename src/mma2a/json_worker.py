"""The JSON body worker process (`python -c LAUNCH`): parses the request bodies the gateway hands it, one at a time, so
a large body's parse never holds the gateway's event loop (`gateway.body_parser` starts and feeds it).

On stdin: an 8-byte big-endian body length, a 4-byte depth limit, a 1-byte job, the body. On stdout: an 8-byte
length and the pickled answer of the job:
- `RPC` / `RPC_SDK`: a JSON-RPC body at the gateway's ingress (`read_rpc_as_data`: parsed once, for the ingress and,
  if the SDK's dispatcher will answer it, read for it too);
- `CHECK`: a REST body at the gate (`request_body.check_json_body_as_data`);
- `SEND`: a REST `message:send` body read as the SDK reads it (`sdk_requests.read_send_body_as_data`, whose module is
  loaded at the first such job); `SEND_PROTO`: the bytes of a gRPC SendMessageRequest
  (`sdk_requests.read_send_proto_as_data`); `SEND_V03`: a v0.3 REST `message:send` body (`read_v03_send_body_as_data`);
- `PUSH` / `PUSH_V03`: a REST push-config body, 1.0's or v0.3's (`read_push_config_as_data`);
- `JSONRPC`: a JSON-RPC body the SDK's dispatcher answers that `RPC` did not read (`read_jsonrpc_as_data`);
- `ANSWER`: not a request but an answer of many values, converted as the SDK's bindings convert it
  (`sdk_answers.convert_as_data`: the pipeline's JSON in; the serialized protobuf, or the REST JSON, out);
- `KNOWN`: a large gRPC request of another method than SendMessage, parsed as grpc parses it and serialized again
  without its unknown fields (`sdk_requests.read_known_fields_as_data`).
It runs niced (`NICENESS`) and exits at the end of stdin."""

from __future__ import annotations

import pickle
import struct
import sys
from typing import Any, BinaryIO

from .request_body import check_json_body_as_data, parse_json_body_as_data, too_deep

REQUEST_HEAD = struct.Struct(">QIB")
ANSWER_HEAD = struct.Struct(">Q")
RPC, RPC_SDK, CHECK, SEND, SEND_PROTO, SEND_V03, PUSH, PUSH_V03, JSONRPC, ANSWER, KNOWN = range(11)
"""The jobs (see the module's docstring)."""
FAST_METHODS = frozenset({"SendMessage", "GetTask", "CancelTask"})
"""The JSON-RPC methods the gateway's ingress answers itself from the parsed document (`gateway.bindings.jsonrpc`),
when the request's A2A-Version is a plain 1.x; the SDK's dispatcher answers every other request."""
_WIDE_INT = float(1 << 63)  # orjson reads an integer literal past 64 bits as a float (at least this large)
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
        try:
            answer = pickle.dumps(run(job, body, max_depth), protocol=5)
        except RecursionError:  # (past PICKLE_RECURSION: not a document orjson reads) refused, not the worker's end
            answer = pickle.dumps((False, "InvalidRequest", f"request body nests deeper than {max_depth} levels", "body"))
        del body
        out.write(ANSWER_HEAD.pack(len(answer)))
        out.write(answer)
        out.flush()


def run(job: int, body: bytes, max_depth: int) -> tuple[Any, ...]:
    """The answer of one job."""
    if job == RPC or job == RPC_SDK:
        return read_rpc_as_data(body, max_depth, every=job == RPC_SDK)
    if job == CHECK:
        return check_json_body_as_data(body)
    if job == ANSWER:
        from . import sdk_answers  # the SDK's types: loaded by the first such answer only

        return sdk_answers.convert_as_data(body)
    return run_sdk(job, body)


def read_rpc_as_data(body: bytes, max_depth: int, *, every: bool) -> tuple[Any, ...]:
    """A large JSON-RPC body at the ingress, parsed once: `parse_json_body_as_data`'s answer (a refusal as it is),
    then, for a request the SDK's dispatcher will answer (`every`: the request's A2A-Version is not one the ingress
    answers itself, so every method; else any method but v0.3's names, which the ingress refuses under a 1.x
    version, and `FAST_METHODS` the ingress answers: not spelled with proto field names, `proto_spelled`, nor with
    an id past 64 bits), `read_jsonrpc_as_data`'s answer of the same document: `(True, doc, brackets, read)`.
    With a read, `doc`'s `params` keep only the tenant (the ingress reads nothing else of them on the SDK's way; a
    document it refuses for its nesting is read for nobody); `read` None: not read (the ingress answers it, or
    the dispatcher reads it as it reads any other body)."""
    parsed = parse_json_body_as_data(body, max_depth)
    if not parsed[0]:
        return parsed
    _, doc, brackets = parsed
    method = doc.get("method") if isinstance(doc, dict) else None
    if not isinstance(method, str):
        return True, doc, brackets, None
    params = doc.get("params")
    if not every and ("/" in method or (method in FAST_METHODS and doc.get("id").__class__ is not float
                                        and not (b"_" in body and proto_spelled(params)))):
        return True, doc, brackets, None  # (the ingress answers it, or refuses v0.3's names under a 1.x version)
    if brackets is not None and brackets > max_depth and too_deep(params, "params", max_depth) is not None:
        return True, doc, brackets, None
    from . import sdk_requests

    if _wide_ints(doc):  # `json.loads`, as the SDK's dispatcher parses it, keeps such an integer whole
        read = sdk_requests.read_jsonrpc_as_data(body)
    else:
        read = sdk_requests.read_jsonrpc_doc_as_data(doc, body)
    if read[0] != "other" and isinstance(params, dict):
        doc = {**doc, "params": {"tenant": params["tenant"]} if "tenant" in params else {}}
    return True, doc, brackets, read


def proto_spelled(params: Any) -> bool:
    """Params spelled with proto field names (`message_id`, `history_length`): the SDK's parser reads both
    spellings, so such requests take its path rather than the fast one, which reads the JSON names.
    (Called only for bodies with an underscore somewhere; the keys of each level are joined and searched once.)"""
    if not isinstance(params, dict):
        return False
    keys = "".join(params)
    message, config = params.get("message"), params.get("configuration")
    if isinstance(message, dict):
        keys += "".join(message)
        parts = message.get("parts")
        if isinstance(parts, list):
            keys += "".join(k for p in parts if isinstance(p, dict) for k in p)
    if isinstance(config, dict):
        keys += "".join(config)
    return "_" in keys


def _wide_ints(value: Any) -> bool:
    """A float in `value` as large as an integer past 64 bits and whole: orjson's reading of such an integer literal,
    where `json.loads` reads an `int` (every other JSON value orjson accepts, both read alike)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif v.__class__ is float and abs(v) >= _WIDE_INT and v.is_integer():
            return True
    return False


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
    if job == KNOWN:
        return sdk_requests.read_known_fields_as_data(body)
    raise ValueError(f"unknown job {job}")


LAUNCH = (f"import os; os.nice({NICENESS}); import runpy; "  # niced before its imports: even its start yields
          "runpy.run_module('mma2a.json_worker', run_name='__main__')")
"""What `python -c` runs to start the worker."""

PICKLE_RECURSION = 5 * 1024
"""The worker's recursion limit: orjson reads documents up to 1,024 levels deep, and pickling one recurses about twice
a level — with Python's 1,000, a 2 MB body nested 500 deep stopped the worker (`RecursionError while pickling`), so
every such request cost a new worker process and failed the other bodies it had (docs/security.md S15-10)."""

if __name__ == "__main__":
    sys.setrecursionlimit(PICKLE_RECURSION)
    serve(sys.stdin.buffer, sys.stdout.buffer)
