"""A producer attaches its own features (`send(features=...)`, `File(..., features=...)`): checked, signed, routed on."""

from __future__ import annotations

from pathlib import Path

import pytest

from mma2a.errors import FeatureSchemaError, SignatureError
from mma2a.ext import EXTENSION_URI
from mma2a.sdk import File, MultimodalClient, run_agent
from mma2a.signing import new_private_key, private_key_text, public_key_text, verify_message
from tests.media import png_bytes
from tests.sdk.conftest import SavingConsumer, consumer_behind_gateway

DOCK_RULE = {"rules": [{"name": "dock-3", "match": {"features": {"camera": {"eq": "dock-3"}}},
                        "action": {"route_to": "archive"}}]}


async def test_a_camera_feature_reaches_a_rule_on_it(tmp_path: Path) -> None:
    img = tmp_path / "crack.png"
    img.write_bytes(png_bytes(64, 48))
    archive_dir = tmp_path / "archive"
    archive_dir.mkdir()
    archive = SavingConsumer(archive_dir)
    async with run_agent(archive.card("archive", "keeps dock photos", input_modes=["*/*"]), archive) as archive_url:
        async with consumer_behind_gateway(tmp_path, input_modes=("image/*",), extra_agents={"archive": archive_url},
                                           config={"rules": DOCK_RULE}) as (consumer, _, gw):
            async with await MultimodalClient.connect(gw) as client:
                plain = await client.send(img)
                tagged = await client.send(img, features={"camera": "dock-3"})
                per_item = await client.send(File(img, features={"camera": "dock-3", "shift": 2}))
    assert [r["targets"] for r in plain.route] == [["inspector"]]
    assert [(r["targets"], r["matched"]) for r in tagged.route] == [(["archive"], ["dock-3"])]
    assert [r["targets"] for r in per_item.route] == [["archive"]]
    received = archive.messages[0].parts[0]
    assert received.features["camera"] == "dock-3"
    assert received.ext.feature_source is not None and received.ext.feature_source.kind == "hybrid"  # the gateway filled in the rest
    assert received.ext.feature_schema == "image/1"
    assert archive.messages[1].parts[0].features["shift"] == 2
    assert len(consumer.messages) == 1  # only the untagged photo went to the inspector


async def test_features_are_type_checked_and_schema_checked(tmp_path: Path) -> None:
    img = tmp_path / "p.png"
    img.write_bytes(png_bytes(40, 30))
    async with consumer_behind_gateway(tmp_path) as (_, _, gw):
        async with await MultimodalClient.connect(gw) as client:
            with pytest.raises(TypeError) as as_bool:
                await client.send(img, features=True)
            with pytest.raises(TypeError) as as_list:
                await client.send(img, features=["camera"])
            with pytest.raises(TypeError) as not_json:
                await client.send(img, features={"camera": object()})
            with pytest.raises(FeatureSchemaError) as schema:
                await client.send(File(img, features={"width": "wide"}))
            assert (await client.build_message(img, features={"camera": "dock-3"}))["parts"][0]["metadata"][EXTENSION_URI][
                "features"] == {"camera": "dock-3"}
        with pytest.raises(TypeError) as old_name:
            await MultimodalClient.connect(gw, features=True)
    assert str(as_bool.value) == ("features: must be a dict of feature values such as {'camera': 'dock-3'}, got bool; "
                                  "to extract features locally, pass extract_features=True")
    assert str(as_list.value) == "features: must be a dict of feature values such as {'camera': 'dock-3'}, got list"
    assert str(not_json.value).startswith("features: feature values must be JSON values (str, number, bool, list, dict): ")
    assert schema.value.message == "items[0].features.width: 'wide' is not of type 'integer' (schema image/1)"
    assert str(old_name.value) == ("connect(): local extraction is `extract_features=True`; a producer's own features go to "
                                   "`send(..., features={'camera': 'dock-3'})`")


async def test_own_features_are_signed(tmp_path: Path) -> None:
    key = new_private_key()
    img = tmp_path / "p.png"
    img.write_bytes(png_bytes(40, 30))
    config = {"signing": {"senders": {"camera-1": public_key_text(key)}, "policy": "reject"}}
    async with consumer_behind_gateway(tmp_path, config=config) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw, signing_key=private_key_text(key), signer="camera-1") as client:
            msg = await client.build_message(img, features={"camera": "dock-3"})
            ts = msg["metadata"][EXTENSION_URI]["signature"]["ts"]
            assert verify_message(msg, {"camera-1": key.public_key()}, now=ts) == "camera-1"
            msg["parts"][0]["metadata"][EXTENSION_URI]["features"]["camera"] = "dock-4"  # tampered after signing
            with pytest.raises(SignatureError):
                verify_message(msg, {"camera-1": key.public_key()}, now=ts)
            reply = await client.send(img, features={"camera": "dock-3"})
    assert reply.ok and consumer.saved[0][0].features["camera"] == "dock-3"
