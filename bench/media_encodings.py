"""CPU time of reading audio in the encodings real clients send at 16 kHz mono (what loudness, voice activity and
Whisper read): 30 s of 48 kHz stereo as WAV, as MP3, and as 5.1 FLAC (FFmpeg's resampler, WAV's since session 18;
the mono mix the channels' mean); a 640x480 clip's facts without a thumbnail (its first keyframe is decoded
for the display rotation).

    PYTHONPATH=src:. python bench/media_encodings.py [--runs 5]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from common import cpu_ms as common_cpu_ms

from mma2a.features.audio import AudioExtractor
from mma2a.features.video import VideoExtractor
from mma2a.modality import parse_modality
from tests.features import encodings as e


def cpu_ms(f: Callable[[], object], runs: int) -> float:
    return common_cpu_ms(f, runs, warm=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    runs = ap.parse_args().runs
    rng = np.random.default_rng(0)
    stereo = rng.normal(0, 0.1, (48000 * 30, 2))
    wav = e.wav_int(stereo, 48000, 2)
    mp3 = e.encode_audio(stereo, 48000, "mp3", "libmp3lame")
    flac = e.encode_audio(rng.normal(0, 0.1, (48000 * 30, 6)), 48000, "flac", "flac")
    clip = e.clip("mp4", "libx264", frames=100, size=(640, 480))
    ex, vx = AudioExtractor(), VideoExtractor(thumbnail=False)

    print(f"{'WAV 48 kHz stereo 30 s':48s} {cpu_ms(lambda: ex.extract(wav, parse_modality('audio/wav')), runs):7.1f} ms")
    print(f"{'MP3 48 kHz stereo 30 s':48s} {cpu_ms(lambda: ex.extract(mp3, parse_modality('audio/mpeg')), runs):7.1f} ms")
    print(f"{'FLAC 48 kHz 5.1 30 s':48s} {cpu_ms(lambda: ex.extract(flac, parse_modality('audio/flac')), runs):7.1f} ms")
    print(f"{'MP4 640x480 100 frames, no thumbnail':48s} {cpu_ms(lambda: vx.extract(clip, parse_modality('video/mp4')), runs * 4):7.1f} ms")


if __name__ == "__main__":
    main()
