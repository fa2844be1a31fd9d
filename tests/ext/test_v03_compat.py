"""v0.3 clients (`message/send`, `kind: file`) through the SDK's compat layer (`enable_v0_3_compat=True`).

What gets through: every part kind, `mimeType`/`name` of file parts, and all extension
metadata (part and message level; `X-A2A-Extensions` activates it). What does not:
v0.3 text and data parts have no media type (the extension's `modality` still says what
they are); requests without the compat layer, v0.3 requests labelled `A2A-Version: 1.0`,
and v0.3-shaped parts sent to the 1.0 method `SendMessage` (they arrive empty).
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from a2a.client import ClientCallContext, ClientConfig, create_client
from a2a.types import AgentInterface, Part, SendMessageRequest, TaskState
from google.protobuf import struct_pb2

from mma2a.card import declare_extension
from mma2a.errors import InvalidRequest
from mma2a.ext import EXTENSION_URI, MessageExtension, PartExtension, PayloadRef, read_message, read_part
from mma2a.proto import get_message_extension, get_part_extension, message_to_json, set_part_extension
from mma2a.view import view_message
from tests.agents import RecordingExecutor, make_card, run_agent
from tests.ext.test_sdk_roundtrip import PNG, _message

MODES = ["text/plain", "image/png", "audio/wav"]
TEXT_EXT = PartExtension(modality="text/markdown", features={"language": "en", "length": 11})
IMAGE_EXT = PartExtension(modality="image/png", encoding="raw", features={"width": 64, "height": 48, "objects": ["hinge"]})
AUDIO_EXT = PartExtension(
    modality="audio/wav", encoding="native", payload=PayloadRef("ab" * 32, 8044, 4102444800), features={"duration": 0.25}
)
MSG_EXT = MessageExtension(intent="explicit", receivers=("inspector",), priority=8, hops=2)


def _v03_message() -> dict[str, Any]:
    """A v0.3 wire message: `kind` discriminators, `file.bytes`/`file.uri`, lower-case role."""
    return {
        "kind": "message",
        "messageId": "m-v03",
        "role": "user",
        "extensions": [EXTENSION_URI],
        "metadata": {EXTENSION_URI: MSG_EXT.to_json(), "trace": "t-1"},
        "parts": [
            {"kind": "text", "text": "# The hinge", "metadata": {EXTENSION_URI: TEXT_EXT.to_json()}},
            {
                "kind": "file",
                "file": {"bytes": base64.b64encode(PNG).decode(), "mimeType": "image/png", "name": "hinge.png"},
                "metadata": {EXTENSION_URI: IMAGE_EXT.to_json()},
            },
            {
                "kind": "file",
                "file": {"uri": "https://media.example/tone.wav", "mimeType": "audio/wav", "name": "tone.wav"},
                "metadata": {EXTENSION_URI: AUDIO_EXT.to_json()},
            },
            {"kind": "data", "data": {"ticket": 4711, "tags": ["hinge"]}},
        ],
    }


def _rpc(method: str, message: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"message": message}}


async def test_v03_message_send_with_file_parts_gets_through_with_extension_metadata() -> None:
    card = declare_extension(make_card("mm", input_modes=MODES))
    executor = RecordingExecutor(echo=True)
    async with run_agent(card, executor, validate_input_modes=True) as url, httpx.AsyncClient() as http:
        resp = (await http.post(url, json=_rpc("message/send", _v03_message()), headers={"X-A2A-Extensions": EXTENSION_URI})).json()

    # The agent (an A2A 1.0 executor) reads exactly what the v0.3 client sent.
    [got] = executor.received
    assert EXTENSION_URI in got.requested_extensions  # the legacy X- header activates it
    assert get_message_extension(got.message) == MSG_EXT
    assert got.message.metadata["trace"] == "t-1"
    text, image, audio, data = got.message.parts
    assert [get_part_extension(p) for p in (text, image, audio)] == [TEXT_EXT, IMAGE_EXT, AUDIO_EXT]
    assert image.raw == PNG and image.media_type == "image/png" and image.filename == "hinge.png"
    assert audio.url == "https://media.example/tone.wav" and audio.media_type == "audio/wav" and audio.filename == "tone.wav"
    # v0.3 text parts have no media type; the extension's modality still says markdown.
    assert text.text == "# The hinge" and text.media_type == ""
    assert get_part_extension(data).modality == "application/json"

    # The v0.3 client gets a v0.3 answer, and the echoed parts keep their extension metadata.
    result = resp["result"]
    assert result["kind"] == "task" and result["status"]["state"] == "completed"
    echoed = result["status"]["message"]["parts"]
    assert [p["kind"] for p in echoed] == ["text", "file", "file", "data"]
    assert [read_part(p) for p in echoed[:1]] == [TEXT_EXT]
    assert echoed[1]["file"] == {"bytes": base64.b64encode(PNG).decode(), "mimeType": "image/png", "name": "hinge.png"}
    assert PartExtension.from_json(echoed[1]["metadata"][EXTENSION_URI]) == IMAGE_EXT
    assert PartExtension.from_json(echoed[2]["metadata"][EXTENSION_URI]) == AUDIO_EXT
    assert echoed[3]["data"] == {"ticket": 4711, "tags": ["hinge"]}


async def test_sdk_compat_client_v03_transport_keeps_the_extension() -> None:
    """A 1.0 SDK client talking to a card that offers only a v0.3 interface uses the SDK's
    `CompatJsonRpcTransport` (`message/send` on the wire)."""
    card = declare_extension(make_card("mm", input_modes=[*MODES, "text/markdown"]))
    card.supported_interfaces.append(AgentInterface(protocol_binding="JSONRPC", protocol_version="0.3"))
    executor = RecordingExecutor()
    msg, part_exts, msg_ext = _message("https://media.example/tone.wav")
    md = set_part_extension(Part(text="# notes", media_type="text/markdown"), PartExtension(modality="text/markdown"))
    data = Part(data=struct_pb2.Value(string_value="x"), media_type="application/json", filename="d.json")
    msg.parts.extend([md, data])
    async with run_agent(card, executor, validate_input_modes=True) as url:
        client = await create_client(url, ClientConfig(streaming=False))
        assert type(client._transport).__name__ == "CompatJsonRpcTransport"  # type: ignore[attr-defined]
        ctx = ClientCallContext(service_parameters={"A2A-Extensions": EXTENSION_URI})
        states = [ev.task.status.state async for ev in client.send_message(SendMessageRequest(message=msg), context=ctx)]
        await client.close()
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    [got] = executor.received
    assert EXTENSION_URI in got.requested_extensions
    assert get_message_extension(got.message) == msg_ext
    assert [get_part_extension(p) for p in got.message.parts[:3]] == part_exts
    assert got.message.parts[1].raw == PNG
    # Lost in the v0.3 conversion: a text part's media type, a data part's media type and filename.
    got_md, got_data = got.message.parts[3], got.message.parts[4]
    assert got_md.media_type == "" and get_part_extension(got_md).modality == "text/markdown"
    assert got_data.data.string_value == "x" and got_data.media_type == "" and got_data.filename == ""


async def test_v03_without_the_compat_layer_is_method_not_found() -> None:
    executor = RecordingExecutor()
    async with run_agent(make_card("old", input_modes=MODES), executor, enable_v0_3_compat=False) as url:
        async with httpx.AsyncClient() as http:
            resp = (await http.post(url, json=_rpc("message/send", _v03_message()))).json()
    assert resp["error"] == {"code": -32601, "message": "Method not found"}
    assert executor.received == []


async def test_v03_method_labelled_a2a_version_1_0_is_refused() -> None:
    executor = RecordingExecutor()
    async with run_agent(make_card("mm", input_modes=MODES), executor) as url, httpx.AsyncClient() as http:
        resp = (await http.post(url, json=_rpc("message/send", _v03_message()), headers={"A2A-Version": "1.0"})).json()
    assert resp["error"]["message"] == "A2A version '1.0' is not supported by this handler. Expected version '0.3'."
    assert executor.received == []


async def test_v03_file_mime_type_outside_the_card_is_refused_by_input_mode_validation() -> None:
    msg = _v03_message()
    msg["parts"][1]["file"]["mimeType"] = "image/webp"
    executor = RecordingExecutor()
    async with run_agent(make_card("mm", input_modes=MODES), executor, validate_input_modes=True) as url:
        async with httpx.AsyncClient() as http:
            resp = (await http.post(url, json=_rpc("message/send", msg))).json()
    assert resp["error"]["code"] == -32005
    assert resp["error"]["message"].startswith("Media type image/webp is not supported.")
    assert executor.received == []


async def test_v03_parts_sent_to_the_1_0_method_arrive_empty_and_mma2a_refuses_them() -> None:
    """The SDK ignores unknown fields, so `kind`/`file` vanish and the part arrives with no content."""
    msg = _v03_message()
    msg["role"] = "ROLE_USER"
    executor = RecordingExecutor()
    async with run_agent(make_card("mm", input_modes=MODES), executor) as url, httpx.AsyncClient() as http:
        await http.post(url, json=_rpc("SendMessage", msg), headers={"A2A-Version": "1.0"})
    [got] = executor.received
    assert got.message.parts[1].WhichOneof("content") is None  # the PNG is gone
    # mma2a's view of the same JSON says so instead of routing an empty part.
    with pytest.raises(InvalidRequest) as info:
        view_message(msg)
    assert info.value.message == (
        "message.parts[1]: carries no content (one of text, raw, url, data); "
        "a v0.3 part (kind: file) belongs to message/send"
    )
    assert info.value.field == "message.parts[1]"
    # what did survive on the 1.0 path: the message-level extension
    assert read_message(message_to_json(got.message)) == MSG_EXT
