"""Security round 4 (issue 31), finding 9, as the attack: a FLAC of 120 s of silence, 8 channels at 384 kHz (368,640,000
samples in a file of a few KB) is refused from its header by samples (rate x channels x seconds) before anything
decodes — at the gateway's features, at the reference speech agent, by the SDK's consumer helpers — and audio that
passes is decoded straight to 16 kHz mono (no full-rate float copy)."""

from __future__ import annotations

import base64
import io
import struct

import pytest
from a2a.types import Part
from google.protobuf import json_format

from mma2a.errors import MediaError
from mma2a.ext import EXTENSION_URI
from mma2a.features.audio import decode_audio
from mma2a.features.base import Limits
from mma2a.features.speech import decode_speech
from mma2a.modality import parse_modality
from mma2a.sdk.parts import view_parts
from tests.gateway.conftest import agent, agents, gateway, rpc

av = pytest.importorskip("av")
np = pytest.importorskip("numpy")
FLAC = parse_modality("audio/flac")
REFUSED = ("audio: 120.0 s of 8 channels at 384000 Hz = 368640000 samples, over the limit of {limit} "
           "(rate x channels x seconds); not decoded")


def flac(seconds: float, channels: int = 8, rate: int = 384_000, *, declare: float | None = None) -> bytes:
    """Real FLAC of silence; `declare`: the seconds its STREAMINFO states instead (0: unknown)."""
    buf = io.BytesIO()
    layout = {1: "mono", 2: "stereo", 8: "7.1"}[channels]
    with av.open(buf, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate)
        stream.layout, stream.format = layout, "s16"
        total, step = int(seconds * rate), 4608
        zeros = np.zeros((1, step * channels), dtype=np.int16)
        for i in range(0, total, step):
            n = min(step, total - i)
            frame = av.AudioFrame.from_ndarray(zeros[:, :n * channels], format="s16", layout=layout)
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    data = bytearray(buf.getvalue())
    if declare is not None:  # STREAMINFO: rate(20) channels-1(3) bits-1(5) total samples(36), at bytes 18-25
        packed = struct.unpack_from(">Q", data, 18)[0]
        struct.pack_into(">Q", data, 18, (packed & ~((1 << 36) - 1)) | int(declare * rate))
    return bytes(data)


ATTACK = flac(0.05, declare=120.0)  # what a header says is what is judged: 120 s, 8 channels, 384 kHz


def test_the_attack_is_refused_from_its_header_by_samples() -> None:
    assert len(ATTACK) < 10_000
    for limits, decode in [(Limits(), decode_audio), (Limits(max_audio_samples=48_000 * 2 * 120), decode_speech)]:
        with pytest.raises(MediaError) as err:
            decode(ATTACK, FLAC, limits)
        assert err.value.message == REFUSED.format(limit=limits.max_audio_samples)


def test_a_header_that_understates_is_caught_while_decoding() -> None:
    lying = flac(1.0, declare=0)  # STREAMINFO says nothing: samples are counted as they decode
    with pytest.raises(MediaError) as err:
        decode_audio(lying, FLAC, Limits(max_audio_samples=1_000_000))
    assert err.value.message == "audio: more than 1000000 samples (rate x channels x seconds); decoding stopped"


def test_audio_that_passes_is_decoded_straight_to_16k_mono() -> None:
    audio = decode_speech(flac(0.5), FLAC, Limits())
    assert (audio.rate, audio.channels, audio.source_rate, audio.source_channels) == (16000, 1, 384_000, 8)
    assert audio.samples.dtype == np.float32 and audio.samples.shape == (8000, 1)
    full = decode_audio(flac(0.1, channels=2, rate=48_000), FLAC, Limits())
    assert (full.rate, full.channels, full.samples.shape) == (48_000, 2, (4800, 2))  # asked for nothing: as recorded


def test_wav_and_pcm_mix_down_a_second_at_a_time() -> None:
    import wave

    t = np.arange(44_100 * 2) / 44_100
    tone = (np.sin(2 * np.pi * 440 * t) * 16000).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(44_100)
        w.writeframes(np.repeat(tone, 2).tobytes())
    audio = decode_speech(buf.getvalue(), parse_modality("audio/wav"), Limits())
    assert (audio.rate, audio.channels, audio.samples.shape) == (16000, 1, (32000, 1))
    expect = np.sin(2 * np.pi * 440 * np.arange(32000) / 16000) * 16000 / 32768
    assert float(np.max(np.abs(audio.samples[:, 0] - expect))) < 0.02  # the same tone, at 16 kHz
    with pytest.raises(MediaError, match=r"2\.0 s of 2 channels at 44100 Hz = 176400 samples, over the limit of 1000"):
        decode_audio(buf.getvalue(), parse_modality("audio/wav"), Limits(max_audio_samples=1000))
    pcm = parse_modality("audio/pcm; rate=44100; channels=2")
    assert decode_speech(np.repeat(tone, 2).tobytes(), pcm, Limits()).samples.shape == (32000, 1)


async def test_the_speech_agent_and_the_sdk_helpers_refuse_it() -> None:
    from mma2a.agents import speech

    with pytest.raises(ValueError) as err:
        speech._transcribe(ATTACK, "audio/flac")
    assert str(err.value) == REFUSED.format(limit=57_600_000)
    part = json_format.ParseDict({"raw": base64.b64encode(ATTACK).decode(), "mediaType": "audio/flac"}, Part())
    (view,) = view_parts([part], None)
    with pytest.raises(MediaError) as sdk:
        await view.read_media()
    assert sdk.value.message == ("part 0 (audio/flac): audio/flac declares 120.0 s of 8 channels at 384000 Hz = "
                                 "368640000 samples, over the limit of 57600000 (rate x channels x seconds); not decoded")


async def test_the_gateway_does_not_decode_it_for_a_rule_on_transcript() -> None:
    rules = {"version": 1, "rules": [{"name": "spoken", "match": {"modality": "audio/*", "features": {
        "transcript": {"exists": True}}}, "action": {"route_to": "listener"}}]}
    specs = {"listener": agent("listener", ["audio/*"])}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 5}}) as (gw, url):
            doc = await rpc(url, "SendMessage", {"message": {"messageId": "flac-1", "role": "ROLE_USER", "parts": [
                {"raw": base64.b64encode(ATTACK).decode(), "mediaType": "audio/flac"}]}})
    assert "result" in doc, doc
    sent = specs["listener"][1].received[0].message.parts[0]
    features = dict(dict(sent.metadata[EXTENSION_URI])["features"])
    assert REFUSED.format(limit=57_600_000) in features["error"], features
    assert "transcript" not in features
