"""The analyst: the capable reasoner. Reads text reports, transcripts and captions, photos on their
pixels when they reach it natively (the vision inspector's perception, in process), and voice notes
on their samples when they reach it natively (the words as the speech agent hears them, plus how
they were said and the sounds behind them: `listening.py`).

It is deterministic, not a language model: it recognises a handful of customer-service
questions (`questions.py`) and answers each from the best evidence it was given — image
findings when a photo arrived, else whatever the texts (a caption, a transcript, the
report) say, else a stated default guess. A report without a recognised question gets a
summary: issues named, urgency, what the photos show.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from a2a.types import AgentCard

from . import questions as q
from .detail import ROUGH_GRAIN, surface_grain
from .listening import Listening, listen
from .pixels import COLOUR_NAMES, colour_name, hex_rgb
from .runtime import ReceivedPart, make_card, run_blocking
from .speech import hear, word_timings
from .vision import inspect_image

NAME = "analyst"

_ISSUES = ("crack", "cracked", "broken", "scratch", "scratched", "dent", "leak", "leaking", "noise", "rattle", "defect",
           "stain", "stained", "mark", "fault", "loose", "bent", "dead", "missing")
COLOUR_TOLERANCE = 32.0
"""Largest RGB distance between an ordered and a seen colour that still counts as the same colour."""


def card() -> AgentCard:
    return make_card(NAME, "Answers customer-service questions from text reports, transcripts, photos (reads "
                     "pixels: defect places and counts, QR labels, status lights, colours, surface grain) and voice "
                     "notes (hears the words, and measures how they were said and the sounds behind them); "
                     "summarises other reports.",
                     input_modes=["text/plain", "text/markdown", "image/png", "image/jpeg", "image/webp", "audio/wav",
                                  "audio/x-wav"],
                     output_modes=["text/plain", "application/json"], skill="analyse-report")


@dataclass
class Evidence:
    """What the analyst was given: the report, texts derived from other media, image findings."""

    report: str = ""
    derived: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    grains: list[float] = field(default_factory=list)
    """Each photo's surface grain (`detail.surface_grain`), in the order of `findings`."""
    heard: list[Listening] = field(default_factory=list)
    """What each voice note that arrived as audio carries besides its words (`listening.listen`)."""
    unheard: list[str] = field(default_factory=list)
    """Why a voice note that arrived as audio gave no words (the speech agent's reason)."""

    @property
    def statement(self) -> str:
        """The report without its question (a question's words are not evidence)."""
        idx = self.report.lower().rfind("question:")
        return self.report[:idx] if idx >= 0 else self.report

    @property
    def said(self) -> str:
        return " ".join([self.statement, *self.derived])


async def gather(parts: list[ReceivedPart]) -> Evidence:
    ev = Evidence()
    reports: list[str] = []
    for p in parts:
        if p.text is not None:
            (ev.derived if p.transformed_from else reports).append(p.text)
        elif p.data is not None and p.modality.startswith("image/"):
            ev.findings.append(await run_blocking(inspect_image, p.data))
            ev.grains.append(await run_blocking(surface_grain, p.data))
        elif p.data is not None and p.modality.startswith("audio/"):  # the words, as the speech agent hears them
            text, why = await run_blocking(hear, p.data, p.modality)
            if text:
                ev.derived.append(text)
            else:
                ev.unheard.append(why or "no speech recognised in the recording")
            words = await run_blocking(word_timings, p.data, p.modality)
            ev.heard.append(await run_blocking(listen, p.data, p.modality, words))
    ev.report = "\n".join(reports)
    return ev


def _count_in_text(text: str) -> int | None:
    m = re.search(r"\b(\w+) (?:dark )?(?:marks?|dents?|cracks?|spots?)\b", text.lower())
    if m and m.group(1) in q.NUMBERS:
        return q.NUMBERS[m.group(1)]
    if m and m.group(1).isdigit():
        return int(m.group(1))
    return None


def _light_colour_in_text(text: str) -> str | None:
    m = re.search(r"\b(" + "|".join(q.NAMED_COLOURS) + r")\b(?: and [\w ]+?)? lights?\b", text.lower())
    return m.group(1) if m else None


