"""Speech agents, offline: speech-to-text (pocketsphinx, JSGF grammar) and a synthesiser (eSpeak NG).

Recognition runs in grammar mode — exact on clear synthetic speech, where free
transcription with the bundled language model is poor. Synthesis uses the eSpeak NG library
shipped by `espeakng-loader` through ctypes.
"""

from __future__ import annotations

import ctypes
import io
import threading
import wave
from collections.abc import Sequence
from typing import Any

from a2a.types import AgentCard

from ..modality import parse_modality
from .runtime import ReceivedPart, b64, make_card, run_blocking

STT_NAME, TTS_NAME = "speech", "speaker"

COMPLAINT_GRAMMAR = """#JSGF V1.0;
grammar complaint;
public <utterance> = <sentence> (and <sentence>)*;
<sentence> = [the] [<side>] <thing> (is | are) [very] <state> | it makes a <sound> | please <request> [it]
           | it is <urgency> | it (started | stopped) after <count> (day | days | week | weeks);
<side> = left | right | top | bottom | front | back;
<thing> = hinge | lid | door | handle | screen | button | cable | fan | motor | battery | panel | case | label;
<state> = cracked | broken | loose | bent | scratched | stained | leaking | noisy | dead | missing | fine;
<sound> = noise | rattle | click | hum;
<request> = fix | replace | refund | check;
<urgency> = urgent | dangerous;
<count> = one | two | three | four | five;
"""
"""The default recognition grammar: short product complaints (JSGF). Configure another per deployment."""


def stt_card() -> AgentCard:
    return make_card(STT_NAME, "Transcribes spoken product complaints to text, offline (pocketsphinx, JSGF grammar).",
                     input_modes=["audio/wav", "audio/x-wav", "audio/*"], output_modes=["text/plain"], skill="transcribe")


def tts_card() -> AgentCard:
    return make_card(TTS_NAME, "Speaks text aloud (eSpeak NG), answering WAV audio.",
                     input_modes=["text/plain"], output_modes=["audio/wav"], skill="synthesize-speech")


_recognizer_lock = threading.Lock()
_recognizers: dict[str, Any] = {}


def transcribe(data: bytes, modality: str = "audio/wav", grammar: str = COMPLAINT_GRAMMAR) -> str:
    """The words heard in a recording, constrained by a JSGF grammar (exact on clear speech, fast)."""
    from ..features.audio import SpeechKeywordExtractor

    with _recognizer_lock:
        recognizer = _recognizers.get(grammar)
        if recognizer is None:
            recognizer = _recognizers[grammar] = SpeechKeywordExtractor(grammar=grammar)
        result = recognizer.extract(data, parse_modality(modality))
    if "error" in result:
        raise ValueError(str(result["error"]))
    return str(result.get("transcript", ""))


_tts_lock = threading.Lock()
_tts: tuple[Any, int, Any] | None = None


def synthesize(text: str, *, voice: str = "en-us", rate_wpm: int = 140) -> bytes:
    """Speech for `text` as a mono 16-bit WAV (eSpeak NG)."""
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
        raw = text.encode("utf-8") + b"\0"
        if lib.espeak_Synth(raw, len(raw), 0, 1, 0, 0, None, None) != 0:
            raise RuntimeError("eSpeak NG could not synthesise the text")
        lib.espeak_Synchronize()
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
    out = []
    for p in parts:
        if p.data is not None and p.modality.startswith("audio/"):
            text = await run_blocking(transcribe, p.data, p.modality)
            out.append({"text": text, "mediaType": "text/plain"})
    if not out:
        raise ValueError("no audio part to transcribe")
    return out


async def tts_reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    text = " ".join(p.text for p in parts if p.text)
    if not text.strip():
        raise ValueError("no text to speak")
    wav = await run_blocking(synthesize, text)
    return [{"raw": b64(wav), "mediaType": "audio/wav", "filename": "speech.wav"}]
