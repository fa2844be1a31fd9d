"""bench/ab: one benchmark script run against two source trees, interleaved, so the machine's noise hits both alike.

Each round runs the script once with `PYTHONPATH=A` and once with `PYTHONPATH=B` (the order alternating),
and reads the JSON the script prints; `--key` names the figures to compare (dotted paths into that JSON).
Prints each round and the median of B/A per key.

    .venv/bin/python bench/ab.py --a /tmp/base/src --b src --rounds 5 \\
        --key levels.4.arms.gateway.rps --key levels.4.arms.gateway.cpu_us_per_req \\
        -- bench/gateway.py --arms gateway --rounds 1 --levels 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def dig(doc: Any, path: str) -> float:
    for key in path.split("."):
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return float(doc)


def run(tree: str, script: list[str]) -> Any:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run([sys.executable, *script], env=env, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout[out.stdout.index("{"):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="source tree A (the baseline)")
    ap.add_argument("--b", required=True, help="source tree B")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--key", action="append", required=True)
    ap.add_argument("script", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    ratios: dict[str, list[float]] = {k: [] for k in args.key}
    rows = []
    for i in range(args.rounds):
        order = [("a", args.a), ("b", args.b)] if i % 2 == 0 else [("b", args.b), ("a", args.a)]
        got = {name: run(tree, script) for name, tree in order}
        row = {k: {"a": dig(got["a"], k), "b": dig(got["b"], k)} for k in args.key}
        for k, v in row.items():
            ratios[k].append(v["b"] / v["a"] if v["a"] else float("nan"))
        rows.append(row)
        print(json.dumps({"round": i + 1, **row}), flush=True)
    print(json.dumps({"median_b_over_a": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
                      "all_b_over_a": {k: [round(x, 3) for x in v] for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
