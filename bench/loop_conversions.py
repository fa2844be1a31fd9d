"""bench/loop_conversions: what the gateway's event loop still converts itself, at its worst, in process
(docs/security.md LN2-LN4).

1. gRPC SendMessage of many repeated elements (`--bytes` of empty parts, 2 bytes each; of empty extensions): the
   loop's work before (grpc's `FromString` up to the inline size, 1 MiB; `ByteSize`; `struct_fields`, a walk of the
   parts; `send_request_json`, `MessageToDict`) and now (parsed on the loop up to `INLINE_GRPC_BYTES`, 64 KiB, then
   `repeated_elements` and `ByteSize`, and `SerializeToString` for the worker; past it nothing but the bytes handed
   over), best of `--rounds`; and what `repeated_elements` adds to a plain request's conversion.
2. Push-config answers, still converted on the loop: the largest a client can store (`push.max_config_bytes`, 4,096
   bytes of JSON: URL, token, credentials) as GetTaskPushNotificationConfig answers it on REST (`ParseDict` into the
   SDK's config, then `MessageToDict` and the JSON response), and a ListTaskPushNotificationConfigs of the most a task
   holds (`push.max_configs_per_task`, 8), best of `--rounds` of 1,000.
3. Another method's request (GetTask, ListTasks) padded with `--unknown-mib` MiB (64: `max_body_bytes`) of small
   unknown fields: grpc's `FromString` on the loop before, now the parse of what the worker sends back (LN4); and
   what the door's own parse costs a small request of such a method, against `FromString` alone.

    PYTHONPATH=src .venv/bin/python bench/loop_conversions.py [--bytes 1048576] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from a2a.types import ListTaskPushNotificationConfigsResponse, SendMessageRequest, TaskPushNotificationConfig, a2a_pb2
from google.protobuf import json_format
from starlette.responses import JSONResponse

from mma2a.gateway.bindings.body_parser import INLINE_GRPC_BYTES, INLINE_SDK_REPEATED
from mma2a.gateway.config import PushSettings
from mma2a.sdk_requests import repeated_elements, send_request_json, struct_fields


def best(fn: Callable[[], Any], rounds: int, n: int = 1) -> float:
    out = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out = min(out, (time.perf_counter() - t0) / n)
    return out


def many(kind: str, size: int) -> bytes:
    r = SendMessageRequest(message=a2a_pb2.Message(message_id="m1", role=a2a_pb2.ROLE_USER))
    if kind == "parts":
        r.message.parts.extend(a2a_pb2.Part() for _ in range(size // 2))
    else:
        r.message.parts.add().text = "hi"
        r.message.extensions.extend([""] * (size // 2))
    return r.SerializeToString()


def before(data: bytes) -> None:
    params = SendMessageRequest.FromString(data)
    params.ByteSize()
    sum(n for _, n in struct_fields(params))
    try:
        send_request_json(params)
    except Exception:  # noqa: BLE001 (the refusal of many parts comes later, in the pipeline)
        pass


def now(data: bytes) -> None:
    if len(data) > INLINE_GRPC_BYTES:
        return  # handed to the worker as bytes
    params = SendMessageRequest.FromString(data)
    assert params.ByteSize() > 2 * INLINE_SDK_REPEATED and repeated_elements(params) > INLINE_SDK_REPEATED
    params.SerializeToString()  # (for the worker)


def grpc_requests(size: int, rounds: int) -> None:
    print(f"gRPC SendMessage of many repeated elements, the loop's work, best of {rounds}:")
    for kind in ("parts", "extensions"):
        for n in (size, INLINE_GRPC_BYTES - 32):  # (the largest parsed on the loop now)
            data = many(kind, n)
            b, a = best(lambda: before(data), rounds), best(lambda: now(data), rounds)
            print(f"  {len(data):,} bytes of empty {kind}: before {b * 1e3:,.1f} ms, now {a * 1e3:,.2f} ms")
    plain = SendMessageRequest(message=a2a_pb2.Message(message_id="m1", role=a2a_pb2.ROLE_USER,
                                                       parts=[a2a_pb2.Part(text="hello there")]))
    count = best(lambda: repeated_elements(plain), rounds, 100_000)
    convert = best(lambda: send_request_json(plain), rounds, 10_000)
    print(f"  a plain request ({plain.ByteSize()} bytes, not counted: at most {2 * INLINE_SDK_REPEATED}): counted it would "
          f"take {count * 1e6:.2f} us (repeated_elements), against its conversion {convert * 1e6:.1f} us")


def other_methods(mib: int, rounds: int) -> None:
    """A GetTask (and the other methods' requests) padded with `mib` MiB of small unknown fields (field 99, varint
    0: 3 bytes each): grpc's `FromString` on the loop before; now the worker's bytes back, without them."""
    from a2a.types import GetTaskRequest, ListTasksRequest

    from mma2a.sdk_requests import read_known_fields_as_data

    print(f"another method's request padded with {mib} MiB of small unknown fields, the loop's parse, best of {rounds}:")
    for cls in (GetTaskRequest, ListTasksRequest):
        data = cls(tenant="t").SerializeToString() + b"\x98\x06\x00" * ((mib << 20) // 3)
        back = read_known_fields_as_data(cls.__name__.encode() + b"\n" + data)[1]
        b, a = best(lambda: cls.FromString(data), rounds), best(lambda: cls.FromString(back), rounds, 1000)
        print(f"  {cls.__name__}: before {b * 1e3:,.1f} ms, now {a * 1e6:.2f} us ({len(back)} bytes back)")


def door_cost(rounds: int) -> None:
    """A small request of another method (ListTasks) as the door now parses it (`Admission._parse`: a coroutine, two
    length checks, `FromString`) against `FromString` alone (what grpc's deserializer called), best of `rounds` x
    200,000."""
    import asyncio

    from a2a.types import ListTasksRequest

    from mma2a.gateway.bindings.body_parser import JSONBodyParser
    from mma2a.gateway.bindings.grpc_gate import Admission

    data = ListTasksRequest(page_size=10).SerializeToString()
    parse = ListTasksRequest.FromString
    gate = Admission.__new__(Admission)
    gate.bodies = JSONBodyParser(64)
    n = 200_000

    async def door() -> None:
        for _ in range(n):
            await gate._parse(data, parse, "/lf.a2a.v1.A2AService/ListTasks", "alice")

    def plain() -> None:
        for _ in range(n):
            parse(data)

    alone = best(plain, rounds) / n
    now = best(lambda: asyncio.run(door()), rounds) / n
    print(f"a small ListTasks request parsed: FromString alone {alone * 1e6:.2f} us, by the door now {now * 1e6:.2f} us")


def push_configs(rounds: int) -> None:
    s = PushSettings()
    base = {"id": "c" * 64, "taskId": "t" * 36, "url": "https://hooks.example.com/" + "u" * 1000,
            "token": "k" * 1000, "authentication": {"scheme": "Bearer", "credentials": "x" * 1000}}
    import orjson

    pad = s.max_config_bytes - len(orjson.dumps(base))
    base["authentication"]["credentials"] += "x" * pad  # type: ignore[index]
    assert len(orjson.dumps(base)) == s.max_config_bytes

    def one() -> bytes:
        return bytes(JSONResponse(json_format.MessageToDict(json_format.ParseDict(base, TaskPushNotificationConfig()))).body)

    def listed() -> bytes:
        page = ListTaskPushNotificationConfigsResponse(configs=[json_format.ParseDict(base, TaskPushNotificationConfig())
                                                                for _ in range(s.max_configs_per_task)])
        return bytes(JSONResponse(json_format.MessageToDict(page)).body)

    print(f"push-config answers on the loop, the largest stored ({s.max_config_bytes:,} bytes), best of {rounds} x 1,000:")
    print(f"  GetTaskPushNotificationConfig (REST): {best(one, rounds, 1000) * 1e6:.0f} us")
    print(f"  ListTaskPushNotificationConfigs of {s.max_configs_per_task} (REST): {best(listed, rounds, 1000) * 1e6:.0f} us")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--unknown-mib", type=int, default=64)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    push_configs(args.rounds)
    grpc_requests(args.bytes, args.rounds)
    other_methods(args.unknown_mib, args.rounds)
    door_cost(args.rounds)
