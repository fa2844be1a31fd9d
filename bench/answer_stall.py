"""bench/answer_stall: what converting an answer costs the gateway's event loop, in process (docs/security.md S16-3).

1. A small answer (a completed task of ~1 KB, as bench/send_cost.py's SendMessage gets): what deciding where to convert
   it adds (`sdk_answers.many_values`: one orjson serialization and a length check), against its conversion itself
   (`ParseDict` into the SDK's Task, then `MessageToDict` for REST), best of `--rounds` of 10,000.
2. A task keeping a message of `--values` empty objects (S16-3's attack: 300,000): the longest the loop is held
   (the largest gap of a 1 ms ticker beside it) and the whole answer's time, for the SDK's conversions made on the
   loop (before: REST's `ParseDict` + `MessageToDict` + render, gRPC's `ParseDict`, v0.3 REST's `ParseDict` +
   `to_compat_task` + `ToProto.task` + `MessageToDict`; the worker's dict of the last is unpickled on the loop, which
   a measure of the gap includes) and as the gateway makes them now
   (`sdk_answers.many_values`, then the JSON body worker's `ANSWER` job; gRPC reads the protobuf back). Interleaved
   (ABBA), best of `--rounds`.

    PYTHONPATH=src .venv/bin/python bench/answer_stall.py [--values 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.types import Task
from a2a.server.routes.rest_dispatcher import A2AJSONResponse  # type: ignore[attr-defined]
from google.protobuf import json_format
from starlette.responses import Response

from mma2a.gateway.bindings.body_parser import JSONBodyParser
from mma2a.sdk_answers import DICT, PROTO, TASK, V03_DICT, convert, many_values


def task(values: int) -> dict[str, Any]:
    return {"id": "0f6e4c1a-4d1c-4c57-9f56-6a1f5d2b8c11", "contextId": "7d3b2a10-98f4-4d6e-b0b2-3c7e1f9a2d44",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-05T19:00:00.123456Z", "message": {
                "messageId": "b1", "role": "ROLE_AGENT", "parts": [{"text": "echo: hello there"}]}},
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello there"}],
                         "metadata": {"a": [{} for _ in range(values)]}}],
            "artifacts": [{"artifactId": "a1", "parts": [{"text": "echo: hello there"}]}],
            "metadata": {"https://mma2a.dev/ext/multimodal/v1": {"route": [{"index": 0, "modality": "text/plain",
                                                                         "targets": ["echo"], "matched": ["r1"]}]}}}


def small_cost(rounds: int) -> None:
    doc = task(2)
    n = 10_000
    best_decide = best_grpc = best_rest = float("inf")
    best_ab = {"REST GetTask's answer, before (the SDK's endpoint)": float("inf"), "now (`_rendered`)": float("inf")}

    def before() -> Any:  # the SDK's REST endpoint: the handler's `ParseDict`, its `MessageToDict`, a JSONResponse
        return A2AJSONResponse(content=json_format.MessageToDict(json_format.ParseDict(doc, Task(),
                                                                                          ignore_unknown_fields=True)))

    def now() -> Any:  # `PipelineRequestHandler.converted` inline, then `_rendered`'s Response
        data = many_values(doc)
        assert data is None
        return Response(convert(doc, TASK, DICT, True), media_type=A2AJSONResponse.media_type)

    assert before().body == now().body
    for r in range(rounds):
        for name, arm in ([*zip(best_ab, (before, now))] if r % 2 == 0 else [*zip(best_ab, (before, now))][::-1]):
            t0 = time.perf_counter()
            for _ in range(n // 10):
                arm()
            best_ab[name] = min(best_ab[name], (time.perf_counter() - t0) / (n // 10))
        t0 = time.perf_counter()
        for _ in range(n):
            many_values(doc)
        best_decide = min(best_decide, (time.perf_counter() - t0) / n)
        t0 = time.perf_counter()
        for _ in range(n // 10):
            json_format.ParseDict(doc, Task(), ignore_unknown_fields=True)
        best_grpc = min(best_grpc, (time.perf_counter() - t0) / (n // 10))
        t0 = time.perf_counter()
        for _ in range(n // 10):
            convert(doc, TASK, DICT, True)
        best_rest = min(best_rest, (time.perf_counter() - t0) / (n // 10))
    print(f"small answer ({len(__import__('orjson').dumps(doc))} bytes), best of {rounds} rounds:")
    print(f"  deciding where (many_values): {best_decide * 1e6:.2f} us; the conversion itself: gRPC's ParseDict "
          f"{best_grpc * 1e6:.0f} us, REST's ParseDict + MessageToDict + render {best_rest * 1e6:.0f} us")
    print("  " + ", ".join(f"{name}: {t * 1e6:.1f} us" for name, t in best_ab.items()))


async def held(step: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(the longest gap of a 1 ms ticker while `step` runs, `step`'s wall time)."""
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    await step()
    wall = time.perf_counter() - t0
    done = True
    await tick
    return max(gaps), wall


async def large_cost(values: int, rounds: int) -> None:
    doc = task(values)
    bodies = JSONBodyParser(64)

    async def rest_loop() -> Any:
        return convert(doc, TASK, DICT, True)

    async def rest_worker() -> Any:
        data = many_values(doc)
        assert data is not None
        return await bodies.convert_answer(TASK, DICT, True, data)

    async def grpc_loop() -> Any:
        return json_format.ParseDict(doc, Task(), ignore_unknown_fields=True)

    async def grpc_worker() -> Any:
        data = many_values(doc)
        assert data is not None
        out = Task()
        out.ParseFromString(await bodies.convert_answer(TASK, PROTO, False, data))
        return out

    async def v03_loop() -> Any:
        return convert(doc, TASK, V03_DICT)

    async def v03_worker() -> Any:
        data = many_values(doc)
        assert data is not None
        return await bodies.convert_answer(TASK, V03_DICT, False, data)

    try:
        assert await rest_loop() is not None and await rest_worker() is not None  # (the worker started and warm)
        arms = {"REST GetTask, on the loop (before)": rest_loop, "REST GetTask, in the worker": rest_worker,
                "gRPC GetTask, on the loop (before)": grpc_loop, "gRPC GetTask, in the worker": grpc_worker,
                "v0.3 REST GetTask, on the loop (before)": v03_loop, "v0.3 REST GetTask, in the worker": v03_worker}
        best: dict[str, tuple[float, float]] = {}
        for r in range(rounds):
            for name, arm in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):
                gap, wall = await held(arm)
                g, w = best.get(name, (float("inf"), float("inf")))
                best[name] = (min(g, gap), min(w, wall))
    finally:
        await bodies.close()
    print(f"a task keeping {values:,} empty objects, best of {rounds} interleaved rounds:")
    for name, (gap, wall) in best.items():
        print(f"  {name}: loop held at most {gap * 1e3:.0f} ms, the answer {wall * 1e3:.0f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    small_cost(args.rounds)
    asyncio.run(large_cost(args.values, args.rounds))
