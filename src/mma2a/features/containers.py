"""Audio and video containers read with PyAV (the `video` extra): bytes opened as an input
container with one clear error, and FFmpeg's reason without PyAV's decoration. The audio and
video extractors and the media adaptation (`mma2a.adapt.media`) all open media here."""

from __future__ import annotations

import io
from typing import Any

from ..errors import MediaError


def av_reason(exc: BaseException) -> str:
    """FFmpeg's reason without PyAV's errno and file-name decoration."""
    reason = getattr(exc, "strerror", None)
    return str(reason) if reason else str(exc)


def open_input(data: bytes, what: str) -> Any:
    """`data` as a PyAV input container (use it as a context manager); `MediaError` naming `what`
    (`audio`, `video`) and FFmpeg's reason when the bytes are no container it reads."""
    import av

    try:  # a tag that is not UTF-8 (any bytes a recorder or a client wrote) is read with U+FFFD, not a decode error
        return av.open(io.BytesIO(data), mode="r", metadata_errors="replace")
    except av.FFmpegError as exc:
        raise MediaError(f"{what}: not a readable {what} container: {av_reason(exc)}") from None


def audio_only(data: bytes) -> bool | None:
    """Does this container hold audio and no video (an audio-only WebM or MP4)? None without PyAV, or when its
    header cannot be read: the container's own type then stands."""
    try:
        import av
    except ImportError:
        return None
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="replace") as c:
            return bool(c.streams.audio) and not moving_pictures(c)
    except Exception:  # noqa: BLE001 - FFmpeg errors of every kind: not judged here, the decoder reports them
        return None


def moving_pictures(container: Any) -> list[Any]:
    """The container's video streams that are pictures in motion: not a cover picture (`attached_pic`: the album art of
    an MP3, FLAC or M4A, a podcast's artwork in an MP4). A song with its cover was sniffed as `video/mp4` and read as a
    one-frame video at 90,000 fps."""
    import av

    cover = av.stream.Disposition.attached_pic
    return [s for s in container.streams.video if not s.disposition & cover]


def stream_context(stream: Any, what: str, container: str) -> Any:
    """The decoder context of a container's `stream`; `MediaError` naming `what` when FFmpeg opened none (a QuickTime
    file cut before its index still lists a stream, with no codec parameters to decode it by)."""
    ctx = stream.codec_context
    if ctx is None:
        raise MediaError(f"{what}: the {container} container's {stream.type} stream cannot be decoded: its codec "
                         "parameters are missing (a file cut short, or a codec not built in here)")
    return ctx


CONTAINER_MP4 = "mov,mp4,m4a,3gp,3g2,mj2"
"""FFmpeg's one demuxer for QuickTime, MP4, M4A and 3GP."""

CONTAINER_NAMES = {CONTAINER_MP4: "mp4", "matroska,webm": "webm"}
"""FFmpeg's demuxer names as people name the containers."""


def container_name(container: Any, head: bytes = b"") -> str:
    """The container's name as people say it (`mp4`, not FFmpeg's `mov,mp4,m4a,3gp,3g2,mj2`). FFmpeg reads Matroska
    and WebM with one demuxer, and QuickTime and MP4 with another; the file's first bytes (`head`) tell them apart:
    the EBML DocType, the `ftyp` box's major brand (`qt  `: a QuickTime movie, `mov`)."""
    fmt = str(container.format.name)
    if fmt == "matroska,webm" and ebml_doctype(head) == "matroska":
        return "matroska"
    if fmt == CONTAINER_MP4 and ftyp_brand(head) == "qt":
        return "mov"
    if fmt == CONTAINER_MP4 and (ftyp_brand(head) or "").startswith(("3gp", "3g2")):
        return "3gp"  # a phone's clip or voice memo (its audio was already named so)
    return CONTAINER_NAMES.get(fmt, fmt.split(",")[0])


def ftyp_brand(head: bytes) -> str | None:
    """The major brand (`isom`, `qt`, `M4A`, `avif`, `heic`; trailing spaces dropped) an ISO base media file's leading
    `ftyp` box states; None when the file does not start with one."""
    if len(head) < 12 or head[4:8] != b"ftyp":
        return None
    return head[8:12].decode("latin-1").rstrip(" ") or None


IMAGE_BRANDS = frozenset({"avif", "avis", "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1"})
"""`ftyp` major brands of still images and image sequences (AVIF, HEIF/HEIC): ISO boxes, but no audio or video."""


def ebml_doctype(head: bytes) -> str | None:
    """The DocType (`webm`, `matroska`) an EBML header states in its first 64 bytes; None if it states none."""
    at = head.find(b"\x42\x82", 0, 64)
    if at < 0 or at + 3 > len(head) or not head[at + 2] & 0x80:  # a one-byte size (0x80 | n) is what muxers write
        return None
    n = head[at + 2] & 0x7F
    return head[at + 3:at + 3 + n].rstrip(b"\0").decode("ascii", "replace") or None


def channel_layout(channels: int) -> str:
    """FFmpeg's usual layout for a channel count (`mono`, `stereo`, `5.1`, ...; `10c` past 8): the samples of that
    many channels, interleaved, are read in it (a 5.1 recording read as stereo would play three times as long)."""
    return _LAYOUTS.get(channels, f"{channels}c")


_LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "4.0", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}
