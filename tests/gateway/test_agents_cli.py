"""`mma2a agents` (the reference catalog, or a running gateway's agents) and `mma2a agent NAME` errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from tests.gateway.conftest import ADMIN, agent, agents, gateway


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "mma2a.cli", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_agents_lists_the_catalog_and_a_gateways_agents():
    code, out, _ = await run_cli("agents", "--json")
    catalog = {a["name"]: a for a in json.loads(out)}
    assert code == 0 and {"vision", "speech", "speaker", "captioner", "analyst"} <= catalog.keys()
    assert catalog["speech"]["transformer"] is True and "audio/*" in catalog["speech"]["inputModes"]
    async with agents({"vision": agent("vision", ["image/*"])}) as urls:
        async with gateway({"agents": [{"name": "vision", "url": urls["vision"]}]}) as (gw, url):
            code, out, _ = await run_cli("agents", "--gateway", url, "--json", env={"MMA2A_ADMIN_TOKEN": ADMIN})
            bad, _, err = await run_cli("agents", "--gateway", url, env={"MMA2A_ADMIN_TOKEN": "wrong"})
    listed = json.loads(out)
    assert code == 0 and [a["name"] for a in listed] == ["vision"] and listed[0]["healthy"] is True
    assert bad == 1 and "answered 403" in err and "admin API: invalid token" in err


async def test_agent_with_an_unknown_name_says_which_exist():
    code, _, err = await run_cli("agent", "nobody")
    assert code == 2
    assert err.strip().startswith("error: unknown agent 'nobody'; choose one of vision, speech, speaker, captioner, analyst")
