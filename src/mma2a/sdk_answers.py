"""The pipeline's answers (its JSON: a task, a message, a page of tasks, a stream's event) in the forms the a2a-sdk's
bindings answer with: the SDK's protobuf (gRPC serializes it; the SDK's handlers take it), or for REST the JSON the
SDK's REST dispatcher renders from it (`MessageToDict`, then Starlette's `JSONResponse.render` or, for an SSE event,
the dict `json_utils.dumps` writes).

The conversions are the SDK's own, in pure Python (`json_format.ParseDict`, `MessageToDict`: ~5 and ~3 us a JSON
value): an answer holding many values — a task whose history keeps a message of 300,000 empty objects, stored cheaply
through JSON-RPC's fast path — held every client's requests 1.7 s a REST GetTask (docs/security.md S16-3). So an
answer of more than `INLINE_ANSWER_VALUES` values (`many_values`, counted on its orjson serialization: under a
microsecond for a small task) is converted in the JSON body worker (`json_worker.ANSWER`, `convert_as_data`), the
event loop paying for the pickle it sends and for `ParseFromString` (C) of the protobuf answered, the unpickling of a
dict answered (the SDK's JSON-RPC dispatcher renders it), or nothing more for REST's rendered bytes. Either side, the same function (`convert`) makes the answer: byte for byte what the SDK made.

This module imports nothing of the gateway: the worker loads the SDK's types and nothing more.
"""

from __future__ import annotations

import builtins
import json
import pickle
from typing import Any

import orjson
from a2a.types import ListTasksResponse, Message, SendMessageResponse, StreamResponse, Task
from a2a.utils import proto_utils
from google.protobuf import json_format

from .request_body import json_values

KINDS: tuple[type[Any], ...] = (Task, Message, ListTasksResponse, SendMessageResponse, StreamResponse)
"""The protobuf types an answer is converted into (a job names one by its index)."""
TASK, MESSAGE, LIST_TASKS, SEND_RESPONSE, STREAM_EVENT = range(len(KINDS))

PROTO, DICT, LIST, LIST_ARTIFACTS, EVENT, V03_MODEL, V03_DICT, V03_EVENT, V03_EVENT_DICT = range(9)
"""What an answer is converted to: `PROTO`, the serialized protobuf (`ParseFromString` reads it on the loop); `DICT`,
the SDK's `MessageToDict` of it; `LIST` / `LIST_ARTIFACTS`, the SDK's `serialize_list_tasks_response` of a page
(without or with the tasks' artifacts); `EVENT`, what the SDK's REST and JSON-RPC dispatchers make of a stream's event
(`MessageToDict` of its StreamResponse; None for an event with no payload, which is not sent). v0.3's answers (of
`TASK`, `MESSAGE` or `SEND_RESPONSE`): `V03_MODEL`, the SDK's v0.3 model of it (`conversions.to_compat_task` or
`to_compat_message`, what its JSON-RPC adapter answers with); `V03_DICT`, what its REST handler answers (`MessageToDict`
of the model's v0.3 protobuf: `ToProto.task`, or `ToProto.task_or_message` for a send); a stream's event in v0.3:
`V03_EVENT`, the `result` of the SDK's `to_compat_stream_response` (its JSON-RPC adapter's), `V03_EVENT_DICT`,
`MessageToDict` of its v0.3 protobuf (its REST handler's); None for an event with no payload. `rendered`: the dict as the
bytes Starlette's `JSONResponse` renders (REST's answers)."""

INLINE_ANSWER_VALUES = 2048
"""The most JSON values of an answer converted on the event loop (~10 ms at ~5 us a value); a larger one is converted
in the JSON body worker. Answers of at most this many bytes are not counted."""

HELD_BYTES_PER_VALUE = 96
"""What one JSON value of an answer (`request_body.json_values`' count) takes at most in the gateway as the parsed
document its request holds while the conversion waits for the worker (orjson's objects, tracemalloc): 32 B an empty
array's, 36 an empty object's in an array, 64-96 an object of one or two keys' share, 59-63 a short string's; a
string's own bytes are in the pickle's length, counted beside (docs/security.md S18-1)."""


def many_values(doc: Any) -> tuple[bytes, int] | None:
    """The pickle of an answer holding more than `INLINE_ANSWER_VALUES` values (the job's body, after the bytes
    `job_body` puts first) and what its document holds in the gateway meanwhile, at most (the pickle's bytes and
    `HELD_BYTES_PER_VALUE` a value: what the body worker's queue counts for it), else None: converted where it is. The
    values are counted on the answer's orjson serialization (~2 ms for 300,000 values; under a microsecond for a small
    task); the pickle (~20 ms for those) is sent, exact where orjson is not (it writes a NaN or an infinity as
    `null`). An answer orjson cannot write (an integer past 64 bits) is sent however small (its values counted on the
    standard library's JSON)."""
    try:
        data = orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):
        values = json_values(json.dumps(doc, default=repr).encode())
        pickled = pickle.dumps(doc, protocol=5)
        return pickled, len(pickled) + HELD_BYTES_PER_VALUE * values
    if len(data) <= INLINE_ANSWER_VALUES or (values := json_values(data)) <= INLINE_ANSWER_VALUES:
        return None
    del data
    pickled = pickle.dumps(doc, protocol=5)
    return pickled, len(pickled) + HELD_BYTES_PER_VALUE * values


