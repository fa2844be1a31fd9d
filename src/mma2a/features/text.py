"""Text facts: language (langdetect with a fixed seed, so the same text always gives the same
answer), length in characters, word count, and the most frequent words that are not stopwords.
"""

from __future__ import annotations

import re
import unicodedata
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


def script_of(ch: str) -> str:
    """The script a letter is written in (`LATIN`, `CYRILLIC`, `GREEK`, `ARABIC`, `CJK` for Han and kana together,
    `HANGUL`, ...) from its Unicode name; `?` for a letter without one."""
    import unicodedata

    first = unicodedata.name(ch, "?").split(" ", 1)[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA", "HALFWIDTH", "FULLWIDTH") else first


DOMINANT_SHARE = 0.9
SCRIPT_SAMPLE = 2000
"""A text whose most-used script has less than this share of the letters among its first `SCRIPT_SAMPLE` characters
is judged by that script's words alone."""


def dominant_script_text(text: str) -> str:
    """`text`, or when its letters are in several scripts with none above `DOMINANT_SHARE`, the words of the script
    most of its letters are in: langdetect judged a message of English, Russian, Greek and Arabic words `bg`, none of
    them (the language of most of its text is its Russian)."""
    if text.isascii():
        return text  # one script: the common case, at no cost
    counts: Counter[str] = Counter(script_of(ch) for ch in text[:SCRIPT_SAMPLE] if ch.isalpha())
    total = sum(counts.values())
    if not total:
        return text
    script, most = counts.most_common(1)[0]
    if most >= DOMINANT_SHARE * total:
        return text
    kept = [w for w in _WORD.findall(text) if sum(script_of(c) == script for c in w if c.isalpha()) * 2 > len(w)]
    return " ".join(kept) or text


def detect_language(text: str) -> str | None:
    """BCP 47 language tag of `text` (`en`, `zh-CN`), or None when there is nothing to judge; a text in several
    scripts is judged by its main script's words (`dominant_script_text`)."""
    from langdetect.lang_detect_exception import LangDetectException

    factory = _languages()
    try:
        detector = factory.create()
        detector.append(dominant_script_text(text))
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


WINDOWS_1252_LABELS = frozenset({"iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "cp819",
                                  "ibm819", "iso-ir-100", "csisolatin1", "iso_8859-1:1987"})
"""Labels of Latin-1 that every browser reads as windows-1252 (the WHATWG Encoding standard): a Windows program's
text labelled ISO-8859-1 has its curly quotes, dashes and euro sign in 0x80-0x9F, which Latin-1 makes invisible
control characters (`don't` with a curly apostrophe was the two words `don` and `t`)."""


def utf16_without_bom(data: bytes) -> str | None:
    """`utf-16-le` or `-be` when unlabelled bytes are plainly UTF-16 without a byte order mark (a program's export:
    every other byte NUL in the first 512, never the other ones); None otherwise. Read as UTF-8 they were refused as
    binary (`contains NUL characters`) or as not valid UTF-8."""
    head = data[:512]
    if len(head) < 8 or len(data) % 2:
        return None
    even, odd = head[0::2], head[1::2]
    for zeros, other, charset in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if zeros.count(0) >= 0.75 * len(zeros) and other.count(0) == 0:
            return charset
    return None


META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
XML_ENCODING = re.compile(rb"""^<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)["']""")


def xml_encoding(data: bytes) -> str | None:
    """The encoding an XML document's declaration states (`<?xml version="1.0" encoding="ISO-8859-1"?>`): what an XML
    part without a `charset` parameter is in (RFC 7303); None without one."""
    found = XML_ENCODING.match(data[:256])
    return found.group(1).decode("ascii").lower() if found else None


def html_charset(data: bytes) -> str | None:
    """The charset an HTML document declares in its first 1024 bytes (`<meta charset=...>` or the `http-equiv`
    content type), as a browser's prescan finds it; None without one."""
    found = META_CHARSET.search(data[:1024])
    return found.group(1).decode("ascii").lower() if found else None


def decode_text(data: bytes, modality: Modality) -> str:
    """The text in `data`: a byte order mark decides the encoding (as a browser decides, whatever the label says:
    a Windows editor's UTF-16 file sent as `text/plain` is still read) and is not part of the text; else the
    `charset` parameter (Latin-1's labels read as windows-1252, as browsers read them), else an HTML document's own
    `<meta charset>` or an XML document's declared encoding, else UTF-16 when the bytes plainly are, else UTF-8. `MediaError` names the charset and the first
    byte that is not valid in it."""
    label = modality.param("charset")
    bom = text_bom(data)
    found = None
    if not (bom or label):
        if modality.subtype == "xml" or modality.subtype.endswith("+xml"):
            found = xml_encoding(data)
        if found is None and modality.subtype in HTML_SUBTYPES:
            found = html_charset(data)
    charset = bom or label or found or utf16_without_bom(data) or "utf-8"
    body = data[len(next(m for m, c in BOMS if c == bom)):] if bom else data
    if charset.lower() in WINDOWS_1252_LABELS:
        try:
            return body.decode("cp1252")
        except UnicodeDecodeError:  # 0x81, 0x8D, 0x8F, 0x90, 0x9D: no windows-1252 character; Latin-1 reads them all
            return body.decode("latin-1")
    try:
        text = body.decode(charset)
    except LookupError:
        raise MediaError(f"text: unknown charset {charset!r}") from None
    except UnicodeDecodeError as exc:
        at = exc.start + len(data) - len(body)
        said = f"; the part says charset={label}" if label else " (no charset given: UTF-8 assumed)"
        raise MediaError(f"text: not valid {charset} at byte {at} (0x{data[at]:02x}){said}") from None
    return text


HTML_SUBTYPES = frozenset({"html", "xhtml+xml"})
"""Text parts whose words are their visible text, not their markup (an HTML mail's keywords were `body`, `div`)."""


_OPENS = re.compile(r"<(?:/?[A-Za-z]|[!?])")  # what a `<` must be followed by to open markup
_TAG_NAME = re.compile(r"</?([A-Za-z][^\s/>]*)")
_TAG_REST = re.compile(r"""(?:[^>"']++|"[^"]*+"|'[^']*+')*+>""")  # possessive: never backtracks
_HIDDEN = frozenset({"head", "title", "template", "noscript"})
_RAW_TEXT = frozenset({"script", "style"})  # their content is not markup: up to their end tag, whatever it holds
_BLOCK = frozenset({"br", "p", "div", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6"})


def html_text(markup: str) -> str:
    """The text a browser shows of an HTML document: its markup, scripts and styles left out, entities resolved.

    One pass, each `<` looked at once, every search forward from it: the standard library's `HTMLParser` took time
    quadratic in a malformed document's length (`<a` repeated, unclosed `<!--`: 200,000 characters 18-21 s of CPU in a
    features thread, which no budget stops; docs/security.md S19-3). A comment, declaration or tag left open runs to
    the end (as a browser reads it)."""
    from html import unescape

    out: list[str] = []
    hidden, at, n = 0, 0, len(markup)
    while at < n:
        opens = _OPENS.search(markup, at)  # a `<` that opens nothing (`a < b`, `<<`) is text
        lt = n if opens is None else opens.start()
        if not hidden and lt > at:
            out.append(unescape(markup[at:lt]))
        if lt >= n:
            break
        if markup.startswith("<!--", lt):
            close = markup.find("-->", lt + 4)
            at = n if close < 0 else close + 3
            continue
        tag = _TAG_NAME.match(markup, lt)
        if tag is None:  # a declaration or processing instruction
            close = markup.find(">", lt + 2)
            at = n if close < 0 else close + 1
            continue
        attrs = _TAG_REST.match(markup, tag.end())  # quoted values may hold `>`
        if attrs is not None:
            at = attrs.end()
        else:  # a quote left open (none follows: this fails once a document) or no `>`
            close = markup.find(">", tag.end())
            if close < 0:
                break
            at = close + 1
        name, end_tag = tag.group(1).lower(), markup[lt + 1] == "/"
        if end_tag:
            if name in _HIDDEN:
                hidden = max(0, hidden - 1)
            else:
                out.append(" ")
        elif name in _RAW_TEXT:
            ends = re.compile(r"</" + name + r"[\s/>]", re.IGNORECASE).search(markup, at)
            if ends is None:
                break
            close = markup.find(">", ends.start())
            at = n if close < 0 else close + 1
        elif name in _HIDDEN:
            hidden += 1
        elif name in _BLOCK:
            out.append(" ")
    return "".join(out)


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
        shown = html_text(text) if modality.subtype in HTML_SUBTYPES else text
        # words as a reader sees them (`length` counts what was sent): composed, so that `cafe` + U+0301 (macOS's
        # decomposed form) is the one word `café`, not `cafe` and a stray accent
        visible = unicodedata.normalize("NFC", _INVISIBLE.sub("", shown))
        sample = visible[: self.limits.max_text_chars]
        out: dict[str, Any] = {"length": len(text), "words": count_words(visible),
                               "keywords": keywords(sample, self.keyword_count)}
        language = detect_language(sample) if sample.strip() else None
        if language is not None:
            out["language"] = language
        return out
