"""Session 19, S19-2, as the attack: the session pins (`limits.session_pins`) were bounded by entries alone, one client a
quarter of them, whatever the parts of each pin's routes. One client's sessions of 64 parts of media types of its own
held ~38 KB a pin on a live gateway (2,000 pins: +130 MB, none without sessions), so its quarter of the default 100,000
held ~950 MB, four clients the table's ~3.8 GB. Now the pins hold at most `PARTS_PER_PIN` parts a pin on average, one
client a quarter of those too (docs/security.md S19-2)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from mma2a.ext import EXTENSION_URI
from mma2a.routing.decision import PartRoute
from mma2a.routing.sessions import OWNER_SEP, PARTS_PER_PIN, SessionPins
from tests.gateway.conftest import agent, agents, gateway

MALLORY, ALICE = "tok-mallory-pins-19", "tok-alice-pins-19"
CLIENTS = [{"name": "mallory", "token": MALLORY}, {"name": "alice", "token": ALICE}]
RULES = {"rules": [{"name": "streams", "match": {"modality": "audio/*"},
                    "action": {"route_to": "ears", "pin_session": True}}]}


def chunk(mid: str, sid: str, parts: int, seq: int = 0) -> dict[str, Any]:
    """A session's chunk of `parts` parts, each of a media type of its own (~250 characters)."""
    raw = base64.b64encode(b"\x00").decode()
    return {"message": {"messageId": mid, "role": "ROLE_USER", "extensions": [EXTENSION_URI],
                        "parts": [{"raw": raw, "mediaType": f"audio/x-m; k={mid}-{j:03d}".ljust(250, "z")}
                                  for j in range(parts)],
                        "metadata": {EXTENSION_URI: {"session": {"id": sid, "seq": seq}}}}}


async def test_one_clients_many_part_pins_are_held_to_its_share_of_parts_and_anothers_pin_stays() -> None:
    specs = {"ears": agent("ears", ["audio/*"])}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "ears", "url": urls["ears"]}], "auth": {"clients": CLIENTS}, "rules": RULES,
               "features": False, "limits": {"session_pins": 40}}  # 80 parts, a client 20 parts and 10 pins
        async with gateway(cfg) as (gw, url), httpx.AsyncClient(timeout=30) as c:
            async def send(token: str, body: dict[str, Any]) -> dict[str, Any]:
                r = await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body},
                                 headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
                return r.json()  # type: ignore[no-any-return]

            pins = gw.pipeline.admission.pins
            alice = await send(ALICE, chunk("a0", "mic", 1))
            flood = [await send(MALLORY, chunk(f"m{i}", f"s{i}", 8)) for i in range(12)]
            mallorys = sorted(s.partition(OWNER_SEP)[2] for s in pins._pins if s.startswith("mallory" + OWNER_SEP))
            held = pins.owned_parts("mallory"), pins.parts
            alices = f"alice{OWNER_SEP}mic" in pins
            again = await send(ALICE, chunk("a1", "mic", 1, seq=1))
    assert all("result" in d for d in [alice, *flood, again])
    assert held[0] <= pins.max_parts_per_owner == 20 and held[1] <= pins.max_parts == 40 * PARTS_PER_PIN
    assert mallorys == ["s10", "s11"]  # her newest: 16 parts (before: her 10 newest, 80 parts)
    assert alices  # alice's pin outlived mallory's flood


def routes(n: int) -> tuple[PartRoute, ...]:
    return tuple(PartRoute(i, "audio/x", (), (), ()) for i in range(n))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["mallory", "alice", "bob", None]), st.integers(0, 30),
                          st.integers(1, 64), st.sampled_from(["pin", "pin", "pin", "release", "lookup"])),
                max_size=120))
def test_the_pins_never_hold_more_parts_than_their_bounds_and_always_the_newest(ops: list[tuple[Any, ...]]) -> None:
    pins = SessionPins(16)
    for owner, n, parts, op in ops:
        sid = f"{owner}{OWNER_SEP}s{n}" if owner else f"s{n}"
        if op == "pin":
            pins.pin(sid, 1, routes(parts))
            assert sid in pins  # the newest pin is always kept, however large
        elif op == "release":
            pins.release(sid)
        else:
            pins.lookup(sid, 1)
        assert pins.parts == sum(len(r) for _, r in pins._pins.values())
        assert len(pins) == 1 or (len(pins) <= 16 and pins.parts <= pins.max_parts)
        for who in ("mallory", "alice", "bob"):
            mine = [r for s, (_, r) in pins._pins.items() if s.startswith(who + OWNER_SEP)]
            assert pins.owned_parts(who) == sum(map(len, mine))
            assert len(mine) <= 1 or (len(mine) <= pins.max_per_owner and pins.owned_parts(who) <= pins.max_parts_per_owner)