def job_body(kind: int, mode: int, rendered: bool, data: bytes) -> bytes:
    """The body of a worker's `ANSWER` job: the kind, the mode, `rendered`, then `many_values`'s bytes."""
    return bytes((kind, mode, rendered)) + data


def convert(doc: Any, kind: int, mode: int, rendered: bool = False) -> Any:
    """The answer `doc` in `mode`'s form, as the SDK makes it (raising what it raises: `json_format.ParseError` for a
    document that is no `KINDS[kind]`); `rendered`: as `render`'s bytes."""
    proto = json_format.ParseDict(doc, KINDS[kind](), ignore_unknown_fields=True)
    if mode == PROTO:
        return proto.SerializeToString()
    if mode == V03_MODEL:
        return _v03(proto, kind, mode)
    if mode == V03_EVENT or mode == V03_EVENT_DICT:
        return _v03_event(proto, mode)
    content: Any
    if mode == V03_DICT:
        content = _v03(proto, kind, mode)
    elif mode == EVENT:  # the handler yields the event's payload; the SDK's dispatchers wrap it again
        which = proto.WhichOneof("payload")
        content = (None if which is None
                   else json_format.MessageToDict(proto_utils.to_stream_response(getattr(proto, which))))
    elif mode == DICT:
        content = json_format.MessageToDict(proto)
    else:
        content = json_format.MessageToDict(proto, preserving_proto_field_name=False,
                                            always_print_fields_with_no_presence=True)
        if mode == LIST:
            for task in content["tasks"]:
                task.pop("artifacts", None)
    return render(content) if rendered and content is not None else content


def _v03(proto: Any, kind: int, mode: int) -> Any:
    """The SDK's v0.3 answer of a task, a message or a send's answer (`V03_MODEL`, `V03_DICT`)."""
    from a2a.compat.v0_3 import conversions
    from a2a.compat.v0_3 import proto_utils as v03_proto_utils

    inner = proto
    if kind == SEND_RESPONSE:
        inner = proto.message if proto.HasField("message") else proto.task
    if isinstance(inner, Message):
        message = conversions.to_compat_message(inner)
        if mode == V03_MODEL:
            return message
        return json_format.MessageToDict(v03_proto_utils.ToProto.task_or_message(message))
    task = conversions.to_compat_task(inner)
    if mode == V03_MODEL:
        return task
    if kind == SEND_RESPONSE:
        return json_format.MessageToDict(v03_proto_utils.ToProto.task_or_message(task))
    return json_format.MessageToDict(v03_proto_utils.ToProto.task(task))


def _v03_event(proto: Any, mode: int) -> Any:
    """A stream's event in v0.3 (`V03_EVENT`, `V03_EVENT_DICT`), None for one with no payload."""
    from a2a.compat.v0_3 import conversions
    from a2a.compat.v0_3 import proto_utils as v03_proto_utils

    which = proto.WhichOneof("payload")
    if which is None:
        return None
    result = conversions.to_compat_stream_response(proto_utils.to_stream_response(getattr(proto, which))).result
    if mode == V03_EVENT:
        return result
    return json_format.MessageToDict(v03_proto_utils.ToProto.stream_response(result))


def render(content: Any) -> bytes:
    """Starlette's `JSONResponse.render`, which the SDK's REST responses use."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def convert_as_data(body: bytes) -> tuple[Any, ...]:
    """A worker's `ANSWER` job (`job_body`): `(True, answer)`, or `(False, exception class name, message)` for what
    the conversion raised (`raise_failure` raises it again)."""
    kind, mode, rendered = body[0], body[1], bool(body[2])
    doc = pickle.loads(memoryview(body)[3:])  # the gateway's own pickle (`many_values`)
    del body
    try:
        return True, convert(doc, kind, mode, rendered)
    except Exception as exc:  # noqa: BLE001 (raised again as what it was, on the loop)
        return False, type(exc).__name__, str(exc)


def raise_failure(answer: tuple[Any, ...]) -> Any:
    """The converted answer of a `convert_as_data` job, or what the conversion raised, raised again: an exception of
    `json_format` or a built-in one of that name, else a `RuntimeError` saying it."""
    if answer[0]:
        return answer[1]
    name, message = answer[1], answer[2]
    if name == "ParseError":
        raise json_format.ParseError(message)
    for module in (json_format, builtins):  # (`SerializeToJsonError`: a NaN `MessageToDict` cannot write)
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            raise cls(message)
    raise RuntimeError(f"{name}: {message}")
