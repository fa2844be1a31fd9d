"""Audio extractors on generated tones, synthesised speech (eSpeak NG) and broken files (speech
recognition: test_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mma2a.errors import MediaError
from mma2a.features import AudioExtractor, FeaturePipeline, Limits, WindowedExtractor
from mma2a.modality import parse_modality

from . import media as m

WAV = parse_modality("audio/wav")


@pytest.fixture(scope="module")
def spoken() -> bytes:
    samples, rate = m.speech("hello computer, please open the door")
    return m.wav(samples, rate)


def test_tone_then_silence() -> None:
    data = m.wav(np.concatenate([m.tone(1.0, amp=0.5), m.silence(1.0)]), 16000)
    out = AudioExtractor().extract(data, WAV)
    assert out["format"] == "wav" and out["duration"] == 2.0
    assert out["sampleRate"] == 16000 and out["channels"] == 1
    # RMS of a 0.5 sine over half the clip = 0.25 -> -12.04 dBFS
    assert out["loudness"] == pytest.approx(-12.04, abs=0.02)
    assert out["voiceActivity"] == pytest.approx(0.5, abs=0.02)


def test_silence_has_no_voice_activity() -> None:
    out = AudioExtractor().extract(m.wav(m.silence(1.0), 8000), WAV)
    assert (out["loudness"], out["voiceActivity"]) == (-120.0, 0.0)


def test_stereo_wav() -> None:
    left, right = m.tone(0.5), m.tone(0.5, freq=880)
    data = m.wav(np.stack([left, right], axis=1).reshape(-1), 16000, channels=2)
    out = AudioExtractor().extract(data, WAV)
    assert (out["channels"], out["duration"]) == (2, 0.5)


def test_raw_pcm_needs_and_uses_its_rate() -> None:
    pcm = (m.tone(0.25, rate=8000) * 32767).astype("<i2").tobytes()
    out = AudioExtractor().extract(pcm, parse_modality("audio/pcm; rate=8000"))
    assert (out["duration"], out["sampleRate"], out["format"]) == (0.25, 8000, "pcm")
    big = (m.tone(0.25, rate=8000) * 32767).astype(">i2").tobytes()
    out_be = AudioExtractor().extract(big, parse_modality("audio/L16; rate=8000"))
    assert out_be["loudness"] == out["loudness"]
    with pytest.raises(MediaError) as err:
        AudioExtractor().extract(pcm, parse_modality("audio/pcm"))
    assert err.value.message == "audio: audio/pcm needs a rate parameter, e.g. audio/pcm; rate=16000"


def test_ogg_opus_through_pyav() -> None:
    out = AudioExtractor().extract(m.ogg_opus(m.tone(1.0, rate=48000)), parse_modality("audio/ogg; codecs=opus"))
    assert out["format"] == "ogg" and out["sampleRate"] == 48000 and out["channels"] == 1
    assert out["duration"] == pytest.approx(1.0, abs=0.03)
    assert out["voiceActivity"] > 0.95


def test_synthesised_speech_is_voice(spoken: bytes) -> None:
    out = AudioExtractor().extract(spoken, WAV)
    assert out["sampleRate"] == 22050 and 1.5 < out["duration"] < 3.5
    assert 0.5 < out["voiceActivity"] <= 1.0
    assert -40 < out["loudness"] < -3


def test_broken_audio(pipeline: FeaturePipeline) -> None:
    tone = m.wav(m.tone(1.0), 16000)
    r = pipeline.extract_blocking("audio/wav", tone[:5000], budget_s=10)
    assert r.features["error"] == "audio: truncated WAV: header declares 16000 frames, only 2478 present"
    r = pipeline.extract_blocking("audio/mpeg", b"hello there", budget_s=10)
    assert r.features["error"] == "audio: bytes are not a known audio container (declared audio/mpeg, starts b'hello th')"
    r = pipeline.extract_blocking("audio/ogg", b"OggS" + b"\0" * 100, budget_s=10)
    assert r.features["error"].startswith("audio: not a readable audio container: ")
    r = pipeline.extract_blocking("audio/wav", m.h264_clip(), budget_s=10)
    assert r.features["error"] == "audio: the mp4 container has no audio stream"
    with pytest.raises(MediaError) as err:
        AudioExtractor(limits=Limits(max_audio_seconds=0.5)).extract(tone, WAV)
    assert err.value.message == "audio: WAV declares 1.0 s, over the 0.5 s limit; not decoded"


def test_windowed_features_arrive_while_the_stream_is_open() -> None:
    pcm = (np.concatenate([m.tone(1.0), m.silence(1.0)]) * 32767).astype("<i2").tobytes()
    win = WindowedExtractor("audio/pcm; rate=16000; channels=1", window_s=0.5)
    first = win.feed(pcm[:16000])  # exactly 0.5 s
    assert [w.index for w in first] == [0] and first[0].features["voiceActivity"] == 1.0
    rest: list = []
    for i in range(16000, len(pcm), 999):  # odd chunk sizes
        rest += win.feed(pcm[i : i + 999])
    windows = first + rest
    assert [(w.start, w.end) for w in windows] == [(0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (1.5, 2.0)]
    assert [w.features["voiceActivity"] for w in windows] == [1.0, 1.0, 0.0, 0.0]
    assert all(w.features["streaming"] is True and w.features["sampleRate"] == 16000 for w in windows)
    assert win.flush() == []
    win.feed(pcm[:3200])  # 0.1 s left over
    tail = win.flush()
    assert len(tail) == 1 and tail[0].features["duration"] == 0.1 and tail[0].start == 2.0


def test_windowed_extractor_needs_raw_pcm() -> None:
    with pytest.raises(MediaError) as err:
        WindowedExtractor("audio/ogg")
    assert err.value.message == (
        "modality: windowed extraction needs raw PCM (audio/pcm or audio/L16 with rate=...), got audio/ogg"
    )
    with pytest.raises(MediaError) as err:
        WindowedExtractor("audio/pcm; rate=16000", window_s=0)
    assert err.value.message == "window_s: must be positive, got 0"
