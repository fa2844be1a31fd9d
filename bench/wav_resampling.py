"""WAV speech at 44.1 and 48 kHz read at 16 kHz two ways: linear interpolation (how WAV and PCM are read today) and
FFmpeg's filtered resampler (how every other container is read: the same samples as FLAC). eSpeak NG sentences made
here (voices, speeds and sentences no evaluation set uses), clean, under broadband hiss (-45 dBFS, full band: what a
real microphone adds above 8 kHz and eSpeak does not make), and beside a 12 kHz whine (-30 dBFS); each transcript
scored against the words said (word error rate, Whisper tiny.en as the gateway runs it), and the level the added
sound reaches in the band Whisper hears.

    PYTHONPATH=src:. python bench/wav_resampling.py [--quick]
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import numpy as np

from mma2a.features.audio import loudness_db
from mma2a.features.base import Limits
from mma2a.features.speech import decode_speech, transcribe_audio
from mma2a.modality import parse_modality
from tests.features import encodings as e
from tests.features import media as m

SENTENCES = [
    "Please move the green boxes to the loading dock before noon",
    "The meeting with the bank has moved to Thursday afternoon",
    "Your order of six chairs will arrive next week",
    "Turn off the kitchen lights and lock the back door",
    "The printer on the third floor is out of paper again",
    "Call the plumber about the leak under the sink",
]
VOICES = [("en-us", 160, 45), ("en-gb-scotland", 150, 50), ("en-us-nyc", 170, 55)]
WAV, FLAC = parse_modality("audio/wav"), parse_modality("audio/flac")


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def wer(said: list[str], heard: list[str]) -> int:
    """Word edits (substitutions, insertions, deletions) from `said` to `heard`."""
    d = list(range(len(heard) + 1))
    for i, w in enumerate(said, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(heard, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (w != h))
    return d[-1]


def read(data: bytes, modality: Any) -> Any:
    return decode_speech(data, modality, Limits())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one voice, two sentences")
    quick = ap.parse_args().quick
    rng = np.random.default_rng(7)
    voices = VOICES[:1] if quick else VOICES
    sentences = SENTENCES[:2] if quick else SENTENCES
    # the added sounds alone, through both paths: how loud they are in the band Whisper hears
    for rate in (44100, 48000):
        hiss = rng.normal(0, 10 ** (-45 / 20), (rate * 3, 1))
        t = np.arange(rate * 3) / rate
        whine = (10 ** (-30 / 20) * np.sqrt(2) * np.sin(2 * np.pi * 12000 * t))[:, None]
        for name, x in (("hiss -45 dBFS", hiss), ("12 kHz whine -30 dBFS", whine)):
            lin = loudness_db(read(e.wav_int(x, rate, 2), WAV).samples[:, 0])
            ff = loudness_db(read(e.encode_audio(x, rate, "flac", "flac"), FLAC).samples[:, 0])
            print(f"{rate} Hz {name:24s} at 16 kHz: linear {lin:7.1f} dBFS, FFmpeg {ff:7.1f} dBFS")
    totals: dict[tuple[str, int, str], list[int]] = {}
    differ: dict[tuple[str, int], int] = {}
    for voice, wpm, pitch in voices:
        for text in sentences:
            s, rate0 = m.speech_with(text, voice=voice, wpm=wpm, pitch=pitch)
            said = words(text)
            for rate in (44100, 48000):
                x = e.resample(s[:, None], rate0, rate)
                t = np.arange(x.shape[0]) / rate
                conditions = {"clean": x,
                              "hiss": x + rng.normal(0, 10 ** (-45 / 20), x.shape),
                              "whine": x + (10 ** (-30 / 20) * np.sqrt(2) * np.sin(2 * np.pi * 12000 * t))[:, None]}
                for cond, y in conditions.items():
                    lin = transcribe_audio(read(e.wav_int(y, rate, 2), WAV)).text
                    ff = transcribe_audio(read(e.encode_audio(y, rate, "flac", "flac"), FLAC)).text
                    for path, heard in (("linear", lin), ("ffmpeg", ff)):
                        tot = totals.setdefault((cond, rate, path), [0, 0])
                        tot[0] += wer(said, words(heard))
                        tot[1] += len(said)
                    differ[(cond, rate)] = differ.get((cond, rate), 0) + (words(lin) != words(ff))
                    if words(lin) != words(ff):
                        print(f"  {voice} {rate} {cond}: linear {lin!r} | FFmpeg {ff!r}", flush=True)
    n = len(voices) * len(sentences)
    print(f"\nword error rate against the words said ({n} recordings each)")
    for cond in ("clean", "hiss", "whine"):
        for rate in (44100, 48000):
            lin, ff = totals[(cond, rate, "linear")], totals[(cond, rate, "ffmpeg")]
            print(f"{cond:6s} {rate}: linear {lin[0]:3d}/{lin[1]} = {lin[0] / lin[1]:5.1%}   FFmpeg {ff[0]:3d}/{ff[1]} = "
                  f"{ff[0] / ff[1]:5.1%}   transcripts that differ: {differ[(cond, rate)]}/{n}")


if __name__ == "__main__":
    main()
