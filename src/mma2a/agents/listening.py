"""What a recording carries besides its words, measured from the samples: how the voice was said (speaking rate
from Whisper's word timings, pitch and its movement at the end, loudness), the sounds behind it (a steady tone —
a machine's whine —, an alarm's beeps, a siren's sweep) and how long the recording is quiet before the speech.

The analyst reads these when a voice note reaches it natively; a transcript carries none of them (speech to text
keeps the words). Plain numpy on the decoded samples (16 kHz mono), no model beyond the recogniser whose word
timings give the rate. Each threshold below was set on the evaluation's `development` set only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

RATE = 16000
FRAME = 1024
"""STFT frame (64 ms at 16 kHz) and hop (16 ms) of the tone analysis."""
HOP = 256
BAND = (900.0, 7000.0)
"""Tones are looked for here: above most of a voice's strong harmonics, below the 8 kHz of a 16 kHz recording."""


@dataclass(frozen=True)
class Listening:
    """What was measured: seconds before the speech starts, words per second, median pitch (Hz), the pitch's movement
    at the end (semitones, + rising), the speech's loudness (dBFS), and the tones
    found behind the voice (`whine`: a steady tone's Hz; `beeps`: a tone switching on and off, its Hz; `sweep`: a tone
    gliding over this many Hz)."""

    onset_s: float | None
    words_per_s: float | None
    pitch_hz: float | None
    pitch_rise_st: float | None
    loudness_dbfs: float | None
    whine_hz: float | None
    beep_hz: float | None
    sweep_hz: float | None

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def samples_of(data: bytes, modality: str) -> Any:
    """The recording as 16 kHz mono float samples (ValueError naming the problem when it is not audio)."""
    from ..errors import MediaError
    from ..features.audio import decode_audio
    from ..features.base import Limits
    from ..features.speech import to_16k_mono
    from ..modality import parse_modality

    try:
        return to_16k_mono(decode_audio(data, parse_modality(modality), Limits(max_audio_seconds=600.0)))
    except MediaError as exc:
        raise ValueError(exc.message) from None


def listen(data: bytes, modality: str = "audio/wav", words: list[dict[str, Any]] | None = None) -> Listening:
    """Measure a recording (blocking). `words`: the recogniser's words with `start`/`end`, for the speaking rate."""
    x = samples_of(data, modality)
    onset, loud = speech_onset(x)
    f0_hz, end_slope = pitch_profile(x, onset)
    whine, beep, sweep = tones(x)
    return Listening(onset, speaking_rate(words or []), f0_hz, end_slope, loud, whine, beep, sweep)


def frame_db(x: Any, frame_s: float = 0.02) -> Any:
    import numpy as np

    n = int(RATE * frame_s)
    count = len(x) // n
    if count == 0:
        return np.array([-120.0])
    rms = np.sqrt(np.mean(np.square(x[: count * n].reshape(count, n), dtype=np.float64), axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-9))


SPEECH_ABOVE_FLOOR_DB = 15.0
"""Speech is where 20 ms frames stand this far above the recording's quietest tenth (its room noise)."""


def speech_line(db: Any) -> float:
    """The level speech frames reach: `SPEECH_ABOVE_FLOOR_DB` over the quietest tenth of the frames, but no higher than
    10 dB under the loudest twentieth (a recording that is speech throughout has no quiet floor), and at least -60
    dBFS."""
    import numpy as np

    floor, loud = float(np.percentile(db, 10)), float(np.percentile(db, 95))
    return max(min(floor + SPEECH_ABOVE_FLOOR_DB, loud - 10.0), -60.0)


def speech_onset(x: Any) -> tuple[float | None, float | None]:
    """(seconds before the first speech, the speech's loudness in dBFS): speech is a run of at least 60 ms of frames
    over `speech_line`."""
    import numpy as np

    db = frame_db(x)
    line = speech_line(db)
    loud = db > line
    run = np.convolve(loud.astype(int), np.ones(3, int), mode="valid") == 3
    if not run.any():
        return None, None
    first = int(np.argmax(run))
    return first * 0.02, float(10 * np.log10(np.mean(10 ** (db[loud] / 10))))


def pitch_track(x: Any, start_s: float = 0.0) -> tuple[Any, Any]:
    """(times, f0 in Hz) of voiced 40 ms frames every 10 ms: the autocorrelation's peak between 70 and 400 Hz where it
    holds at least half the frame's energy."""
    import numpy as np

    n, hop = 640, 160
    lo, hi = RATE // 400, RATE // 70
    line = speech_line(frame_db(x, 0.04))
    starts = np.arange(int(start_s * RATE), len(x) - n, hop)
    if not len(starts):
        return np.array([]), np.array([])
    frames = x[starts[:, None] + np.arange(n)[None, :]].astype(np.float64)
    frames -= frames.mean(axis=1, keepdims=True)
    energy = np.einsum("ij,ij->i", frames, frames)
    loud = (energy > 0) & (10 * np.log10(energy / n + 1e-18) >= line)
    starts, frames = starts[loud], frames[loud]
    spec = np.fft.rfft(frames, 2 * n, axis=1)  # the autocorrelation of each frame, all frames at once
    ac = np.fft.irfft(spec * np.conj(spec), 2 * n, axis=1)[:, :n]
    lag = lo + np.argmax(ac[:, lo:hi], axis=1)
    voiced = ac[np.arange(len(lag)), lag] / np.maximum(ac[:, 0], 1e-18) >= 0.5
    return starts[voiced] / RATE, RATE / lag[voiced]


