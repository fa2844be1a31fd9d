"""Session 19, S19-1, as the attack: audio stated at an absurd sample rate (a PCM part's `rate=` parameter, a WAV's or an
AU file's header) is refused before anything decodes it. FFmpeg's resampler, which lowers every rate to 16 kHz for the
gateway's loudness and voice activity and for speech, builds a filter that grows with the rate it lowers: 2 KB of
`audio/L16; rate=200000003` took a live gateway from 134 to 1,779 MB and 6 s of CPU, within every limit of seconds and
samples (docs/security.md S19-1)."""

from __future__ import annotations

import base64
import struct

import pytest

from mma2a.errors import MediaError
from mma2a.ext import EXTENSION_URI
from mma2a.features.audio import decode_audio
from mma2a.features.base import Limits
from mma2a.features.speech import decode_speech
from mma2a.modality import parse_modality
from tests.gateway.conftest import agent, agents, gateway, rpc
from tests.media import pcm_wav

pytest.importorskip("av")
np = pytest.importorskip("numpy")

RATE = 10_000_019  # 0.3 s of CPU and ~80 MB of filter before (200,000,003: 6 s and 1.7 GB)
SAMPLES = b"\x00\x01" * 1000
REFUSED = f"audio: a sample rate of {RATE} Hz is over the limit of 768000 Hz (limits.max_audio_rate); not decoded"


def wav(rate: int, samples: bytes = SAMPLES) -> bytes:
    return pcm_wav(samples, rate)


def au(rate: int) -> bytes:
    """A Sun AU file of 16-bit linear PCM (read through FFmpeg)."""
    return b".snd" + struct.pack(">IIIII", 24, len(SAMPLES), 3, rate, 1) + SAMPLES


ATTACKS = [
    (SAMPLES, f"audio/L16; rate={RATE}"),
    (SAMPLES, f"audio/pcm; rate={RATE}"),
    (SAMPLES[:1000], f"audio/PCMU; rate={RATE}"),
    (wav(RATE), "audio/wav"),
    (au(RATE), "audio/basic"),
]


@pytest.mark.parametrize(("data", "media_type"), ATTACKS)
def test_a_stated_rate_past_the_limit_is_refused_before_any_decode(data: bytes, media_type: str) -> None:
    for decode in (lambda: decode_audio(data, parse_modality(media_type), Limits(), rate=16000, mono=True),
                   lambda: decode_speech(data, parse_modality(media_type), Limits())):
        with pytest.raises(MediaError) as err:
            decode()
        assert err.value.message == REFUSED


def test_the_highest_rates_in_use_still_decode() -> None:
    tone = (np.sin(2 * np.pi * 1000 * np.arange(38_400) / 384_000) * 16000).astype("<i2").tobytes()
    for data, media_type in [(wav(384_000, tone), "audio/wav"), (tone, "audio/L16; rate=384000"),
                             (wav(768_000, tone), "audio/wav")]:
        audio = decode_speech(data, parse_modality(media_type), Limits())
        assert audio.rate == 16000 and audio.samples.shape[0] > 0


async def test_the_gateway_refuses_it_for_a_rule_on_loudness_and_passes_the_part_on() -> None:
    rules = {"version": 1, "rules": [{"name": "quiet", "match": {"modality": "audio/*", "features": {
        "loudness": {"lt": -50}}}, "action": {"route_to": "ears"}}]}
    specs = {"ears": agent("ears", ["audio/*"])}
    async with agents(specs) as urls:
        async with gateway({"rules": rules, "agents": [{"name": n, "url": u} for n, u in urls.items()],
                            "features": {"budget_s": 30}}) as (_, url):
            doc = await rpc(url, "SendMessage", {"message": {"messageId": "rate-1", "role": "ROLE_USER", "parts": [
                {"raw": base64.b64encode(SAMPLES).decode(), "mediaType": f"audio/L16; rate={RATE}"}]}})
    assert "result" in doc, doc
    (sent,) = specs["ears"][1].received[0].message.parts
    assert sent.raw == SAMPLES  # the part itself reaches the agent whole
    features = dict(dict(sent.metadata[EXTENSION_URI])["features"])
    assert REFUSED in features["error"], features
    assert "loudness" not in features
