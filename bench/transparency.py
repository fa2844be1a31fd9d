"""bench/transparency: how many conformance cases the gateway answers exactly as the agent does.

Runs the scenario list of tests/conformance against a sample a2a-sdk agent directly and through
a gateway (at /agents/{name} and at the root), on JSON-RPC and HTTP+JSON (and gRPC with
`--grpc`), and counts the (scenario, binding, surface) cases whose observables equal the
agent's: as they are, and with the differences documented in docs/operations.md
("Transparency") allowed. A scenario that raises counts as different. To compare with the code
before issue 15, run it on that checkout (its gateway has no gRPC; `--modes text/plain` gives
it a card it can read):

    git worktree add /tmp/mma2a-before 99963d8
    PYTHONPATH=/tmp/mma2a-before/src .venv/bin/python bench/transparency.py --modes text/plain
    PYTHONPATH=src .venv/bin/python bench/transparency.py --modes text/plain
    PYTHONPATH=src .venv/bin/python bench/transparency.py --grpc

`--kit` runs the conformance kit's checks of tests/conformance/test_tck.py instead (the kit's agent with push
on, the kit's webhook receiver; `--only push` keeps the checks whose name starts so), counting the same cases,
and for the push checks the kit's ten PUSH-* requirements per binding and surface, each judged as the kit
judges it. To measure the code before push notifications (issue 39), run the same tests against its sources:

    git worktree add /tmp/mma2a-before ae2e50e
    PYTHONPATH=/tmp/mma2a-before/src .venv/bin/python bench/transparency.py --kit --only push
    PYTHONPATH=src .venv/bin/python bench/transparency.py --kit --only push
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conformance.sut import Way, sample_agent  # noqa: E402
from tests.conformance.test_conformance import DIFFERENCES, SCENARIOS  # noqa: E402
from tests.gateway.conftest import gateway  # noqa: E402


@contextlib.asynccontextmanager
async def surfaces(modes: tuple[str, ...], grpc: bool) -> AsyncIterator[dict[str, Way]]:
    async with sample_agent("sut", grpc=grpc, modes=modes) as sut:
        cfg = {"agents": [{"name": "sut", "url": sut.url}], **({"grpc_listen": "127.0.0.1:0"} if grpc else {})}
        async with gateway(cfg) as (gw_, gw):
            g = (gw_.grpc_url or "") if grpc else ""
            yield {"direct": Way("direct", sut.url + "/", sut.url, sut.url, sut.grpc or ""),
                   "agent-path": Way("agent-path", f"{gw}/agents/sut", f"{gw}/agents/sut", f"{gw}/agents/sut", g, "sut"),
                   "root": Way("root", gw + "/", gw, gw, g)}


# the kit's push requirements: (check, what the kit asks of the check's view)
PUSH_REQUIREMENTS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "PUSH-CREATE-001": ("push_crud", lambda v: v["create"]["ok"] is True),
    "PUSH-CREATE-002": ("push_crud", lambda v: v["create"]["ok"] is True and v["get"]["ok"] is True),
    "PUSH-GET-001": ("push_crud", lambda v: v["get"]["ok"] is True),
    "PUSH-GET-002": ("push_crud", lambda v: v["get nonexistent"]["ok"] is False),
    "PUSH-LIST-001": ("push_crud", lambda v: v["list"]["ok"] is True),
    "PUSH-DEL-001": ("push_crud", lambda v: v["delete"]["ok"] is True and v["get deleted"]["ok"] is False),
    "PUSH-DEL-002": ("push_crud", lambda v: v["delete again"]["ok"] is True),
    "PUSH-DELIVER-001": ("push_delivery", lambda v: v.get("authorization") == "Bearer tck-test-token-auth"),
    "PUSH-DELIVER-002": ("push_delivery", lambda v: v.get("delivered") is True),
    "PUSH-DELIVER-003": ("push_delivery", lambda v: v.get("payload") in ("task", "status_update", "artifact_update",
                                                                          "message")),
}


async def kit(only: str) -> None:
    from tests.conformance.test_tck import CHECKS as KIT_CHECKS
    from tests.conformance.test_tck import DIFFERENCES as KIT_DIFFERENCES
    from tests.conformance.test_tck import kit_stack

    same = total = 0
    passed: dict[str, int] = {}
    differing: list[str] = []
    names = [n for n in KIT_CHECKS if n.startswith(only)]
    async with kit_stack() as stack, httpx.AsyncClient(timeout=30) as client:
        for name in names:
            for binding in ("jsonrpc", "rest"):
                seen: dict[str, Any] = {}
                for kind, way in stack.ways.items():
                    try:
                        seen[kind] = await KIT_CHECKS[name](client, way, binding, stack)
                    except Exception as exc:  # noqa: BLE001 - a check that breaks is a difference
                        seen[kind] = {"raised": f"{type(exc).__name__}: {exc}"}
                direct = seen.pop("direct")
                for kind, got in seen.items():
                    total += 1
                    override = KIT_DIFFERENCES.get((name, binding, kind), ({}, ""))[0]
                    if got == {**direct, **override}:
                        same += 1
                    else:
                        differing.append(f"{name}/{binding}/{kind}")
                for req, (check_name, asks) in PUSH_REQUIREMENTS.items():
                    if check_name != name:
                        continue
                    for kind, view in [("direct", direct), *seen.items()]:
                        try:
                            ok = asks(view)
                        except (KeyError, TypeError):
                            ok = False
                        passed[kind] = passed.get(kind, 0) + ok
    print(f"kit checks {names}: cases (check x binding x surface through the gateway) equal to the agent's: "
          f"{same}/{total}")
    if passed:
        n = sum(1 for r in PUSH_REQUIREMENTS.values() if r[0] in names) * 2
        print("the kit's PUSH-* requirements passed (x jsonrpc, rest): " +
              ", ".join(f"{kind} {k}/{n}" for kind, k in passed.items()))
    if differing:
        print("differing:", ", ".join(differing))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="text", help="the agent card's modes, comma-separated (default: text)")
    ap.add_argument("--grpc", action="store_true", help="the gRPC binding too")
    ap.add_argument("--kit", action="store_true", help="the conformance kit's checks (tests/conformance/test_tck.py)")
    ap.add_argument("--only", default="", help="with --kit: the checks whose name starts with this")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    if args.kit:
        await kit(args.only)
        return
    modes = tuple(args.modes.split(","))
    bindings = ["jsonrpc", "rest"] + (["grpc"] if args.grpc else [])
    same = allowed = total = 0
    differing: list[str] = []
    async with surfaces(modes, args.grpc) as ways, httpx.AsyncClient(timeout=30) as client:
        for name, scenario in SCENARIOS.items():
            for binding in bindings:
                results = {}
                for kind, way in ways.items():
                    try:
                        results[kind] = await scenario(client, way, binding)
                    except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a difference
                        results[kind] = {"raised": f"{type(exc).__name__}: {exc}"}
                direct = results.pop("direct")
                for kind, got in results.items():
                    total += 1
                    override = DIFFERENCES.get((name, binding, kind), ({}, ""))[0]
                    same += got == direct
                    if got == {**direct, **override}:
                        allowed += 1
                    else:
                        differing.append(f"{name}/{binding}/{kind}")
    print(f"cases: {total}  (scenarios {len(SCENARIOS)} x bindings {len(bindings)} x surfaces 2; card modes {list(modes)})")
    print(f"identical to the agent's answer: {same}/{total} ({same / total:.0%})")
    print(f"identical but for documented differences: {allowed}/{total} ({allowed / total:.0%})")
    if differing:
        print("differing:", ", ".join(differing))


if __name__ == "__main__":
    asyncio.run(main())
