"""End to end through the gateway: real a2a-sdk agents, a real a2a-sdk client, real media."""

from __future__ import annotations

import base64

from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI, PartExtension
from mma2a.proto import set_part_extension
from tests.gateway.conftest import agent, agents, gateway, rpc, sdk_client
from tests.media import png_bytes, wav_bytes

RULES = """
version: 1
rules:
  - name: images-to-vision
    match: {modality: image/*}
    action: {route_to: vision}
  - name: audio-to-speech
    match: {modality: audio/*}
    action: {route_to: speech}
  - name: text-to-analyst
    match: {modality: text/plain}
    action: {route_to: analyst}
"""


def three_part_message() -> Message:
    img = Part(raw=png_bytes(), media_type="image/png", filename="hinge.png")
    set_part_extension(img, PartExtension(modality="image/png", encoding="raw", features={"width": 64, "height": 48}))
    audio = Part(raw=wav_bytes(), media_type="audio/wav")
    return Message(message_id="m-1", role=Role.ROLE_USER, parts=[Part(text="the hinge cracked"), img, audio])


async def send(url: str, message: Message):
    client = await sdk_client(url)
    events = [ev async for ev in client.send_message(SendMessageRequest(message=message))]
    await client.close()
    return events[-1].task


async def test_three_parts_reach_three_agents_by_rule():
    specs = {
        "vision": agent("vision", ["image/png", "image/*"]),
        "speech": agent("speech", ["audio/*"]),
        "analyst": agent("analyst", ["text/plain"]),
    }
    async with agents(specs) as urls:
        cfg = {"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()]}
        async with gateway(cfg) as (gw, url):
            task = await send(url, three_part_message())
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    got = {name: [json_format.MessageToDict(p) for r in ex.received for p in r.message.parts] for name, (_, ex) in specs.items()}
    assert [p.get("text") for p in got["analyst"]] == ["the hinge cracked"]
    assert base64.b64decode(got["vision"][0]["raw"]) == png_bytes()
    assert got["vision"][0]["metadata"][EXTENSION_URI]["features"] == {"width": 64, "height": 48}
    assert got["speech"][0]["mediaType"] == "audio/wav"
    names = sorted(a.name.split("/")[0] for a in task.artifacts)
    assert names == ["analyst", "speech", "vision"]
    route = json_format.MessageToDict(task.metadata)[EXTENSION_URI]["route"]
    assert [(r["index"], r["targets"], r["matched"]) for r in route] == [
        (0, ["analyst"], ["text-to-analyst"]), (1, ["vision"], ["images-to-vision"]), (2, ["speech"], ["audio-to-speech"])]


async def test_capability_routing_without_rules_picks_the_card_that_accepts():
    specs = {"vision": agent("vision", ["image/*"]), "analyst": agent("analyst", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            msg = Message(message_id="m-2", role=Role.ROLE_USER, parts=[Part(raw=png_bytes(), media_type="image/png")])
            task = await send(url, msg)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(specs["vision"][1].received) == 1 and not specs["analyst"][1].received
    route = json_format.MessageToDict(task.metadata)[EXTENSION_URI]["route"]
    assert route[0]["targets"] == ["vision"] and route[0]["matched"] == []


async def test_agent_without_extension_gets_a_plain_message():
    specs = {"plain": agent("plain", ["image/png"], ext=False)}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "plain", "url": urls["plain"]}]}) as (gw, url):
            img = Part(raw=png_bytes(), media_type="image/png")
            set_part_extension(img, PartExtension(modality="image/png", features={"width": 64}))
            await send(url, Message(message_id="m-3", role=Role.ROLE_USER, parts=[img]))
    received = specs["plain"][1].received[0]
    assert EXTENSION_URI not in received.requested_extensions
    part = json_format.MessageToDict(received.message.parts[0])
    assert "metadata" not in part and part["mediaType"] == "image/png"
    assert received.message.extensions == []


