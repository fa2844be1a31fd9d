"""The producer's one call: a ready A2A 1.0 part from a file or bytes, with its modality,
features, thumbnail and (for big payloads, given an uploader) a payload reference.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InvalidParams
from ..ext import FeatureSource, PartExtension, PayloadRef, write_part
from ..modality import EMBEDDING, parse_modality
from .audio import SNIFFED_AUDIO, sniff_audio
from .base import load_once
from .containers import IMAGE_BRANDS, audio_only, ftyp_brand
from .mesh import sniff_mesh
from .pipeline import FeaturePipeline
from .text import text_bom, utf16_without_bom

Uploader = Callable[[bytes, str], str]
"""Stores the bytes (given the modality) and returns the URL they can be fetched from."""

INLINE_LIMIT = 1024 * 1024

_EXTENSIONS = {
    ".obj": "model/obj",
    ".stl": "model/stl",
    ".ply": "model/x-ply",
    ".glb": "model/gltf-binary",
    ".gltf": "model/gltf+json",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
    ".opus": "audio/ogg; codecs=opus",
    ".flac": "audio/flac",
    ".mp3": "audio/mpeg",
    ".m4a": "audio/mp4",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".mkv": "video/x-matroska",
    ".emb": EMBEDDING,
    ".f32": EMBEDDING,
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".json": "application/json",
}

@load_once
def _default_pipeline() -> FeaturePipeline:
    """The default extractors, made on the first part built without a pipeline of its own."""
    return FeaturePipeline()


def sniff_modality(data: bytes, filename: str | None = None) -> str:
    """The modality of `data` from its magic bytes, then its file name, then its content."""
    head = data[:32]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:2] == b"BM" and len(data) > 26:
        return "image/bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff"
    brand = ftyp_brand(head)
    if brand in ("avif", "avis"):
        return "image/avif"
    if brand in IMAGE_BRANDS:
        return "image/heic"
    audio = sniff_audio(data)
    if audio in ("mp4", "webm", "3gp", "mpegts"):
        if audio == "mp4" and head[8:11] == b"M4A":
            return "audio/mp4"
        if audio_only(data):  # a voice note in WebM, MP4 or 3GP is audio, not a video without pictures (or a cover's)
            if audio == "webm" and b"matroska" in data[:64]:
                return "audio/x-matroska"  # a Matroska audio file (.mka), as its video kin is video/x-matroska
            return {"3gp": "audio/3gpp", "mpegts": "audio/mp2t"}.get(audio, f"audio/{audio}")
        if audio == "3gp":
            return "video/3gpp"
        if audio == "mpegts":
            return "video/mp2t"
        if audio == "webm" and b"matroska" in data[:64]:
            return "video/x-matroska"
        return "video/quicktime" if brand == "qt" else f"video/{audio}"
    if audio == "asf" and audio_only(data) is False:
        return "video/x-ms-wmv"  # pictures in it: a Windows Media video
    if audio in ("mp3", "aac", "ac3", "eac3") and head[:3] != b"ID3" and not (filename or "").lower().endswith(f".{audio}"):
        audio = None  # a bare MPEG frame sync is too weak a sign on its own
    if audio is not None:
        return SNIFFED_AUDIO[audio]
    if filename:
        suffix = Path(filename).suffix.lower()
        if suffix in _EXTENSIONS:
            return _EXTENSIONS[suffix]
        guessed, _ = mimetypes.guess_type(filename)
        if guessed:
            return guessed
    mesh = sniff_mesh(data)
    if mesh in ("ply",):
        return "model/x-ply"
    if mesh in ("stl", "stl-binary"):
        return "model/stl"
    bom = text_bom(data)
    if bom is not None:
        return "text/plain" if bom == "utf-8" else f"text/plain; charset={bom}"
    wide = utf16_without_bom(data)
    if wide is not None:
        return f"text/plain; charset={wide}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    return "application/octet-stream" if "\x00" in text else "text/plain"


def build_part(
    source: bytes | str | Path,
    *,
    modality: str | None = None,
    features: bool = True,
    thumbnail: bool = True,
    filename: str | None = None,
    pipeline: FeaturePipeline | None = None,
    budget_s: float = 2.0,
    uploader: Uploader | None = None,
    inline_limit: int = INLINE_LIMIT,
) -> dict[str, Any]:
    """An A2A 1.0 part (JSON form) with the multimodal extension filled in.

    `source` is the bytes, or a path (`str` or `Path`) to read. The modality is sniffed
    from magic bytes and the file name unless given. With `uploader`, payloads over
    `inline_limit` bytes are stored through it and sent by reference (`url` + `payload`);
    otherwise they travel inline as `raw` (base64). Blocking: call it off the event loop.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise InvalidParams(f"source: no such file: {str(path)!r}", field="source")
        data = path.read_bytes()
        filename = filename or path.name
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise InvalidParams(f"source: must be bytes or a path, got {type(source).__name__}", field="source")
    mod = parse_modality(modality) if modality else parse_modality(sniff_modality(data, filename))
    modality_str = str(mod)

    part: dict[str, Any] = {}
    encoding: str | None = "raw"
    payload = None
    if mod.type == "text" and (uploader is None or len(data) <= inline_limit):
        charset = mod.param("charset") or "utf-8"
        try:
            part["text"] = data.decode(charset)
        except (UnicodeDecodeError, LookupError):
            raise InvalidParams(f"source: not valid {charset} text for {modality_str}", field="source") from None
        encoding = None
    elif uploader is not None and len(data) > inline_limit:
        part["url"] = uploader(data, modality_str)
        payload = PayloadRef(hashlib.sha256(data).hexdigest(), len(data))
        encoding = "native"
    else:
        part["raw"] = base64.b64encode(data).decode("ascii")
    if filename:
        part["filename"] = filename

    found: dict[str, Any] = {}
    source_info: FeatureSource | None = None
    schema: str | None = None
    thumb = None
    if features or thumbnail:
        result = (pipeline or _default_pipeline()).extract_blocking(mod, data, budget_s=budget_s)
        if features:
            found = dict(result.features)
            found.setdefault("size", len(data))
            found["sha256"] = hashlib.sha256(data).hexdigest()
            if result.late or result.skipped:  # what could not be made here, and why (as the gateway records it)
                found["incomplete"] = [*result.late, *result.skipped]
            schema = result.schema
            name = result.source.extractor if result.source else None
            version = result.source.version if result.source else None
            source_info = FeatureSource("producer", name, version)
        if thumbnail:
            thumb = result.thumbnail
    write_part(
        part,
        PartExtension(
            modality=modality_str,
            encoding=encoding,
            features=found,
            feature_schema=schema if found else None,
            feature_source=source_info if found else None,
            payload=payload,
            thumbnail=thumb,
        ),
    )
    return part
