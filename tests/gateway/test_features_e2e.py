"""Routing on features the gateway extracts itself: no producer features sent."""

from __future__ import annotations

import base64

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