async def test_no_agent_for_a_modality_is_content_type_not_supported():
    specs = {"analyst": agent("analyst", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "analyst", "url": urls["analyst"]}]}) as (gw, url):
            raw = base64.b64encode(wav_bytes()).decode()
            doc = await rpc(url, "SendMessage", {"message": {"messageId": "m-4", "role": "ROLE_USER",
                                                             "parts": [{"raw": raw, "mediaType": "audio/wav"}]}})
    assert doc["error"]["code"] == -32005
    assert "part 0" in doc["error"]["message"] and "audio/wav" in doc["error"]["message"]


async def test_the_new_users_image_agent_gets_the_photo_and_explain_shows_every_agent_scored():
    """Issue 33's new user: an agent declaring only `image/*` beside the reference `analyst` (whose card lists
    image/jpeg) gets the photo; /admin/explain shows both with their scores and the runner-up's reason."""
    import httpx

    from mma2a.agents.catalog import CATALOG
    from tests.agents import RecordingExecutor
    from tests.gateway.conftest import ADMIN
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (180, 90, 30)).save(buf, "JPEG")
    photo = {"raw": base64.b64encode(buf.getvalue()).decode(), "mediaType": "image/jpeg"}
    message = {"messageId": "photo-1", "role": "ROLE_USER", "parts": [{"text": "Is this cup damaged?"}, photo]}
    specs = {"analyst": (CATALOG["analyst"].card(), RecordingExecutor(reply="analyst ok")),
             "inspector": agent("inspector", ["image/*"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": n, "url": u} for n, u in urls.items()]}) as (gw, url):
            sent = await rpc(url, "SendMessage", {"message": message})
            async with httpx.AsyncClient(timeout=30) as c:
                explained = (await c.post(url + "/admin/explain", json={"message": message},
                                          headers={"Authorization": f"Bearer {ADMIN}"})).json()
                ogg = {"messageId": "ogg-1", "role": "ROLE_USER",
                       "parts": [{"url": "https://example.org/a.ogg", "mediaType": "audio/ogg"}]}
                refused = (await c.post(url + "/admin/explain", json={"message": ogg},
                                        headers={"Authorization": f"Bearer {ADMIN}"})).json()
    route = sent["result"]["task"]["metadata"][EXTENSION_URI]["route"]
    assert [r["targets"] for r in route] == [["analyst"], ["inspector"]]
    assert route[1]["runnerUp"] == "runner-up analyst (0.53) lost to inspector (1.10): specialisation 0.33 vs 1.00"
    assert "runnerUp" not in route[0]  # the text: only the analyst takes it
    part = explained["explanation"]["parts"][1]
    assert part["notes"] == ["no rule matched: default action"]
    assert part["capability"] == [{"modality": "image/jpeg", "group": None, "chosen": "inspector", "agents": [
        {"agent": "inspector", "accepted": True, "total": 1.1, "specialisation": 1.0, "fit": 0.5},
        {"agent": "analyst", "accepted": True, "total": 0.5333, "specialisation": 0.3333, "fit": 1.0}]}]
    text = explained["explanation"]["parts"][0]["capability"][0]["agents"]
    assert text == [{"agent": "analyst", "accepted": True, "total": 0.5333, "specialisation": 0.3333, "fit": 1.0},
                    {"agent": "inspector", "accepted": False, "whyNot": "mode: its card accepts image/*"}]
    # a part nobody takes: the refusal, and the table saying why each agent did not
    assert refused["error"]["code"] == -32005
    assert refused["capability"] == [{"modality": "audio/ogg", "group": None, "chosen": None, "agents": [
        {"agent": "analyst", "accepted": False, "whyNot": "mode: its card accepts text/plain, text/markdown, image/png, "
                                                          "image/jpeg, image/webp, audio/wav, audio/x-wav"},
        {"agent": "inspector", "accepted": False, "whyNot": "mode: its card accepts image/*"}]}]
