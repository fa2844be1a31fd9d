"""Signed extension fields: a client configured with an Ed25519 key signs; the gateway verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from mma2a.errors import InvalidParams, SignatureError
from mma2a.ext import EXTENSION_URI
from mma2a.sdk import MultimodalClient
from mma2a.signing import new_private_key, private_key_text, public_key_text, verify_message
from tests.media import png_bytes
from tests.sdk.conftest import consumer_behind_gateway


async def test_signed_features_pass_a_gateway_that_requires_signatures(tmp_path: Path) -> None:
    key, other = new_private_key(), new_private_key()
    img = tmp_path / "p.png"
    img.write_bytes(png_bytes(40, 30))
    config = {"signing": {"senders": {"camera-1": public_key_text(key)}, "policy": "reject"}}
    async with consumer_behind_gateway(tmp_path, config=config) as (consumer, _, gw):
        async with await MultimodalClient.connect(gw, extract_features=True, signing_key=private_key_text(key),
                                                  signer="camera-1") as signed:
            msg = await signed.build_message(img)
            assert verify_message(msg, {"camera-1": key.public_key()}, now=msg["metadata"][EXTENSION_URI]["signature"]["ts"])
            reply = await signed.send(img)
        async with await MultimodalClient.connect(gw, extract_features=True, signing_key=other, signer="camera-1") as forged:
            with pytest.raises(SignatureError) as exc:
                await forged.send(img)
    assert reply.ok and consumer.saved[0][0].features["width"] == 40
    assert exc.value.message == (
        "mma2a gateway: message.metadata[https://mma2a.dev/ext/multimodal/v1].signature: does not verify for signer "
        "'camera-1' (a part's extension metadata, kind, mediaType, filename or content, or the message's intent, "
        "receivers, priority or session changed after signing; or forged)")


async def test_a_key_without_a_signer_name_is_refused(tmp_path: Path) -> None:
    async with consumer_behind_gateway(tmp_path) as (_, _, gw):
        with pytest.raises(InvalidParams) as exc:
            await MultimodalClient.connect(gw, signing_key=new_private_key())
    assert exc.value.message == "signer: a signing key needs the signer's name (the gateway looks its public key up by it)"
