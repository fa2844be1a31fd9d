"""`mma2a send`: a small file inline, a big one uploaded and sent by reference, through a real gateway."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import sys

import httpx
from google.protobuf import json_format

from tests.gateway.conftest import agent, agents, gateway
from tests.media import png_bytes


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "mma2a.cli", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_send_uploads_big_files_and_routes_each_part(tmp_path):
    photo = tmp_path / "photo.png"
    photo.write_bytes(png_bytes())
    big = tmp_path / "scan.bin"
    data = os.urandom(2 * 1024 * 1024)
    big.write_bytes(data)
    specs = {"vision": agent("vision", ["image/*"]), "archive": agent("archive", ["application/octet-stream"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            code, out, err = await run_cli("send", str(photo), str(big), "--gateway", url)
            archived = json_format.MessageToDict(specs["archive"][1].received[0].message.parts[0])
            async with httpx.AsyncClient() as c:
                fetched = (await c.get(archived["url"])).content
            code2, out2, err2 = await run_cli("send", str(photo), "--gateway", url, "--to", "nobody")
    assert code == 0, err
    assert "part 0 (image/png) → vision [capability]" in out
    assert "part 1 (application/octet-stream) → archive [capability]" in out
    raw = specs["vision"][1].received[0].message.parts[0].raw
    assert raw == png_bytes()
    assert fetched == data and archived["filename"] == "scan.bin"
    assert code2 == 1 and err2.strip() == "error: mma2a gateway: receivers: unknown agent 'nobody' (agents: archive, vision)", err2


async def test_send_to_an_unreachable_gateway_is_a_clear_error(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("hello")
    # --wait 0: no 10 s wait for a gateway that may still be starting (tests/test_first_hour.py checks the waiting)
    code, out, err = await run_cli("send", str(f), "--gateway", "http://127.0.0.1:9", "--wait", "0")
    assert code == 1 and "cannot reach the gateway at http://127.0.0.1:9" in err, err