def pitch_profile(x: Any, onset: float | None) -> tuple[float | None, float | None]:
    """(median pitch, the pitch's rise at the very end in semitones: the last 40 ms of voiced frames against those
    70-120 ms before the end — where a spoken question turns up and a statement falls)."""
    import numpy as np

    t, f0 = pitch_track(x, onset or 0.0)
    if len(f0) < 8:
        return None, None
    end = t[-1]
    last, before = f0[t >= end - 0.04], f0[(t >= end - 0.12) & (t < end - 0.07)]
    if not len(last) or not len(before):
        return float(np.median(f0)), None
    return float(np.median(f0)), float(12 * np.log2(np.median(last) / np.median(before)))


def speaking_rate(words: list[dict[str, Any]]) -> float | None:
    """Words per second between the first word's start and the last one's end."""
    if len(words) < 2:
        return None
    span = float(words[-1]["end"]) - float(words[0]["start"])
    return len(words) / span if span > 0 else None


TONE_DB = 18.0
"""A frame holds a tone when its strongest bin in `BAND` stands this far above the band's median."""
LINE_DB = 12.0
"""And that bin stands this far above every bin 4 to 8 bins (62-125 Hz) away: a line in the spectrum (a voice's
harmonics are as strong there)."""
TONE_SHARE = 0.08
"""A tone behind the voice: one frequency (within 2 bins) holds the line in at least this share of all frames."""
STEADY_SWING_DB = 12.0
"""It is steady (a whine) when its bin's level swings less than this between the 20th and 90th percentile of frames;
beeps switch off (their bin falls to the room noise) and swing far more."""
SWEEP_HZ = 250.0
"""A siren: the tone frames' frequencies spread over at least this many Hz (10th to 90th percentile), moving at
most `SWEEP_STEP_HZ` from frame to frame in most of them."""
SWEEP_STEP_HZ = 80.0


def tones(x: Any) -> tuple[float | None, float | None, float | None]:
    """(whine Hz, beeps Hz, siren sweep width Hz) from the spectrum's tone frames (see the thresholds above)."""
    import numpy as np

    if len(x) < FRAME * 4:
        return None, None, None
    count = 1 + (len(x) - FRAME) // HOP
    idx = np.arange(FRAME)[None, :] + HOP * np.arange(count)[:, None]
    spec = np.abs(np.fft.rfft(x[idx] * np.hanning(FRAME), axis=1))
    freqs = np.fft.rfftfreq(FRAME, 1 / RATE)
    band = (freqs >= BAND[0]) & (freqs <= BAND[1])
    sub, fb = spec[:, band], freqs[band]
    peak = np.argmax(sub, axis=1)
    top = sub[np.arange(count), peak]
    prominence = 20 * np.log10(top / (np.median(sub, axis=1) + 1e-12) + 1e-12)
    # and it is a line, not a voice's harmonic: the bins 4 to 8 away on either side are all far weaker
    padded = np.pad(sub, ((0, 0), (8, 8)), mode="edge")
    around = np.stack([padded[np.arange(count), peak + 8 + d] for d in (-8, -7, -6, -5, -4, 4, 5, 6, 7, 8)], axis=1)
    sharp = 20 * np.log10(top / (around.max(axis=1) + 1e-12) + 1e-12)
    tonal = (prominence >= TONE_DB) & (sharp >= LINE_DB)
    if not tonal.any():
        return None, None, None
    bins = peak[tonal]
    mode = int(np.bincount(bins).argmax())
    at_mode = float(np.sum(tonal & (np.abs(peak - mode) <= 2)) / count)
    whine = beep = None
    if at_mode >= TONE_SHARE:
        # a steady tone is always there (a voice only adds to its bin); beeps go on and off
        level = sub[:, max(0, mode - 2):mode + 3].max(axis=1)
        swing = 20 * np.log10(np.percentile(level, 90) / (np.percentile(level, 20) + 1e-12) + 1e-12)
        if swing < STEADY_SWING_DB:
            whine = float(fb[mode])
        else:
            beep = float(fb[mode])
    sweep = None
    tonal_f = fb[bins]
    if len(tonal_f) >= 10:
        spread = float(np.percentile(tonal_f, 90) - np.percentile(tonal_f, 10))
        steps = np.abs(np.diff(fb[peak]))[tonal[1:] & tonal[:-1]]
        smooth = float(np.mean(steps <= SWEEP_STEP_HZ)) if len(steps) else 0.0
        if spread >= SWEEP_HZ and smooth >= 0.7:
            sweep = spread
    return whine, beep, sweep
