"""What the analyst measures from a voice note's samples and a photo's surface (agents/listening.py, agents/detail.py):
on recordings and pictures made here, no recogniser (the rate from word timings is given)."""

from __future__ import annotations

import io
import random
import wave

import numpy as np
import pytest

from mma2a.agents.detail import ROUGH_GRAIN, surface_grain
from mma2a.agents.listening import listen, speaking_rate
from mma2a.eval.media import Finish, Sound, product_photo, sound_wave

RATE = 16000


def _wav(x: np.ndarray, rate: int = RATE) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.clip(x * 32767, -32768, 32767).astype(np.int16).tobytes())
    return buf.getvalue()


def _voice(seconds: float, f0: tuple[float, float], seed: int = 0) -> np.ndarray:
    """A buzz with harmonics whose pitch glides from f0[0] to f0[1] (a stand-in voice), at about -20 dBFS."""
    t = np.arange(int(seconds * RATE)) / RATE
    freq = np.linspace(f0[0], f0[1], len(t))
    phase = 2 * np.pi * np.cumsum(freq) / RATE
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    return 0.1 * x / np.sqrt(np.mean(x ** 2)) + np.random.default_rng(seed).normal(0, 0.002, len(t))


def _room(seconds: float, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.002, int(seconds * RATE))


def test_onset_pitch_and_its_movement_at_the_end():
    rising = listen(_wav(np.concatenate([_room(2.3), _voice(1.5, (110, 160))])))
    assert rising.onset_s == pytest.approx(2.3, abs=0.1)
    assert rising.pitch_hz is not None and 110 <= rising.pitch_hz <= 160
    assert rising.pitch_rise_st is not None and rising.pitch_rise_st > 0.3
    falling = listen(_wav(_voice(1.5, (150, 100))))
    assert falling.onset_s is not None and falling.onset_s < 0.1
    assert falling.pitch_rise_st is not None and falling.pitch_rise_st < 0


def test_the_sounds_behind_a_voice_told_apart():
    rng = random.Random(3)
    voice = np.concatenate([_voice(1.2, (120, 100)), _room(0.3), _voice(1.5, (110, 95))])
    power = float(np.mean(voice ** 2))

    def behind(sound: Sound | None) -> np.ndarray:
        if sound is None:
            return voice
        return voice + sound_wave(sound, len(voice), RATE, rng) * np.sqrt(power * 10 ** (sound.level_db / 10))

    beeps = listen(_wav(behind(Sound("beep", 2200, -10, period_s=0.6, on_s=0.2))))
    assert beeps.beep_hz == pytest.approx(2200, abs=40) and beeps.whine_hz is None and beeps.sweep_hz is None
    siren = listen(_wav(behind(Sound("siren", 1100, -10, hz2=1900, period_s=1.2))))
    assert siren.sweep_hz is not None and siren.sweep_hz > 300
    whine = listen(_wav(behind(Sound("whine", 4400, -22))))
    assert whine.whine_hz == pytest.approx(4400, abs=40) and whine.beep_hz is None
    plain = listen(_wav(behind(None)))
    assert (plain.whine_hz, plain.beep_hz, plain.sweep_hz) == (None, None, None)


def test_speaking_rate_from_word_timings_and_bad_audio():
    assert speaking_rate([{"start": 0.5, "end": 0.8}, {"start": 0.9, "end": 1.3}, {"start": 1.4, "end": 1.5}]) == 3.0
    assert speaking_rate([{"start": 0.5, "end": 0.8}]) is None
    with pytest.raises(ValueError, match=r"^audio: bytes are not a known audio container"):
        listen(b"not audio at all")


def test_surface_grain_tells_a_rough_finish_from_a_smooth_one():
    smooth = product_photo(random.Random(1), (170, 172, 176), fmt="png")
    rough = product_photo(random.Random(1), (170, 172, 176), fmt="png", finish=Finish(1.5, 14.0))
    assert surface_grain(smooth) < ROUGH_GRAIN <= surface_grain(rough)
