"""Text facts: language (langdetect with a fixed seed, so the same text always gives the same
answer), length in characters, word count, and the most frequent words that are not stopwords.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits, load_once

_WORD = re.compile(r"\w+", re.UNICODE)

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


def keywords(text: str, count: int = 5) -> list[str]:
    """The `count` most frequent words (lower case, 3+ letters, not stopwords, not numbers); ties alphabetical."""
    words = [w.lower() for w in _WORD.findall(text)]
    counts = Counter(w for w in words if len(w) >= 3 and w not in STOPWORDS and not w.isdigit())
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


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
        charset = modality.param("charset") or "utf-8"
        try:
            text = data.decode(charset)
        except LookupError:
            raise MediaError(f"text: unknown charset {charset!r}") from None
        except UnicodeDecodeError as exc:
            raise MediaError(f"text: not valid {charset} at byte {exc.start}") from None
        if "\x00" in text:
            raise MediaError("text: contains NUL characters; this looks like binary data, not text")
        sample = text[: self.limits.max_text_chars]
        out: dict[str, Any] = {"length": len(text), "words": len(_WORD.findall(text)), "keywords": keywords(sample, self.keyword_count)}
        language = detect_language(sample) if sample.strip() else None
        if language is not None:
            out["language"] = language
        return out
