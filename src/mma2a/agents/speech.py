"""Speech agents, offline: speech-to-text (Whisper tiny.en, the same recogniser as the `transcript`
feature) and a synthesiser (eSpeak NG, the library shipped by `espeakng-loader`, through ctypes).

A recording with no speech in it, or with speech Whisper could not make out (a language other than
English, a fragment), is answered with an empty text part and the reason in the part's metadata
(`mma2a.noSpeech`): the gateway records that as the transform's outcome.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import threading
import wave
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from a2a.types import AgentCard

from ..features.base import Limits
from ..modality import parse_modality
from .runtime import ReceivedPart, b64, decoding, make_card, run_blocking

STT_NAME, TTS_NAME = "speech", "speaker"

NO_SPEECH = "no speech recognised in the recording"
UNCLEAR = "speech heard but not understood"


def stt_card() -> AgentCard:
    return make_card(STT_NAME, "Transcribes speech to text, offline (Whisper tiny.en, English).",
                     input_modes=["audio/wav", "audio/x-wav", "audio/*"], output_modes=["text/plain"], skill="transcribe")


def tts_card() -> AgentCard:
    return make_card(TTS_NAME, "Speaks text aloud (eSpeak NG), answering WAV audio.",
                     input_modes=["text/plain"], output_modes=["audio/wav"], skill="synthesize-speech")


_heard: OrderedDict[bytes, tuple[str, str | None, list[dict[str, Any]]]] = OrderedDict()
_heard_lock = threading.Lock()
HEARD_CACHE = 32
AGENT_LIMITS = Limits(max_audio_seconds=600.0, max_audio_samples=48_000 * 2 * 600)
"""What the speech agent decodes: 600 s, and at most 600 s of 48 kHz stereo in samples (rate x channels x seconds)."""
"""Transcripts of this many recent recordings are kept (by SHA-256 of bytes and modality)."""


def transcribe(data: bytes, modality: str = "audio/wav") -> str:
    """The words heard in a recording (Whisper tiny.en; blocking; recent answers are remembered)."""
    return hear(data, modality)[0]


def hear(data: bytes, modality: str = "audio/wav") -> tuple[str, str | None]:
    """The words heard in a recording, and why there are none when the text is empty (`NO_SPEECH`, or `UNCLEAR`
    with the spans heard but not understood); blocking; recent answers are remembered."""
    text, why, _ = _heard_of(data, modality)
    return text, why


def word_timings(data: bytes, modality: str = "audio/wav") -> list[dict[str, Any]]:
    """The words heard, each with its `start` and `end` in seconds (Whisper's word timestamps; the same decode as
    `hear`, remembered with it)."""
    return list(_heard_of(data, modality)[2])


def _heard_of(data: bytes, modality: str) -> tuple[str, str | None, list[dict[str, Any]]]:
    key = hashlib.sha256(modality.encode() + b"\0" + data).digest()
    with _heard_lock:
        if key in _heard:
            _heard.move_to_end(key)
            return _heard[key]
    heard = _transcribe(data, modality)
    with _heard_lock:
        _heard[key] = heard
        while len(_heard) > HEARD_CACHE:
            _heard.popitem(last=False)
    return heard


def _transcribe(data: bytes, modality: str) -> tuple[str, str | None, list[dict[str, Any]]]:
    from ..errors import MediaError
    from ..features.speech import decode_speech, transcribe_audio

    try:  # straight to 16 kHz mono, samples (rate x channels x seconds) bounded before anything decodes
        with decoding(data, modality, "speech"):  # bounded with the process's other decodes
            audio = decode_speech(data, parse_modality(modality), AGENT_LIMITS)
    except MediaError as exc:
        raise ValueError(exc.message) from None
    result = transcribe_audio(audio)
    if result.text:
        return result.text, None, result.words
    if result.unclear:
        spans = ", ".join(f"{a:g}-{b:g} s" for a, b in result.unclear)
        return "", f"{UNCLEAR} ({spans}; Whisper tiny.en reads English only)", []
    return "", NO_SPEECH, []


_tts_lock = threading.Lock()
_tts: tuple[Any, int, Any] | None = None


_ESPEAK_DEFAULTS = {2: 100, 3: 50, 4: 50}
"""eSpeak NG's volume (espeakVOLUME), pitch (espeakPITCH) and pitch range (espeakRANGE) as it starts."""


def synthesize(text: str, *, voice: str = "en-us", rate_wpm: int = 140, pitch: int | None = None,
               pitch_range: int | None = None, volume: int | None = None) -> bytes:
    """Speech for `text` as a mono 16-bit WAV (eSpeak NG); `pitch` and `pitch_range` 0-100 (50 as it starts),
    `volume` 0-200 (100), each only for this text."""
    global _tts
    import espeakng_loader

    with _tts_lock:
        if _tts is None:
            lib = ctypes.CDLL(espeakng_loader.get_library_path())
            lib.espeak_Initialize.restype = ctypes.c_int
            rate = lib.espeak_Initialize(2, 500, espeakng_loader.get_data_path().encode(), 0)  # AUDIO_OUTPUT_SYNCHRONOUS
            if rate <= 0:
                raise RuntimeError("eSpeak NG failed to initialise")
            callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
            _tts = (lib, rate, callback_type)
        lib, rate, callback_type = _tts
        buf = bytearray()

        def collect(wav: Any, n: int, events: Any) -> int:
            if wav and n > 0:
                buf.extend(ctypes.string_at(wav, n * 2))
            return 0

        cb = callback_type(collect)
        lib.espeak_SetSynthCallback(cb)
        lib.espeak_SetVoiceByName(voice.encode())
        lib.espeak_SetParameter(1, rate_wpm, 0)  # espeakRATE
        told = {k: v for k, v in ((2, volume), (3, pitch), (4, pitch_range)) if v is not None}
        for key, value in told.items():
            lib.espeak_SetParameter(key, value, 0)
        raw = text.encode("utf-8") + b"\0"
        try:
            if lib.espeak_Synth(raw, len(raw), 0, 1, 0, 0, None, None) != 0:
                raise RuntimeError("eSpeak NG could not synthesise the text")
            lib.espeak_Synchronize()
        finally:
            for key in told:  # the next text is spoken as eSpeak starts
                lib.espeak_SetParameter(key, _ESPEAK_DEFAULTS[key], 0)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(buf))
    return out.getvalue()


def _synthesize_all(texts: list[str]) -> list[bytes]:
    return [synthesize(t) for t in texts]


def synthesize_fresh(texts: Sequence[str]) -> list[bytes]:
    """Speech for each text, made in a new process: the same texts give the same bytes in every run.

    eSpeak NG carries state from one utterance to the next inside a process (the same text
    twice gives slightly different samples), so reproducible media come from a fresh one.
    """
    import multiprocessing

    if not texts:
        return []
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return list(pool.apply(_synthesize_all, (list(texts),)))


async def stt_reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if p.data is not None and p.modality.startswith("audio/"):
            text, why = await run_blocking(hear, p.data, p.modality)
            part: dict[str, Any] = {"text": text, "mediaType": "text/plain"}
            if not text:
                part["metadata"] = {"mma2a.noSpeech": why or NO_SPEECH}
            out.append(part)
    if not out:
        raise ValueError("no audio part to transcribe")
    return out


async def tts_reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    text = " ".join(p.text for p in parts if p.text)
    if not text.strip():
        raise ValueError("no text to speak")
    wav = await run_blocking(synthesize, text)
    return [{"raw": b64(wav), "mediaType": "audio/wav", "filename": "speech.wav"}]
