"""Customer-service questions the reasoners answer: what is asked, and the words of each answer.

Both reasoners read the question the same way (a handful of phrasings, matched by words);
they differ in what evidence they use to answer it (see `reasoner.py` and `keyword.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

GRID = ("top left", "top", "top right", "left", "center", "right", "bottom left", "bottom", "bottom right")
SIDES = ("left", "right", "top", "bottom", "front", "back")
THINGS = ("hinge", "lid", "door", "handle", "screen", "button", "cable", "fan", "motor", "battery", "panel", "case", "label")
REQUESTS = ("fix", "replace", "refund", "check")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "a": 1, "an": 1,
           "single": 1, "several": 3}
SERIAL = re.compile(r"\bSN-\d{4,8}\b")
HEX = re.compile(r"#[0-9a-fA-F]{6}\b")

NAMED_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (205, 45, 40), "amber": (255, 176, 0), "orange": (235, 135, 30), "yellow": (225, 205, 45),
    "green": (50, 160, 70), "blue": (45, 90, 205), "purple": (130, 60, 170), "pink": (230, 130, 170),
    "brown": (130, 85, 50), "white": (238, 238, 238), "grey": (128, 128, 128), "gray": (128, 128, 128), "black": (25, 25, 25),
}
"""Colour words a report or a caption may use, with a typical RGB each."""

KINDS = ("location", "count", "colour_match", "status_light", "severity", "request", "part", "label_action",
         "damaged_unit", "confirm", "urgency", "question_rise", "alarm", "whine", "silence", "shade", "texture",
         "label_side")

_KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("urgency", re.compile(r"\burgent or calm\b")),
    ("question_rise", re.compile(r"\bask a question or state\b")),
    ("alarm", re.compile(r"\bwhich alarm\b")),
    ("whine", re.compile(r"\bwhine audible\b")),
    ("silence", re.compile(r"\bhow many seconds\b")),
    ("shade", re.compile(r"\bwhich shade\b")),
    ("texture", re.compile(r"\brough or smooth\b")),
    ("label_side", re.compile(r"\brelative to the (?:dent|crack|mark)\b")),
    ("damaged_unit", re.compile(r"\bwhich serial number\b.*\bdamaged\b")),
    ("label_action", re.compile(r"\bwhat should we do\b.*\bserial\b")),
    ("confirm", re.compile(r"\bdoes the photo show damage\b")),
    ("location", re.compile(r"\bwhere\b")),
    ("count", re.compile(r"\bhow many\b")),
    ("colour_match", re.compile(r"\bcolou?r\b.*\bmatch\b|\bmatch\b.*\bcolou?r\b")),
    ("status_light", re.compile(r"\bwhich subsystem\b")),
    ("severity", re.compile(r"\bwarning or a failure\b")),
    ("part", re.compile(r"\bwhich part\b")),
    ("request", re.compile(r"\bask(?:s|ing)? us to do\b|\bwhat does the customer want\b")),
)


def question_of(text: str) -> str:
    """The question in a report: what follows the last `Question:`, else the last sentence."""
    idx = text.lower().rfind("question:")
    if idx >= 0:
        return text[idx + len("question:"):].strip()
    sentences = [s for s in re.split(r"(?<=[.?!])\s+", text.strip()) if s]
    return sentences[-1] if sentences else ""


def classify(question: str) -> str | None:
    """Which kind of question this is (one of `KINDS`), or None."""
    q = question.lower()
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(q):
            return kind
    return None


def normalize(answer: str) -> str:
    """Answers compare after lower-casing and dropping punctuation (but the dash in a serial)."""
    return " ".join(re.sub(r"[^a-z0-9#-]+", " ", answer.lower()).split())


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9#'-]+", text.lower())


def find_phrase(text: str, phrases: Iterable[str]) -> str | None:
    """The phrase that occurs first in `text` (whole words; the longest wins at one place)."""
    low = " " + " ".join(words(text)) + " "
    best: tuple[int, int, str] | None = None
    for phrase in phrases:
        i = low.find(" " + phrase + " ")
        if i >= 0 and (best is None or (i, -len(phrase)) < best[:2]):
            best = (i, -len(phrase), phrase)
    return best[2] if best else None


def manual_order(report: str) -> list[str]:
    """The subsystems a manual lists "from left to right: a, b, c and d"."""
    m = re.search(r"from left to right[^:]*:\s*([a-z ,]+?)(?:[.;]|$)", report.lower())
    if not m:
        return []
    return [w.strip() for w in re.split(r",|\band\b", m.group(1)) if w.strip()]


def manual_colours(report: str) -> dict[str, str]:
    """What each light colour means, from "an amber light means a warning" sentences."""
    return {c: meaning for c, meaning in re.findall(r"\b(\w+) light means an? (\w+)", report.lower())}


def nearest_colour(rgb: tuple[int, int, int], names: Iterable[str]) -> str | None:
    known = [n for n in names if n in NAMED_COLOURS]
    if not known:
        return None
    return min(known, key=lambda n: sum((a - b) ** 2 for a, b in zip(rgb, NAMED_COLOURS[n])))


def spoken_request(text: str) -> str | None:
    m = re.search(r"\bplease (" + "|".join(REQUESTS) + r")\b", text.lower())
    return m.group(1) if m else None


def spoken_part(text: str) -> str | None:
    """"the left hinge is cracked" → "left hinge"."""
    m = re.search(r"\b(?:(" + "|".join(SIDES) + r") )?(" + "|".join(THINGS) + r") (?:is|are)\b", text.lower())
    if not m:
        return None
    return f"{m.group(1)} {m.group(2)}" if m.group(1) else m.group(2)


def grid_cell(x: float, y: float, box: tuple[float, float, float, float]) -> str:
    """The `GRID` name of point (x, y) inside box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    col = min(2, max(0, int(3 * (x - x0) / (x1 - x0))))
    row = min(2, max(0, int(3 * (y - y0) / (y1 - y0))))
    return GRID[row * 3 + col]
