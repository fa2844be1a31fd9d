"""Speech agents: eSpeak NG synthesis recognised by Whisper tiny.en; reproducible synthesis in a
fresh process; the served speaker answers WAV audio; silence is answered with an empty text and
the reason."""

from __future__ import annotations

import io
import wave

import pytest

from mma2a.agents import speech
from mma2a.agents.runtime import SkillExecutor, run_agent

from .conftest import answer_parts, failure, raw_part, send

pytest.importorskip("faster_whisper")
pytest.importorskip("espeakng_loader")


def _words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[a-z']+", text.lower()))


def test_synthesized_sentence_is_transcribed():
    text = "The delivery driver left the parcel at the wrong address yesterday."
    assert _words(text) <= _words(speech.transcribe(speech.synthesize(text)))


def test_fresh_synthesis_is_reproducible():
    texts = ["the left door is loose", "it is urgent"]
    first = speech.synthesize_fresh(texts)
    assert first == speech.synthesize_fresh(texts)
    assert speech.synthesize_fresh([]) == []
    with wave.open(io.BytesIO(first[0])) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getnframes() > w.getframerate() // 2


async def test_speaker_answers_audio_and_speech_agent_reads_it_back():
    async with run_agent(speech.tts_card(), SkillExecutor(speech.tts_reply)) as tts, \
            run_agent(speech.stt_card(), SkillExecutor(speech.stt_reply)) as stt:
        parts = answer_parts(await send(tts, [{"text": "the right fan is very noisy today"}]))
        assert parts[0]["mediaType"] == "audio/wav" and parts[0]["filename"] == "speech.wav"
        import base64

        wav = base64.b64decode(parts[0]["raw"])
        heard = answer_parts(await send(stt, [raw_part(wav, "audio/wav")]))
        assert {"right", "noisy"} <= _words(heard[0]["text"])
        silent = io.BytesIO()
        with wave.open(silent, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"\0\0" * 32000)
        nothing = answer_parts(await send(stt, [raw_part(silent.getvalue(), "audio/wav")]))
        assert nothing[0]["text"] == "" and nothing[0]["metadata"] == {"mma2a.noSpeech": speech.NO_SPEECH}
        french = speech.synthesize("Il faut envoyer un technicien pour vérifier la fenêtre cassée.", voice="fr")
        unclear = answer_parts(await send(stt, [raw_part(french, "audio/wav")]))
        assert unclear[0]["text"] == "" and unclear[0]["metadata"]["mma2a.noSpeech"].startswith(speech.UNCLEAR + " (0")
        assert failure(await send(tts, [{"text": "  "}])) == "ValueError: no text to speak"
        assert failure(await send(stt, [{"text": "hi"}])) == "ValueError: no audio part to transcribe"
