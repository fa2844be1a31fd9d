"""A2A 1.0 `SendMessageRequest`s in the a2a-sdk's protobuf form, checked as an a2a-sdk agent checks them and read
into the JSON the gateway's pipeline takes: from a parsed request (small ones, read on the event loop), from the
bytes of a gRPC request (parsed as grpc parses them), or from a REST body, read as the SDK's REST binding reads it
(`json_format.Parse`; v0.3's through the SDK's v0.3 types). REST push-config bodies are parsed here too.

The JSON body worker process (`json_worker`) reads large REST bodies and gRPC requests here: this module imports
nothing of the gateway, so the worker loads the SDK's types and nothing more.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import Any

from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from a2a.utils import errors as sdk_errors
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from .errors import InvalidParams

MAX_STRUCT_BYTES = 1 << 20
"""The most bytes of `Struct`/`Value` fields (metadata, data parts, configuration) a protobuf request may carry into
`MessageToDict` (pure Python): an empty struct is 4 bytes on the wire, and 8 MiB of them took 26 s to convert (load
average 14). JSON-RPC bodies are bounded by their values instead (`check_json_values`)."""


def check_required(params: SendMessageRequest | GetTaskRequest | CancelTaskRequest | SubscribeToTaskRequest) -> None:
    """The required fields checked as an a2a-sdk agent checks them, with its error (`InvalidParamsError`, the missing
    fields in ErrorInfo and BadRequest); the SDK's walk of the whole request (~100 us on a message) only once a
    cheap look finds one missing."""
    if isinstance(params, SendMessageRequest):
        m = params.message
        complete = (params.HasField("message") and bool(m.message_id) and m.role != 0 and len(m.parts) > 0
                    and not params.configuration.HasField("task_push_notification_config"))
    else:
        complete = bool(params.id)
    if not complete:
        validate_proto_required_fields(params)


def struct_fields(params: SendMessageRequest) -> list[tuple[str, int]]:
    """The request's free-form JSON fields (metadata, data parts, configuration) and their sizes in bytes, computed in
    C without a walk in Python: what `MessageToDict` (pure Python, ~3 us a value) will convert."""
    m = params.message
    fields = [("message.metadata", m.metadata.ByteSize())]
    fields += [(f"message.parts[{i}]", p.metadata.ByteSize() + (p.data.ByteSize() if p.HasField("data") else 0))
               for i, p in enumerate(m.parts)]
    fields += [("configuration", params.configuration.ByteSize()), ("metadata", params.metadata.ByteSize())]
    return fields


def repeated_elements(params: SendMessageRequest) -> int:
    """The elements of the request's repeated fields (parts, extensions, reference task ids, accepted output modes),
    each counted in C: `MessageToDict` converts each in Python (~5 us an empty part), and two bytes make one, so a
    1 MiB gRPC request of empty parts (524,288) held the loop for seconds without a byte of free-form fields."""
    m = params.message
    return (len(m.parts) + len(m.extensions) + len(m.reference_task_ids)
            + len(params.configuration.accepted_output_modes))


def check_struct_bytes(params: SendMessageRequest) -> None:
    """`InvalidParams` naming the field when the request's free-form JSON fields pass `MAX_STRUCT_BYTES`."""
    fields = struct_fields(params)
    total = sum(n for _, n in fields)
    if total > MAX_STRUCT_BYTES:
        where = max(fields, key=lambda f: f[1])[0]
        raise InvalidParams(f"{where}: the request's metadata, data and configuration take {total} bytes, the most is "
                            f"{MAX_STRUCT_BYTES}; send large data by reference (POST /blobs)", field=where)


def send_request_json(params: SendMessageRequest) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The request's message and configuration (None when it has none) as the pipeline takes them, once checked:
    the SDK's `InvalidParamsError` for a missing field, `InvalidParams` for free-form fields too large."""
    check_required(params)
    check_struct_bytes(params)
    message = json_format.MessageToDict(params.message)
    config = json_format.MessageToDict(params.configuration) if params.HasField("configuration") else None
    return message, config


