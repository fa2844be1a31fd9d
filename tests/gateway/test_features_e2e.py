"""Routing on features the gateway extracts itself: no producer features sent."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import json_format

from mma2a.ext import EXTENSION_URI
from tests.features import media
from tests.gateway.conftest import agent, agents, gateway, rpc

RULES = {
    "version": 1,
    "rules": [
        {"name": "labels-to-reader", "match": {"modality": "image/*", "features": {"qr": {"contains": "SN-4821"}}},
         "action": {"route_to": "label-reader"}},
        {"name": "other-images", "match": {"modality": "image/*"}, "action": {"route_to": "inspector"}},
    ],
}


def image_part(png: bytes, features: dict | None = None) -> dict:
    part: dict = {"raw": base64.b64encode(png).decode(), "mediaType": "image/png"}
    if features is not None:
        part["metadata"] = {EXTENSION_URI: {"features": features}}
    return part


async def test_photo_with_a_qr_code_reaches_the_agent_the_rule_names():
    specs = {"label-reader": agent("label-reader", ["image/*"]), "inspector": agent("inspector", ["image/*"])}
    qr = media.png(media.qr_image("SN-4821"))
    plain = media.png(media.halves())
    async with agents(specs) as urls:
        async with gateway({"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5}}) as (gw, url):
            with_qr = await rpc(url, "SendMessage", {"message": {"messageId": "f1", "role": "ROLE_USER", "parts": [image_part(qr)]}})
            without = await rpc(url, "SendMessage", {"message": {"messageId": "f2", "role": "ROLE_USER", "parts": [image_part(plain)]}})
    route = with_qr["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]
    assert route["targets"] == ["label-reader"] and route["matched"] == ["labels-to-reader"]
    sent = specs["label-reader"][1].received[0].message.parts[0]
    ext = dict(sent.metadata[EXTENSION_URI])
    assert list(ext["features"]["qr"]) == ["SN-4821"]
    assert ext["featureSource"]["kind"] == "router"
    assert without["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["inspector"]


async def test_untrusted_forged_features_are_reextracted_under_the_reextract_policy():
    specs = {"label-reader": agent("label-reader", ["image/*"]), "inspector": agent("inspector", ["image/*"])}
    plain = media.png(media.halves())
    async with agents(specs) as urls:
        async with gateway({"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5, "untrusted": "reextract"}}) as (gw, url):
            forged = await rpc(url, "SendMessage", {"message": {"messageId": "f3", "role": "ROLE_USER",
                                                                "parts": [image_part(plain, {"qr": ["SN-4821"]})]}})
    assert forged["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["inspector"]


async def test_text_only_messages_skip_extraction_when_no_rule_needs_features():
    specs = {"analyst": agent("analyst", ["text/plain"])}
    async with agents(specs) as urls:
        async with gateway({"agents": [{"name": "analyst", "url": urls["analyst"]}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": {"messageId": "f4", "role": "ROLE_USER", "parts": [{"text": "hello there"}]}})
    assert doc["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    sent = specs["analyst"][1].received[0].message.parts[0]
    assert EXTENSION_URI not in sent.metadata  # nothing was extracted or added


async def test_media_limits_from_the_gateway_config_refuse_big_images_before_decoding():
    specs = {"label-reader": agent("label-reader", ["image/*"]), "inspector": agent("inspector", ["image/*"])}
    png = media.png(media.halves(320, 200))  # 64,000 pixels
    async with agents(specs) as urls:
        async with gateway({"rules": RULES, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5, "max_pixels": 10_000}}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": {"messageId": "f5", "role": "ROLE_USER", "parts": [image_part(png)]}})
    assert doc["result"]["task"]["metadata"][EXTENSION_URI]["route"][0]["targets"] == ["inspector"]
    sent = specs["inspector"][1].received[0].message.parts[0]
    error = dict(sent.metadata[EXTENSION_URI])["features"]["error"]
    assert "320x200 = 64000 pixels is over the limit of 10000 pixels (decompression bomb guard); not decoded" in error


# --- the models' time budget, and transforms that come back empty (issue 17) ---------------

CRACK_RULES = {
    "version": 1,
    "rules": [
        {"name": "spoken", "match": {"modality": "audio/*", "features": {"transcript": {"nonempty": True}}},
         "action": {"route_to": "spoken"}},
        {"name": "other-audio", "match": {"modality": "audio/*"}, "action": {"route_to": "voicemail"}},
    ],
}


def audio_part(wav: bytes) -> dict:
    return {"raw": base64.b64encode(wav).decode(), "mediaType": "audio/wav"}


async def test_a_model_cut_off_at_its_budget_is_recorded_and_the_message_still_routes():
    pytest.importorskip("faster_whisper")
    from mma2a.agents.speech import synthesize

    note = synthesize("There is a crack in the rim of my coffee cup.")
    specs = {"spoken": agent("spoken", ["audio/*"]), "voicemail": agent("voicemail", ["audio/*"])}
    routes, received = {}, {}
    async with agents(specs) as urls:
        registered = [{"name": n, "url": u} for n, u in urls.items()]
        # an allowance that covers the sentence on any machine (the default 8 s can be overrun on a host
        # loaded many times over: that is a race, not the property); then the same note with 50 ms for the model
        for case, features in (("allowed", {"model_budget_s": {"whisper-tiny.en": 300}}), ("cut", {"budget_s": 0.05, "model_budget_s": {"whisper-tiny.en": 0.05}})):
            async with gateway({"rules": CRACK_RULES, "agents": registered, "features": features}) as (gw, url):
                doc = await rpc(url, "SendMessage", {"message": {"messageId": f"b-{case}", "role": "ROLE_USER",
                                                                 "parts": [audio_part(note)]}})
            task = doc["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
            routes[case] = task["metadata"][EXTENSION_URI]["route"][0]
            got = specs[routes[case]["targets"][0]][1].received[-1].message.parts[0]
            received[case] = json_format.MessageToDict(got.metadata)[EXTENSION_URI]
    assert routes["allowed"]["matched"] == ["spoken"] and "crack" in received["allowed"]["features"]["transcript"]
    assert not [n for n in received["allowed"]["features"].get("incomplete", []) if n.startswith("whisper")]
    # cut off: no transcript, so the transcript rule cannot match; the next rule routes it, the reason travels along
    assert routes["cut"]["matched"] == ["other-audio"] and routes["cut"]["targets"] == ["voicemail"]
    cut = received["cut"]["features"]
    assert "transcript" not in cut and "error" not in cut
    assert "whisper-tiny.en: not done within the 0.05 s budget; skipped" in cut["incomplete"]


async def test_a_voice_note_without_words_is_a_recorded_outcome_and_the_task_completes():
    # the real speech agent as the transformer: a silent recording gives no text, which is an outcome with its
    # reason in the route, not a failed task; the analyst gets the question alone
    pytest.importorskip("faster_whisper")
    from mma2a.agents import speech
    from mma2a.agents.runtime import SkillExecutor

    specs = {"speech": (speech.stt_card(), SkillExecutor(speech.stt_reply)), "analyst": agent("analyst", ["text/plain"])}
    silent = media.wav(media.silence(2.0), 16000)
    rules = {"version": 1, "rules": [{"name": "voice-notes-to-analyst", "match": {"modality": "audio/*"},
                                      "action": {"route_to": "analyst"}}]}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": "speech", "url": urls["speech"], "transformer": True},
                                                       {"name": "analyst", "url": urls["analyst"]}]}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": {
                "messageId": "e1", "role": "ROLE_USER",
                "parts": [{"text": "Is this cup damaged? See the voice note."}, audio_part(silent)]}})
    task = doc["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    text_route, audio_route = task["metadata"][EXTENSION_URI]["route"]
    assert text_route["targets"] == ["analyst"] and "outcome" not in text_route
    assert audio_route["targets"] == ["analyst"] and audio_route["matched"] == ["voice-notes-to-analyst"]
    assert [[s["agent"] for s in chain] for chain in audio_route["via"]] == [["speech"]]
    assert audio_route["outcome"] == [{
        "agent": "analyst", "index": 1, "outcome": "dropped",
        "reason": "transformer speech made no text/plain from audio/wav: no speech recognised in the recording"}]
    got = specs["analyst"][1].received
    assert len(got) == 1 and [p.text for p in got[0].message.parts] == ["Is this cup damaged? See the voice note."]


def test_a_model_budget_for_an_unknown_extractor_or_not_positive_names_the_field():
    from mma2a.gateway import parse_config
    from mma2a.gateway.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config({"features": {"model_budget_s": {"whisper": 20}}})
    assert err.value.field == "features.model_budget_s"
    assert ("'whisper' is not a model extractor; known: rapidocr-ppocrv6, ssd-mobilenet-v2-coco, whisper-tiny.en, "
            "zxing-cpp") in err.value.message
    with pytest.raises(ConfigError) as err:
        parse_config({"features": {"model_budget_s": {"whisper-tiny.en": 0}}})
    assert "whisper-tiny.en: must be a positive number of seconds, got 0.0" in err.value.message
    assert parse_config({"features": {"model_budget_s": {"whisper-tiny.en": 20}}}).features.model_budget_s == {
        "whisper-tiny.en": 20.0}
