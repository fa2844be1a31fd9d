"""Routing benchmark: compiled engine vs linear reference on synthetic rule sets (decisions checked equal).

    .venv/bin/python bench/routing.py                 # 10, 100, 1000, 10000 rules
    .venv/bin/python bench/routing.py 10 10000 --json

Same measurement as `mma2a bench routing`; figures go in docs/benchmarks.md ("Routing").
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

from mma2a.cli.bench import DEFAULT_COUNTS, measure_routing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", nargs="*", type=int, default=list(DEFAULT_COUNTS), help="rule counts")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--linear-messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure_routing(tuple(args.counts), messages=args.messages, linear_messages=args.linear_messages, rounds=args.rounds)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"python {platform.python_version()} on {platform.machine()}, {args.messages} messages x 2 parts, best of {args.rounds} rounds")
    print("| rules | compiled p50 (µs) | linear p50 (µs) | speedup | candidates evaluated / part |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['rules']:,} | {r['compiled_us_p50']:.1f} | {r['linear_us_p50']:.1f} | {r['speedup']:.0f}x | {r['candidates_per_part']:.2f} |")
    small = next((r for r in rows if r["rules"] == min(args.counts)), None)
    large = next((r for r in rows if r["rules"] == max(args.counts)), None)
    if small and large and small is not large:
        ratio = large["compiled_us_p50"] / small["compiled_us_p50"]
        print(f"\ncompiled median at {large['rules']:,} rules / at {small['rules']:,} rules: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