def read_send_body(body: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`send_request_json` of a REST `message:send` / `message:stream` body, parsed as the SDK's REST binding parses
    it (`json_format.Parse`, `ignore_unknown_fields`: the same steps, the same `ParseError`s).

    One shortcut, exact: a part's `raw` that is canonical base64 (`canonical_base64`) decodes and encodes back to
    itself, so it is set aside while the SDK's `ParseDict` reads the rest and put back into the JSON after; for a
    20 MB image that skips ~0.45 s of decoding and encoding (the body worker's CPU per large body: ~0.6 -> ~0.15 s)."""
    text = body.decode("utf-8")  # as `Parse` (the gateway refused bytes that are not UTF-8 JSON before)
    try:
        js = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except Exception as exc:
        raise json_format.ParseError(f"Failed to load JSON: {exc}.") from exc
    kept = _set_aside_raw(js)
    params = SendMessageRequest()
    try:
        json_format.ParseDict(js, params, ignore_unknown_fields=True)
    except json_format.ParseError:
        raise
    except Exception as exc:
        raise json_format.ParseError(f"Failed to parse JSON: {type(exc).__name__}: {exc}.") from exc
    message, config = send_request_json(params)
    for i, raw in kept:
        message["parts"][i]["raw"] = raw
    return message, config


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json_format.Parse`'s check: an object naming a key twice is refused."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise json_format.ParseError(f"Failed to load JSON: duplicate key {name}.")
        out[name] = value
    return out


SET_ASIDE_BYTES = 4096
"""`raw` strings from this long are looked at for the shortcut (shorter ones cost nothing to decode)."""
_PLACEHOLDER = "AAAA"  # canonical base64 of three zero bytes: parsed as a raw part is, in its place
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _set_aside_raw(js: Any) -> list[tuple[int, str]]:
    """The canonical base64 `raw` strings of `js`'s message parts, by part index, each replaced by `_PLACEHOLDER`."""
    message = js.get("message") if isinstance(js, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return []
    kept = []
    for i, part in enumerate(parts):
        raw = part.get("raw") if isinstance(part, dict) else None
        if isinstance(raw, str) and len(raw) >= SET_ASIDE_BYTES and canonical_base64(raw):
            part["raw"] = _PLACEHOLDER
            kept.append((i, raw))
    return kept


def canonical_base64(text: str) -> bool:
    """Whether `text` is standard base64 as `MessageToDict` writes bytes (alphabet, `=` padding to a multiple of 4,
    zero unused bits): exactly the strings the SDK's decode and encode give back unchanged."""
    if len(text) % 4 or not text.isascii():
        return False
    data = text.encode("ascii")
    stripped = data.rstrip(b"=")
    if len(data) - len(stripped) > 2 or stripped.translate(None, _ALPHABET):
        return False
    last = data[-4:]
    return not last or binascii.b2a_base64(binascii.a2b_base64(last), newline=False) == last


def read_send_body_as_data(body: bytes) -> tuple[Any, ...]:
    """`read_send_body`, its refusal returned as data (what the worker process answers; `raise_refusal` raises it
    again): `(True, message, config)`, or `(False, kind, ...)`."""
    return _as_data(read_send_body, body)


def read_send_proto_as_data(body: bytes) -> tuple[str, tuple[Any, ...]]:
    """A serialized `SendMessageRequest` (the bytes of a gRPC SendMessage or SendStreamingMessage, as grpc received
    them) parsed as the gRPC binding parses it (`FromString`), then `send_request_json`: the request's `tenant` and
    the answer, its refusal returned as data as `read_send_body_as_data`'s (bytes that are no such message:
    `(False, "DecodeError", text)`, the tenant '')."""
    try:
        params = SendMessageRequest.FromString(body)
    except DecodeError as exc:
        return "", (False, "DecodeError", str(exc))
    return params.tenant, _as_data(lambda _: send_request_json(params), body)


def read_known_fields_as_data(body: bytes) -> tuple[Any, ...]:
    """A serialized request of an A2A gRPC method (`body`: its type's name in `a2a_pb2`, a newline, the bytes as grpc
    received them) parsed as grpc parses it (`FromString`), then serialized again without its unknown fields, which
    nothing reads: `(True, bytes)`, a request the loop parses in a few microseconds however many unknown fields came
    (4 MiB of small ones took `FromString` 10-26 ms, and grpc takes up to `max_body_bytes`); bytes that are no such
    message: `(False, "DecodeError", text)`."""
    from a2a.types import a2a_pb2

    name, _, data = body.partition(b"\n")
    cls = getattr(a2a_pb2, name.decode("ascii"), None)
    if not (isinstance(cls, type) and issubclass(cls, ProtoMessage)):
        return False, "DecodeError", f"no A2A request type {name[:64]!r}"
    request: ProtoMessage = cls()
    try:
        request.ParseFromString(data)
    except DecodeError as exc:
        return False, "DecodeError", str(exc)
    request.DiscardUnknownFields()
    return True, request.SerializeToString()


def read_v03_send_body_as_data(body: bytes) -> tuple[Any, ...]:
    """A v0.3 REST `message:send` / `message:stream` body read as the SDK's v0.3 REST handler reads it (`Parse` into
    its v0.3 `SendMessageRequest`, its v0.3 params, the request in 1.0's form), then `send_request_json` (the
    gateway's handler's read of it): the answer as `read_send_body_as_data`'s."""
    from a2a.compat.v0_3 import a2a_v0_3_pb2 as pb2_v03
    from a2a.compat.v0_3 import conversions, proto_utils
    from a2a.compat.v0_3 import types as types_v03

    def read(data: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
        v03 = pb2_v03.SendMessageRequest()
        json_format.Parse(data, v03, ignore_unknown_fields=True)
        params = types_v03.SendMessageRequest(id="", params=proto_utils.FromProto.message_send_params(v03))
        return send_request_json(conversions.to_core_send_message_request(params))

    return _as_data(read, body)


JSONRPC_SEND_METHODS = ("SendMessage", "SendStreamingMessage")


def read_jsonrpc_as_data(body: bytes) -> tuple[Any, ...]:
    """A JSON-RPC body of one of A2A 1.0's methods read as the SDK's JSON-RPC dispatcher reads it (`json.loads` of the
    body, `ParseDict` of its `params` into the method's type, unknown fields ignored); for SendMessage and
    SendStreamingMessage, then `send_request_json`:
    - `("read", stub, answer)`: a send; `answer` as `read_send_body_as_data`'s, and `stub` the same request with
      `params` holding only the tenant (JSON bytes; members other than JSON-RPC's kept by name, as null, so that the
      dispatcher's checks of the request's members answer the stub as they answer the body);
    - `("stub", stub)`: another method; `stub` the same request with `params` as they were read (`MessageToDict`:
      without the body's padding or unknown fields, parsed again into the same message);
    - `("params", stub, text)`: `ParseDict` refused the params (the SDK answers `InvalidParamsError` with that text,
      once the members pass its checks);
    - `("v03", stub, text)`: v0.3's `message/send` or `message/stream`, which the dispatcher's v0.3 adapter reads
      (its pydantic model of the whole request, then the request in 1.0's form): `("read", …)` when it reads, else
      this, the model's refusal (the adapter answers `InvalidRequestError` with that text);
    - `("other", method, id)`: another method (v0.3's others, which its adapter reads with pydantic; a name no binding
      knows): the dispatcher reads it whole (`json.loads`, a model) wherever it runs;
    - `("other",)`: a body that is not a JSON object with a string method."""
    try:
        doc = json.loads(body)
    except ValueError:
        return ("other",)
    return read_jsonrpc_doc_as_data(doc, body)


def read_jsonrpc_doc_as_data(doc: Any, body: bytes) -> tuple[Any, ...]:
    """`read_jsonrpc_as_data` of the body `body`, parsed already into `doc` as `json.loads` parses it."""
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher  # its table of methods and their params

    if not isinstance(doc, dict) or not isinstance(doc.get("method"), str):
        return ("other",)
    stub = {k: (doc[k] if k in ("jsonrpc", "method", "id") else None) for k in doc}
    if doc["method"] in V03_SEND_METHODS:
        return _read_v03_jsonrpc(doc, stub, body)
    model = JsonRpcDispatcher.METHOD_TO_MODEL.get(doc["method"])
    if model is None:
        return "other", doc["method"], doc.get("id")
    params = model()
    try:
        json_format.ParseDict(doc.get("params", {}), params, ignore_unknown_fields=True)
    except Exception as exc:  # the SDK's dispatcher: InvalidParamsError(data={'parseError': str(e)})
        return "params", json.dumps(stub).encode(), str(exc)
    if doc["method"] not in JSONRPC_SEND_METHODS:
        if "params" in doc:
            stub["params"] = json_format.MessageToDict(params)
        return "stub", json.dumps(stub).encode()
    if "params" in doc:
        stub["params"] = {"tenant": params.tenant} if params.tenant else {}
    return "read", json.dumps(stub).encode(), _as_data(lambda _: send_request_json(params), body)


V03_SEND_METHODS = ("message/send", "message/stream")
_V03_STUB_PARAMS = {"message": {"kind": "message", "messageId": "-", "role": "user", "parts": []}}
"""A v0.3 send's params that its model takes and that convert to 1.0's form: what the stub carries (the handler
takes the worker's answer, not these)."""


def _read_v03_jsonrpc(doc: dict[str, Any], stub: dict[str, Any], body: bytes) -> tuple[Any, ...]:
    """`read_jsonrpc_as_data` of a v0.3 send: the adapter's `model_validate` of the request, its conversion to 1.0's
    `SendMessageRequest` (as the SDK's v0.3 handler converts it), then `send_request_json`."""
    from a2a.compat.v0_3 import conversions
    from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter

    try:
        model: Any = JSONRPC03Adapter.METHOD_TO_MODEL[doc["method"]]
        request = model.model_validate(doc)
    except Exception as exc:  # the adapter: InvalidRequestError(data=str(e))
        return "v03", json.dumps(stub).encode(), str(exc)
    if "params" in doc:
        stub["params"] = _V03_STUB_PARAMS
    return "read", json.dumps(stub).encode(), _as_data(
        lambda _: send_request_json(conversions.to_core_send_message_request(request)), body)


def read_push_config_as_data(body: bytes, v03: bool = False) -> tuple[Any, ...]:
    """A REST push-config `POST` body parsed as the SDK's endpoint parses it (`Parse`, unknown fields ignored; 1.0: a
    `TaskPushNotificationConfig`, `v03`: the v0.3 `CreateTaskPushNotificationConfigRequest`): `(True, serialized)`
    (what was read, without the body's padding or unknown fields), or its refusal as `read_send_body_as_data`'s."""
    if v03:
        from a2a.compat.v0_3 import a2a_v0_3_pb2 as pb2_v03

        config: Any = pb2_v03.CreateTaskPushNotificationConfigRequest()
    else:
        config = TaskPushNotificationConfig()
    try:
        json_format.Parse(body, config, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        return False, "ParseError", str(exc)
    except Exception as exc:  # what the SDK's binding answers 500 `unknown exception`
        return False, "Exception", f"{type(exc).__name__}: {exc}"
    return True, config.SerializeToString()


def _as_data(read: Callable[[bytes], tuple[dict[str, Any], dict[str, Any] | None]], body: bytes) -> tuple[Any, ...]:
    try:
        message, config = read(body)
    except json_format.ParseError as exc:
        return False, "ParseError", str(exc)
    except sdk_errors.A2AError as exc:
        return False, "A2AError", type(exc).__name__, exc.message, exc.data
    except InvalidParams as exc:
        return False, "InvalidParams", exc.message, exc.field
    except Exception as exc:  # what the SDK's binding answers 500 `unknown exception` (it would have raised it too)
        return False, "Exception", f"{type(exc).__name__}: {exc}"
    return True, message, config


class UnexpectedBodyError(Exception):
    """A body the SDK's parse failed on with an exception of no known kind (answered 500, as the SDK answers it)."""


def raise_refusal(answer: tuple[Any, ...]) -> None:
    """Raise the refusal a `read_send_body_as_data` (or `read_send_proto_as_data`) answer carries (nothing for an
    accepted body)."""
    if answer[0]:
        return
    kind = answer[1]
    if kind == "ParseError":
        raise json_format.ParseError(answer[2])
    if kind == "DecodeError":  # what grpc's own deserializer raises (answered UNKNOWN `Unexpected <class …>: …`)
        raise DecodeError(answer[2])
    if kind == "A2AError":
        cls = getattr(sdk_errors, answer[2], None)
        if not (isinstance(cls, type) and issubclass(cls, sdk_errors.A2AError)):
            cls = sdk_errors.A2AError
        raise cls(answer[3], data=answer[4])
    if kind == "InvalidParams":
        raise InvalidParams(answer[2], field=answer[3])
    raise UnexpectedBodyError(answer[2])
