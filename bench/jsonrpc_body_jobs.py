"""bench/jsonrpc_body_jobs: what a large JSON-RPC body the SDK's dispatcher answers (SendStreamingMessage, one
`--mb` MB base64 image inline) costs the JSON body worker and the gateway's loop, in process: parsed once
(`json_worker.RPC`: the ingress's document and the dispatcher's read from one `orjson.loads`) against the two jobs
it took before (the ingress's parse, `request_body.parse_json_body_as_data`, then the dispatcher's,
`sdk_requests.read_jsonrpc_as_data`), interleaved (ABBA). Reports the best of `--rounds` of each: the worker's CPU (the
jobs and the pickling of their answers), the bytes through the pipes (body in, answers out) and the loop's CPU to
unpickle the answers.

    PYTHONPATH=src .venv/bin/python bench/jsonrpc_body_jobs.py [--mb 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import base64
import gc
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import orjson

from mma2a import json_worker, sdk_requests
from mma2a.request_body import parse_json_body_as_data


def cpu(f: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()  # (what the arm before left is not this arm's to collect)
    t0 = time.process_time()
    out = f()
    return time.process_time() - t0, out


def main(mb: float, rounds: int) -> None:
    big = base64.b64encode(os.urandom(int(mb * 1e6))).decode()
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"raw": big, "mediaType": "image/png"}]}}})
    arms: dict[str, Callable[[], list[bytes]]] = {
        "two jobs": lambda: [pickle.dumps(parse_json_body_as_data(body, 64), protocol=5),
                             pickle.dumps(sdk_requests.read_jsonrpc_as_data(body), protocol=5)],
        "one job": lambda: [pickle.dumps(json_worker.run(json_worker.RPC, body, 64), protocol=5)],
    }
    bodies_in = {"two jobs": 2, "one job": 1}
    best: dict[str, tuple[float, float, int]] = {}
    for r in range(rounds):
        for name, arm in (list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]):  # ABBA: neither always first
            worker_s, answers = cpu(arm)
            loop_s, _ = cpu(lambda: [pickle.loads(a) for a in answers])
            size = sum(map(len, answers))
            w, lp, _n = best.get(name, (float("inf"), float("inf"), 0))
            best[name] = (min(w, worker_s), min(lp, loop_s), size)
    print(f"body {len(body) / 1e6:.1f} MB, best of {rounds} interleaved rounds")
    for name, (w, lp, size) in best.items():
        print(f"  {name}: worker CPU {w * 1e3:.0f} ms, pipes {bodies_in[name] * len(body) / 1e6:.1f} MB in + "
              f"{size / 1e6:.1f} MB out, loop CPU to unpickle {lp * 1e3:.1f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    main(args.mb, args.rounds)