def _dist(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


def solve(kind: str, ev: Evidence) -> str:
    """The answer to a question of `kind` from the evidence (deterministic)."""
    defects = [(f, d) for f in ev.findings for d in f.get("defects") or []]
    lights = [li for f in ev.findings for li in f.get("lights") or []]
    labels = [lab for f in ev.findings for lab in f.get("qr") or []]
    derived = " ".join(ev.derived)
    if kind == "location":
        if defects:
            f, d = max(defects, key=lambda fd: fd[1]["area"])
            return q.grid_cell(d["center"][0], d["center"][1], (0, 0, f["width"], f["height"]))
        return q.find_phrase(ev.statement, q.GRID) or q.find_phrase(derived, q.GRID) or "center"
    if kind == "count":
        if ev.findings:
            return str(len(defects))
        n = _count_in_text(derived)
        return str(n) if n is not None else "1"
    if kind == "colour_match":
        ordered = q.HEX.search(ev.statement)
        if ordered and ev.findings:
            seen = hex_rgb(ev.findings[0]["surfaceColor"])
            return "yes" if _dist(seen, hex_rgb(ordered.group(0))) <= COLOUR_TOLERANCE else "no"
        m = re.search(r"\bmostly (\w+)", derived.lower())
        if ordered and m and m.group(1) in COLOUR_NAMES:
            return "yes" if colour_name(ordered.group(0)) == m.group(1) else "no"
        return "no"  # nothing seen: the customer's word stands
    if kind == "status_light":
        order = q.manual_order(ev.statement)
        fault = re.search(r"\ban? (\w+) light marks the fault", ev.statement.lower())
        if lights and order and len(order) == len(lights) and fault and fault.group(1) in q.NAMED_COLOURS:
            want = q.NAMED_COLOURS[fault.group(1)]
            ranked = sorted(lights, key=lambda li: li["center"][0])
            idx = min(range(len(ranked)), key=lambda i: _dist(hex_rgb(ranked[i]["color"]), want))
            return order[idx]
        told = re.search(r"lights from left to right: ([a-z, ]+)", derived.lower())
        if told and order and fault:
            colours_told = [w.strip() for w in told.group(1).split(",")]
            if len(colours_told) == len(order) and fault.group(1) in colours_told:
                return order[colours_told.index(fault.group(1))]
        return order[0] if order else "unknown"
    if kind == "severity":
        meanings = q.manual_colours(ev.statement)
        seen_rgb: tuple[int, int, int] | None = hex_rgb(lights[0]["color"]) if lights else None
        if seen_rgb is None:
            word = _light_colour_in_text(derived)
            seen_rgb = q.NAMED_COLOURS.get(word) if word else None
        if meanings and seen_rgb is not None:
            colour = q.nearest_colour(seen_rgb, meanings)
            if colour is not None:
                return meanings[colour]
        return next(iter(meanings.values()), "unknown")
    if kind == "request":
        return q.spoken_request(ev.said) or "check"
    if kind == "part":
        return q.spoken_part(ev.said) or "unknown"
    if kind == "label_action":
        request = q.spoken_request(ev.said) or "check"
        serials = [lab["text"] for lab in labels if q.SERIAL.fullmatch(lab["text"])] or q.SERIAL.findall(ev.said)
        return f"{request} {serials[0] if serials else 'unknown'}"
    if kind == "damaged_unit":
        if defects and labels:
            f, d = max(defects, key=lambda fd: fd[1]["area"])
            near = min(labels, key=lambda lab: math.dist(lab["center"], d["center"]))
            return str(near["text"])
        found = q.SERIAL.findall(ev.said)
        return found[0] if found else "unknown"
    if kind == "confirm":
        part = q.spoken_part(ev.said) or "unknown"
        damaged = bool(defects) if ev.findings else bool(re.search(r"\b(?:dark )?marks?\b", derived.lower()))
        return f"{part} {'yes' if damaged else 'no'}"
    if kind in SIGNAL_SOLVERS:
        return SIGNAL_SOLVERS[kind](ev)
    raise ValueError(f"question: unknown kind {kind!r}")


URGENT_PITCH_HZ = 108.0
URGENT_LOUDNESS_DBFS = -16.5
URGENT_WORDS_PER_S = 3.8
"""An urgent caller: a majority of the measured cues over these lines — median pitch, loudness of the speech, words
per second (set on the development set: urgent 123-140 Hz, -15 to -12 dBFS, 4.5-5.8 words/s where Whisper made the
words out; calm 77-87 Hz, -23 to -19 dBFS, 2.9-3.3 words/s; the voices' own 97-105 Hz, -20 to -15 dBFS)."""
RISE_ST = 0.8
"""A question: the pitch turns up at least this many semitones at the very end (`listening.pitch_profile`; on the
development set questions +1.2 to +2.7 in five of six, statements -3.5 to -1.0)."""
_TEXT_URGENT = ("urgent", "urgently", "immediately", "asap", "emergency", "hurry")


def _words_in(text: str, vocab: tuple[str, ...]) -> bool:
    return any(w in vocab for w in q.words(text))


def _urgency(ev: Evidence) -> str:
    for h in ev.heard:
        votes = [v for v in ((h.pitch_hz, URGENT_PITCH_HZ), (h.loudness_dbfs, URGENT_LOUDNESS_DBFS),
                             (h.words_per_s, URGENT_WORDS_PER_S)) if v[0] is not None]
        if votes:
            return "urgent" if sum(1 for value, line in votes if value is not None and value >= line) * 2 > len(votes) \
                else "calm"
    return "urgent" if _words_in(" ".join(ev.derived), _TEXT_URGENT) else "calm"


def _question_rise(ev: Evidence) -> str:
    for h in ev.heard:
        if h.pitch_rise_st is not None:
            return "question" if h.pitch_rise_st >= RISE_ST else "statement"
    return "question" if any(t.rstrip().endswith("?") for t in ev.derived) else "statement"


def _alarm(ev: Evidence) -> str:
    for h in ev.heard:
        return "siren" if h.sweep_hz is not None else "beep" if h.beep_hz is not None else "none"
    said = " ".join(ev.derived)
    return "siren" if _words_in(said, ("siren", "sirens")) else "beep" if _words_in(
        said, ("beep", "beeps", "beeping")) else "none"


def _whine(ev: Evidence) -> str:
    for h in ev.heard:
        return "yes" if h.whine_hz is not None else "no"
    return "yes" if _words_in(" ".join(ev.derived), ("whine", "whining", "whirring", "buzzing")) else "no"


def _silence(ev: Evidence) -> str:
    for h in ev.heard:
        if h.onset_s is not None:
            return str(max(0, round(h.onset_s)))
    return "3"  # no timing in a transcript: the middle of 1-5 s


_SHADE = re.compile(r"\b(?:in|is) ([a-z][a-z ]*?) \((#[0-9a-fA-F]{6})\)")


def _shade(ev: Evidence) -> str:
    named = _SHADE.findall(ev.statement.lower())  # the ordered shade first, then the other one
    if not named:
        return "unknown"
    if ev.findings:
        seen = hex_rgb(ev.findings[0]["surfaceColor"])
        return str(min(named, key=lambda nh: _dist(seen, hex_rgb(nh[1])))[0])
    return str(named[0][0])  # a colour word cannot tell two shades of it apart: the customer's order stands


def _texture(ev: Evidence) -> str:
    if ev.grains:
        return "rough" if ev.grains[0] >= ROUGH_GRAIN else "smooth"
    return "rough" if _words_in(" ".join(ev.derived), ("rough", "textured", "grainy", "matte")) else "smooth"


def _label_side(ev: Evidence) -> str:
    defects = [(f, d) for f in ev.findings for d in f.get("defects") or []]
    labels = [lab for f in ev.findings for lab in f.get("qr") or []]
    if defects and labels:
        _, d = max(defects, key=lambda fd: fd[1]["area"])
        lab = labels[0]
        dx, dy = lab["center"][0] - d["center"][0], lab["center"][1] - d["center"][1]
        if abs(dx) > abs(dy):
            return "right" if dx > 0 else "left"
        return "below" if dy > 0 else "above"
    return "above"  # a caption places the dent but not the label: a guess


SIGNAL_SOLVERS = {"urgency": _urgency, "question_rise": _question_rise, "alarm": _alarm, "whine": _whine,
                  "silence": _silence, "shade": _shade, "texture": _texture, "label_side": _label_side}
"""The kinds whose answer lives in the signal: measured when the voice note or photo arrived natively, else read
from whatever words the transcript or caption holds, else a stated guess."""


def speakable(f: dict[str, Any]) -> str:
    """A photo's findings in words a person (or a speech synthesiser) can follow."""
    bits = []
    lights = f.get("lights") or []
    if lights:
        bits.append(f"{len(lights)} status light{'s' if len(lights) > 1 else ''}, left to right: "
                    + ", ".join(li["colorName"] for li in lights))
    defects = f.get("defects") or []
    if defects:
        places = ", ".join(q.grid_cell(d["center"][0], d["center"][1], (0, 0, f["width"], f["height"])) for d in defects)
        bits.append(f"{len(defects)} dark mark{'s' if len(defects) > 1 else ''} ({places})")
    for lab in f.get("qr") or []:
        bits.append(f"a label reading {lab['text']}")
    return "the photo shows " + ("; ".join(bits) if bits else "nothing unusual")


def summarise(ev: Evidence) -> str:
    """A report without a known question: the issues it names, its urgency, what the photos show, the faulty subsystem."""
    text = ev.said
    found = q.words(text)
    issues = sorted({w for w in found if w in _ISSUES})
    urgent = any(w in found for w in ("urgent", "immediately", "dangerous", "smoke", "fire"))
    out = (f"issues: {', '.join(issues)}" if issues else "no issue named") + f"; urgency: {'high' if urgent else 'normal'}"
    for f in ev.findings:
        out += "; " + speakable(f)
    for why in ev.unheard:
        out += f"; a voice note: {why}"
    if q.manual_order(ev.statement) and ev.findings:
        out += f"; the fault is in the {solve('status_light', ev)} subsystem"
    return out


async def reply(parts: list[ReceivedPart]) -> list[dict[str, Any]]:
    ev = await gather(parts)
    if not ev.report and not ev.derived and not ev.findings and not ev.heard:
        raise ValueError("no text, image or audio part to read")
    kind = q.classify(q.question_of(ev.report)) if ev.report else None
    if kind is None:
        summary = summarise(ev)
        return [{"text": summary, "mediaType": "text/plain"},
                {"data": {"summary": summary, "findings": ev.findings}, "mediaType": "application/json"}]
    answer = solve(kind, ev)
    return [{"text": answer, "mediaType": "text/plain"},
            {"data": {"answer": answer, "question": kind, "usedPixels": bool(ev.findings), "usedAudio": bool(ev.heard),
                      "findings": ev.findings, "heard": [h.to_json() for h in ev.heard]},
             "mediaType": "application/json"}]
