"""The JSON examples of docs/extension.md are valid: they read back through mma2a and the SDK."""

from __future__ import annotations

import json
import re
from pathlib import Path

from a2a.types import AgentCard, Message
from google.protobuf import json_format

from mma2a.card import card_declares_extension, declare_extension
from mma2a.ext import EXTENSION_URI, downgrade_message, read_message
from mma2a.modality import ModalityRegistry
from mma2a.proto import get_part_extension
from mma2a.view import view_message
from tests.agents import make_card

SPEC = Path(__file__).resolve().parents[2] / "docs" / "extension.md"


def _json_blocks() -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", SPEC.read_text(), re.DOTALL)]


def test_the_message_example_is_valid_and_routable() -> None:
    message = next(b for b in _json_blocks() if "messageId" in b)
    view = view_message(message, registry=ModalityRegistry())
    assert [str(p.modality) for p in view.parts] == ["text/plain; charset=utf-8", "image/jpeg", "audio/ogg; codecs=opus"]
    assert view.parts[1].size == 482113 and view.session is not None and view.priority == 6
    ext = read_message(message)
    assert ext is not None and ext.protocol == "a2a-multimodal/1.0"
    # the SDK parses it, and mma2a reads the same extension back from the protobuf form
    pb = json_format.ParseDict(message, Message())
    assert get_part_extension(pb.parts[2]) == view.parts[2].ext
    # downgraded: no extension left, media types kept, text/plain with a charset not forced onto the text part
    plain = downgrade_message(message)
    assert EXTENSION_URI not in json.dumps(plain)
    assert [p.get("mediaType") for p in plain["parts"]] == [None, "image/jpeg", "audio/ogg; codecs=opus"]


def test_the_card_example_is_what_declare_extension_publishes() -> None:
    card_json = next(b for b in _json_blocks() if "capabilities" in b)
    assert card_declares_extension(card_json)
    card = json_format.ParseDict(card_json, AgentCard())
    ours = declare_extension(make_card("x"))
    assert json_format.MessageToDict(card.capabilities.extensions[0]) == json_format.MessageToDict(ours.capabilities.extensions[0])
