"""The extension in Agent Cards (declared, published, detected) and in the A2A-Extensions header."""

from __future__ import annotations

import httpx

from mma2a.card import (
    EXTENSIONS_HEADER,
    activation_headers,
    card_declares_extension,
    declare_extension,
    extension_activated,
    extension_declaration,
    parse_extensions_header,
)
from mma2a.ext import EXTENSION_URI, PROTOCOL
from mma2a.modality import ModalityRegistry
from tests.agents import RecordingExecutor, make_card, run_agent


async def test_declaration_is_published_on_the_well_known_card() -> None:
    card = declare_extension(make_card("inspector", input_modes=["image/png"]))
    declare_extension(card)  # idempotent
    assert len(card.capabilities.extensions) == 1
    async with run_agent(card, RecordingExecutor()) as url, httpx.AsyncClient() as http:
        published = (await http.get(url + ".well-known/agent-card.json")).json()
    assert card_declares_extension(published)
    assert published["capabilities"]["extensions"] == [
        {
            "uri": EXTENSION_URI,
            "description": "Multimodal parts: modality, encoding, features, payload by reference, live streams",
            "params": {
                "protocol": PROTOCOL,
                "featureSchemas": ["audio/1", "embedding/1", "image/1", "model/1", "multipart/1", "sensor/1", "text/1", "video/1"],
            },
        }
    ]
    assert not card_declares_extension({"capabilities": {"extensions": [{"uri": "https://other/ext"}]}})
    assert not card_declares_extension({"name": "bare"})


def test_declaration_params() -> None:
    reg = ModalityRegistry()
    reg.register("application/x-lidar", version=2, schema_id="lidar")
    ext = extension_declaration(required=True, registry=reg)
    assert ext.required and ext.uri == EXTENSION_URI
    assert "lidar/2" in list(ext.params["featureSchemas"])
    assert list(extension_declaration(feature_schemas=["image/1"]).params["featureSchemas"]) == ["image/1"]
    assert not card_declares_extension(make_card("plain"))


def test_activation_header() -> None:
    assert activation_headers() == {EXTENSIONS_HEADER: EXTENSION_URI, "A2A-Version": "1.0"}
    assert parse_extensions_header(f" https://a/x ,{EXTENSION_URI}, https://a/x") == ["https://a/x", EXTENSION_URI]
    assert parse_extensions_header(["https://a/x", EXTENSION_URI]) == ["https://a/x", EXTENSION_URI]
    assert parse_extensions_header(None) == []
    assert extension_activated(f"https://a/x, {EXTENSION_URI}")
    assert not extension_activated("https://mma2a.dev/ext/multimodal/v2")
