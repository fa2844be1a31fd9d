"""acceptedOutputModes: reply parts the client cannot take are transformed, or the task says why not."""

from __future__ import annotations

import base64

import httpx

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.tasks import TaskUpdater
from a2a.types import Part

from mma2a.ext import EXTENSION_URI
from tests.agents import RecordingExecutor, make_card
from tests.gateway.conftest import agent, agents, gateway, rpc
from tests.media import wav_bytes


class VoiceReply(RecordingExecutor):
    """Answers every message with a spoken (WAV) artifact."""

    async def execute(self, context, event_queue):
        self.calls = getattr(self, "calls", 0) + 1
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.add_artifact([Part(raw=wav_bytes(), media_type="audio/wav")], name="spoken")
        await up.complete()


class TextReply(RecordingExecutor):
    """Answers every message with a text artifact."""

    async def execute(self, context, event_queue):
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.add_artifact([Part(text=self.reply)], name="answer")
        await up.complete()


def text_msg(mid: str) -> dict:
    return {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": "read me the status"}]}


async def test_audio_reply_is_transcribed_for_a_text_only_client():
    specs = {
        "voicebot": (make_card("voicebot", input_modes=["text/plain"], output_modes=["audio/wav"]), VoiceReply()),
        "stt": agent("stt", ["audio/*"], reply="all systems normal"),
    }
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "voicebot", "url": urls["voicebot"]},
                          {"name": "stt", "url": urls["stt"], "transformer": True}]}
        async with gateway(cfg) as (gw, url):
            text_only = await rpc(url, "SendMessage", {"message": text_msg("o1"),
                                                        "configuration": {"acceptedOutputModes": ["text/plain"]}})
            any_mode = await rpc(url, "SendMessage", {"message": text_msg("o2")})
    part = text_only["result"]["task"]["artifacts"][0]["parts"][0]
    assert part["text"] == "all systems normal"
    assert part["metadata"][EXTENSION_URI]["transformedFrom"] == {"modality": "audio/wav", "agent": "stt"}
    raw = any_mode["result"]["task"]["artifacts"][0]["parts"][0]
    assert raw["mediaType"] == "audio/wav" and base64.b64decode(raw["raw"]) == wav_bytes()


async def test_no_chain_to_an_accepted_mode_is_reported_not_hidden():
    specs = {"voicebot": (make_card("voicebot", input_modes=["text/plain"], output_modes=["audio/wav"]), VoiceReply())}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "voicebot", "url": urls["voicebot"]}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": text_msg("o3"),
                                                 "configuration": {"acceptedOutputModes": ["text/plain"]}})
    task = doc["result"]["task"]
    assert task["artifacts"][0]["parts"][0]["mediaType"] == "audio/wav"
    assert task["metadata"][EXTENSION_URI]["unconvertedOutputs"] == [
        {"part": "artifacts[0].parts[0]", "modality": "audio/wav",
         "reason": "no transformer chain from audio/wav to any of ['text/plain']"}]


async def test_an_output_chain_uses_only_agents_the_client_may_use():
    """Security round 4 #2, the attack: alice, limited to `keyword`, asked `/agents/keyword/` for `audio/wav` and
    got an artifact made by `speaker`. Now her text comes back as it is, the reason beside the route; bob, who may
    use `speaker`, still gets the spoken answer."""
    specs = {"keyword": (make_card("keyword", input_modes=["text/plain"]), TextReply(reply="the status is green")),
             "speaker": (make_card("speaker", input_modes=["text/plain"], output_modes=["audio/wav"]), VoiceReply())}
    async with agents(specs) as urls:
        cfg = {"agents": [{"name": "keyword", "url": urls["keyword"]},
                          {"name": "speaker", "url": urls["speaker"], "transformer": True}],
               "auth": {"clients": [{"name": "alice", "token": "alice-t", "agents": ["keyword"]},
                                    {"name": "bob", "token": "bob-t", "agents": ["keyword", "speaker"]}]}}
        async with gateway(cfg) as (gw, url):
            params = {"message": text_msg("o4"), "configuration": {"acceptedOutputModes": ["audio/wav"]}}
            async with httpx.AsyncClient(timeout=30) as c:
                docs = {}
                for who in ("alice", "bob"):
                    r = await c.post(url + "/agents/keyword/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                                     "params": params},
                                     headers={"A2A-Version": "1.0", "Authorization": f"Bearer {who}-t"})
                    docs[who] = r.json()
                    if who == "alice":
                        assert getattr(specs["speaker"][1], "calls", 0) == 0  # speaker never heard alice's request
    task = docs["alice"]["result"]["task"]
    assert task["artifacts"][0]["parts"][0]["text"] == "the status is green"
    assert task["metadata"][EXTENSION_URI]["unconvertedOutputs"] == [
        {"part": "artifacts[0].parts[0]", "modality": "text/plain",
         "reason": "no transformer chain from text/plain to any of ['audio/wav'] among the agents this client may use "
                   "(auth.clients[].agents)"}]
    assert "route" in task["metadata"][EXTENSION_URI]
    spoken = docs["bob"]["result"]["task"]["artifacts"][0]["parts"][0]
    assert spoken["mediaType"] == "audio/wav" and base64.b64decode(spoken["raw"]) == wav_bytes()
    assert spoken["metadata"][EXTENSION_URI]["transformedFrom"] == {"modality": "text/plain", "agent": "speaker"}
    assert specs["speaker"][1].calls == 1
