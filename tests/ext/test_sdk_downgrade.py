"""An agent that does not declare the extension gets a plain A2A message its SDK accepts.

The SDK's `validate_input_modes=True` (a2a-sdk 1.3, `a2a.utils.input_mode_validator`) rejects
a part whose non-empty `media_type` is not, as a literal string, in the union of the card's
`default_input_modes` and every skill's `input_modes`; a part with no media type is not
checked. So the cards here list the exact media types, and each acceptance is paired with a
rejection that proves the check is live.
"""

from __future__ import annotations

import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

from mma2a.card import card_declares_extension
from mma2a.ext import EXTENSION_URI, MessageExtension, PartExtension
from mma2a.proto import downgrade, get_part_extension, set_message_extension, set_part_extension
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.ext.test_sdk_roundtrip import PNG, _message, _send

MODES = ["text/plain", "image/png", "audio/wav"]


async def _rejection(url: str, message: Message) -> str:
    """Send and return the error text the SDK client raises (the agent must refuse)."""
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        with pytest.raises(Exception) as info:
            async for _ in client.send_message(SendMessageRequest(message=message)):
                pass
    finally:
        await client.close()
    return str(info.value)


async def test_downgraded_message_is_plain_and_accepted_with_validate_input_modes() -> None:
    card = make_card("plain", input_modes=MODES)
    assert not card_declares_extension(card)
    executor = RecordingExecutor()
    async with run_agent(card, executor, validate_input_modes=True) as url:
        msg, _, _ = _message("https://media.example/tone.wav")
        plain = downgrade(msg)
        assert await _send(url, plain, activate=False) == TaskState.TASK_STATE_COMPLETED

        [got] = executor.received
        assert got.requested_extensions == set()
        assert list(got.message.extensions) == []
        assert not got.message.HasField("metadata")
        for p in got.message.parts:
            assert EXTENSION_URI not in p.metadata
        text, image, audio = got.message.parts
        assert text.text == "The left hinge cracked after a week." and text.media_type == ""
        assert image.raw == PNG and image.media_type == "image/png" and image.filename == "hinge.png"
        assert audio.url == "https://media.example/tone.wav" and audio.media_type == "audio/wav"
        # Read through mma2a, the plain part still says what it is (derived from mediaType).
        assert get_part_extension(image) == PartExtension(modality="image/png")

        # The check is live: the same message with a media type the card lacks is refused.
        plain.parts[1].media_type = "image/webp"
        error = await _rejection(url, plain)
        assert "Media type image/webp is not supported" in error
        assert len(executor.received) == 1


async def test_modality_parameters_are_spelled_as_the_card_spells_them() -> None:
    """A part with no mediaType takes its modality (`audio/wav; rate=16000`); a literal
    string check refuses that unless the downgrade is given the card's modes."""
    audio = set_part_extension(Part(url="https://media.example/tone.wav"), PartExtension(modality="audio/wav; rate=16000"))
    assert audio.media_type == "audio/wav; rate=16000"
    msg = Message(message_id="m-params", role=Role.ROLE_USER, parts=[Part(text="listen"), audio])
    set_message_extension(msg, MessageExtension())
    card = make_card("plain", input_modes=MODES)
    executor = RecordingExecutor()
    async with run_agent(card, executor, validate_input_modes=True) as url:
        error = await _rejection(url, downgrade(msg))
        assert "Media type audio/wav; rate=16000 is not supported" in error

        fitted = downgrade(msg, input_modes=MODES)
        assert fitted.parts[1].media_type == "audio/wav"
        assert await _send(url, fitted, activate=False) == TaskState.TASK_STATE_COMPLETED
        assert executor.received[-1].message.parts[1].media_type == "audio/wav"


async def test_not_downgraded_the_sdk_keeps_extension_metadata_untouched() -> None:
    """An SDK agent (or a router built on one) that does not know the extension still
    receives and keeps our metadata verbatim: nothing it must understand, nothing lost."""
    card = make_card("plain", input_modes=MODES)
    executor = RecordingExecutor()
    async with run_agent(card, executor, validate_input_modes=True) as url:
        msg, part_exts, _ = _message("https://media.example/tone.wav")
        assert await _send(url, msg, activate=True) == TaskState.TASK_STATE_COMPLETED
        [got] = executor.received
        assert EXTENSION_URI in got.requested_extensions  # requested, though the card does not declare it
        assert list(got.message.extensions) == [EXTENSION_URI]
        assert [get_part_extension(p) for p in got.message.parts] == part_exts
