"""Text facts: language (langdetect with a fixed seed, so the same text always gives the same
answer), length in characters, word count, and the most frequent words that are not stopwords.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits, check_deadline, load_once

_WORD = re.compile(r"\w+", re.UNICODE)
_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
"""Invisible format characters (soft hyphen, zero-width space/joiners, direction marks and embeddings, word joiner,
BOM): not part of any word a reader sees. Left in, `in<ZWJ>voice` was two words and never the keyword `invoice`,
and a Persian word written with its zero-width non-joiner was two."""

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yourself yourselves also may might must shall us let
    le la les de des du un une et est en que qui dans pour pas sur au aux ce il elle nous vous ils elles
    der die das und ist nicht ein eine zu den mit von dem sich des auf für im el los las y es por con para una del
    se lo al""".split()
)


@load_once
def _languages() -> Any:
    """Our own langdetect factory, loaded once, seeded with 0 (langdetect is random unless seeded)."""
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)
    return factory


def detect_language(text: str) -> str | None:
    """BCP 47 language tag of `text` (`en`, `zh-CN`), or None when there is nothing to judge."""
    from langdetect.lang_detect_exception import LangDetectException

    factory = _languages()
    try:
        detector = factory.create()
        detector.append(text)
        lang: str = detector.detect()
    except LangDetectException:
        return None
    if "-" in lang:
        base, _, region = lang.partition("-")
        return f"{base}-{region.upper()}"
    return lang


def count_words(text: str) -> int:
    """The words in `text`, counted as they are found, within the extraction's deadline: no list of them (15 MB of
    two-letter words took the extractor's process up 375 MB that way, 15 MB counted so; load average 2.3)."""
    n = 0
    for n, _ in enumerate(_WORD.finditer(text), 1):
        if not n & 0xFFFF:
            check_deadline("word count")
    return n


def keywords(text: str, count: int = 5) -> list[str]:
    """The `count` most frequent words (lower case, 3+ letters, not stopwords, not numbers); ties alphabetical."""
    words = [w.lower() for w in _WORD.findall(text)]
    counts = Counter(w for w in words if len(w) >= 3 and w not in STOPWORDS and not w.isdigit())
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
        (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
"""Byte order marks and the encodings they announce (UTF-32 LE before UTF-16 LE: its mark begins with the other's)."""


def text_bom(data: bytes) -> str | None:
    """The encoding a byte order mark at the start of `data` announces, or None."""
    for mark, charset in BOMS:
        if data.startswith(mark):
            return charset
    return None


def decode_text(data: bytes, modality: Modality) -> str:
    """The text in `data`: a byte order mark decides the encoding (as a browser decides, whatever the label says:
    a Windows editor's UTF-16 file sent as `text/plain` is still read) and is not part of the text; else the
    `charset` parameter, else UTF-8. `MediaError` names the charset and the first byte that is not valid in it."""
    label = modality.param("charset")
    bom = text_bom(data)
    charset = bom or label or "utf-8"
    body = data[len(next(m for m, c in BOMS if c == bom)):] if bom else data
    try:
        text = body.decode(charset)
    except LookupError:
        raise MediaError(f"text: unknown charset {charset!r}") from None
    except UnicodeDecodeError as exc:
        at = exc.start + len(data) - len(body)
        said = f"; the part says charset={label}" if label else " (no charset given: UTF-8 assumed)"
        raise MediaError(f"text: not valid {charset} at byte {at} (0x{data[at]:02x}){said}") from None
    return text


class TextExtractor:
    """language, length (characters), words, keywords."""

    name = "text-basic"
    version = "1.0"
    modalities = ("text/*",)
    requires = ("langdetect",)
    extra = "text"

    def __init__(self, *, limits: Limits | None = None, keyword_count: int = 5) -> None:
        self.limits = limits or Limits()
        self.keyword_count = keyword_count

    def warm_up(self) -> None:
        """Load the language profiles (about 0.3 s) before the first message needs them."""
        _languages()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        self.limits.check_size(data, "text")
        text = decode_text(data, modality)
        if "\x00" in text:
            raise MediaError("text: contains NUL characters; this looks like binary data, not text")
        visible = _INVISIBLE.sub("", text)  # words as a reader sees them; `length` counts what was sent
        sample = visible[: self.limits.max_text_chars]
        out: dict[str, Any] = {"length": len(text), "words": count_words(visible),
                               "keywords": keywords(sample, self.keyword_count)}
        language = detect_language(sample) if sample.strip() else None
        if language is not None:
            out["language"] = language
        return out
