"""Loudness and voice activity of a stereo recording are read on the channels Whisper hears (`audio.mix_voiced`): a
voice in one channel beside hiss or silence in the other reads as loud and as active as the voice alone (the channels'
mean read it ~6 dB quieter and less active), while a mono recording and a stereo one with a voice in each channel
read as before (their mean). Speech made here by eSpeak NG (espeakng-loader), resampled and written by FFmpeg; no
threshold is tuned against the evaluation's sets (docs/evaluation.md).

    PYTHONPATH=src /work/main/.venv/bin/python -m pytest -q tests/features/test_stereo_levels.py
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mma2a.features.audio import AudioExtractor, decode_audio, describe
from mma2a.features.base import Limits
from mma2a.features.speech import decode_speech
from mma2a.features.window import WindowedExtractor
from mma2a.modality import parse_modality

from . import encodings as e
from . import media as m

av = pytest.importorskip("av")

SENTENCE = "Please move the green boxes to the loading dock before noon"
RATE = 48000
WAV = parse_modality("audio/wav")


@pytest.fixture(scope="module")
def voice() -> Any:
    """The sentence (eSpeak NG `en-us`), at 48 kHz (FFmpeg's resampler), mono (frames, 1), with a second of quiet
    after it (a pause: voice activity under 1)."""
    x, rate = m.speech_with(SENTENCE, voice="en-us", wpm=160, pitch=45)
    x = e.resample(x[:, None], rate, RATE)
    return np.pad(x, ((0, RATE), (0, 0)))


def levels(data: bytes, modality: Any = WAV) -> tuple[float, float]:
    got = AudioExtractor().extract(data, modality)
    return got["loudness"], got["voiceActivity"]


def hiss(n: int, db: float, seed: int = 7) -> Any:
    return np.random.default_rng(seed).normal(0, 10 ** (db / 20), (n, 1))


def heard(data: bytes) -> tuple[float, float]:
    """Loudness and voice activity of exactly what Whisper is given (`decode_speech`: 16 kHz, the voiced mix)."""
    got = describe(decode_speech(data, WAV, Limits()))
    return got["loudness"], got["voiceActivity"]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("other", ["hiss -40", "hiss -30", "silence"])
def test_a_voice_beside_hiss_or_silence_reads_as_the_voice_alone(voice: Any, side: str, other: str) -> None:
    """Before: 6 dB under the voice alone (-28.3 for -22.3 dBFS) beside hiss or silence, and beside -30 dBFS of hiss
    the voice's pause read as voice too (`voiceActivity` 1.0 for 0.761)."""
    alone = levels(e.wav_int(voice, RATE, 2))
    right = hiss(voice.shape[0], float(other.split()[1])) if other != "silence" else 0 * voice
    pair = [voice, right] if side == "left" else [right, voice]
    data = e.wav_int(np.hstack(pair), RATE, 2)
    loudness, activity = levels(data)
    assert abs(loudness - alone[0]) < 0.05, (loudness, alone)  # the channels' mean: ~6 dB under it
    assert abs(activity - alone[1]) < 0.01, (activity, alone)
    assert 0.5 < alone[1] < 1.0  # the voice and its pause: a share to compare, not all or nothing
    assert (loudness, activity) == heard(data)  # what Whisper hears, read the same


def test_the_channels_mean_read_such_a_voice_six_db_quieter(voice: Any) -> None:
    """What the fix is measured against: the mean of the voice and a silent channel (the decode without `voiced`)."""
    data = e.wav_int(np.hstack([voice, 0 * voice]), RATE, 2)
    mean = describe(decode_audio(data, WAV, AudioExtractor().limits, rate=16000, mono=True))
    loudness, _ = levels(data)
    assert abs(loudness - mean["loudness"] - 20 * np.log10(2)) < 0.05, (loudness, mean)


def test_a_mono_recording_and_a_voice_in_each_channel_read_as_their_mean_as_before(voice: Any) -> None:
    mono = e.wav_int(voice, RATE, 2)
    later = np.pad(voice, ((RATE // 2, 0), (0, 0)))[: voice.shape[0]]  # a call's other party, half a second behind
    both = e.wav_int(np.hstack([voice, 0.5 * later]), RATE, 2)
    flac = e.encode_audio(voice, RATE, "flac", "flac")
    limits = AudioExtractor().limits
    for data, modality in ((mono, WAV), (flac, parse_modality("audio/flac")), (both, WAV)):
        before = describe(decode_audio(data, modality, limits, rate=16000, mono=True))  # the channels' mean
        got = AudioExtractor().extract(data, modality)
        assert (got["loudness"], got["voiceActivity"]) == (before["loudness"], before["voiceActivity"]), got
        assert got["channels"] == (2 if data is both else 1)


def test_a_live_stereo_streams_windows_read_the_voices_channel(voice: Any) -> None:
    """A raw PCM stream's windows (the per-window features of a live stream) choose the channels as Whisper does,
    window by window: each reads as the voice alone would."""
    x = e.resample(voice, RATE, 16000)
    stereo = np.hstack([x, hiss(x.shape[0], -40.0)])

    def windows(samples: Any, channels: int) -> list[tuple[float, float]]:
        pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        extractor = WindowedExtractor(f"audio/pcm; rate=16000; channels={channels}", window_s=1.0)
        out = extractor.feed(pcm) + extractor.flush()
        return [(w.features["loudness"], w.features["voiceActivity"]) for w in out]

    alone, pair = windows(x, 1), windows(stereo, 2)
    assert len(alone) == len(pair) >= 3
    for (a_loud, a_act), (p_loud, p_act) in zip(alone[:-1], pair[:-1]):  # the pause's window: hiss alone, the mean
        assert abs(p_loud - a_loud) < 0.05 and abs(p_act - a_act) < 0.01, (alone, pair)
