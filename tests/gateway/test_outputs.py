"""acceptedOutputModes: reply parts the client cannot take are transformed, or the task says why not."""

from __future__ import annotations

import base64

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
        task = new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        await up.add_artifact([Part(raw=wav_bytes(), media_type="audio/wav")], name="spoken")
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
