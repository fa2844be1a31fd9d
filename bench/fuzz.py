"""bench/fuzz: 10,000+ generated inputs over the gateway's attack surface (hypothesis).

JSON-RPC and REST bodies through a real gateway, the extension metadata readers and the
signature verifier, rule files, and the media decoders; the same targets and checks as
tests/security/test_fuzz.py, with many more examples. Prints the count per target and exits
non-zero on the first failure (hypothesis prints the shrunk input).

    .venv/bin/python bench/fuzz.py [--scale 1.0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402

from tests.security import fuzzing as fz  # noqa: E402

BASE = {"json-rpc bodies": 3000, "rest bodies": 2000, "extension metadata": 3000, "rule files": 1500, "media decoders": 1500}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    counts = {k: 0 for k in BASE}
    times: dict[str, float] = {}

    def opts(name: str) -> settings:
        return settings(max_examples=int(BASE[name] * args.scale), deadline=None, database=None,
                        suppress_health_check=list(HealthCheck))

    with fz.threaded_gateway() as url, fz.client(url) as c:
        @opts("json-rpc bodies")
        @given(body=fz.rpc_bodies)
        def rpc(body: bytes) -> None:
            counts["json-rpc bodies"] += 1
            r = c.post("/", content=body)
            fz.check_rpc_answer(r.status_code, r.content)

        @opts("rest bodies")
        @given(path=fz.rest_paths, body=fz.rest_bodies)
        def rest(path: str, body: bytes) -> None:
            counts["rest bodies"] += 1
            r = c.post(path, content=body)
            fz.check_rest_answer(r.status_code, r.content)

        for name, fn in (("json-rpc bodies", rpc), ("rest bodies", rest)):
            t0 = time.perf_counter()
            fn()
            times[name] = time.perf_counter() - t0

    @opts("extension metadata")
    @given(message=fz.messages)
    def ext(message: object) -> None:
        counts["extension metadata"] += 1
        fz.check_extension(message)

    @opts("rule files")
    @given(text=fz.rule_docs)
    def rules(text: str) -> None:
        counts["rule files"] += 1
        fz.check_rules(text)

    @opts("media decoders")
    @given(item=fz.media())
    def media(item: tuple[str, bytes]) -> None:
        counts["media decoders"] += 1
        fz.check_media(item)

    for name, fn in (("extension metadata", ext), ("rule files", rules), ("media decoders", media)):
        t0 = time.perf_counter()
        fn()
        times[name] = time.perf_counter() - t0

    total = sum(counts.values())
    if args.json:
        print(json.dumps({"counts": counts, "seconds": times, "total": total, "failures": 0}))
        return
    for name, n in counts.items():
        print(f"{name:20s} {n:6d} inputs  {times[name]:6.1f} s  ok")
    print(f"{'total':20s} {total:6d} inputs, 0 failures")


if __name__ == "__main__":
    main()
