"""The reference agents by name: card, reply function, and whether the gateway may use it as a transformer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from a2a.types import AgentCard

from . import captioner, keyword, reasoner, speech, vision
from .runtime import ReplyFn


@dataclass(frozen=True)
class ReferenceAgent:
    name: str
    card: Callable[[], AgentCard]
    reply: ReplyFn
    transformer: bool = False
    summary: str = ""


CATALOG: dict[str, ReferenceAgent] = {
    a.name: a
    for a in (
        ReferenceAgent(vision.NAME, vision.card, vision.reply, summary="image inspector (pixels)"),
        ReferenceAgent(speech.STT_NAME, speech.stt_card, speech.stt_reply, transformer=True, summary="speech to text"),
        ReferenceAgent(speech.TTS_NAME, speech.tts_card, speech.tts_reply, transformer=True, summary="text to speech"),
        ReferenceAgent(captioner.NAME, captioner.card, captioner.reply, transformer=True, summary="image to text caption"),
        ReferenceAgent(reasoner.NAME, reasoner.card, reasoner.reply, summary="reasoner: text, and photos on their pixels"),
        ReferenceAgent(keyword.NAME, keyword.card, keyword.reply, summary="keyword-only reasoner (the ablation)"),
    )
}
