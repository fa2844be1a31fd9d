"""Video facts with PyAV: container, codec, fps, duration, width, height, frame count, whether it has a
sound track (and its codec and rate), and a thumbnail of the first keyframe. Frames are counted by demuxing (no decoding) when the
container does not say; only one keyframe is decoded, after its size passed the pixel limit.
"""

from __future__ import annotations

from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import THUMBNAIL_KEY, Limits, check_deadline
from .containers import av_reason, container_name, moving_pictures, open_input, stream_context
from .image import make_thumbnail


TRUNCATED_FRAMES = 2
TRUNCATED_S = 0.1
"""A WebM or Matroska file whose packets end more than two frame intervals (at least 0.1 s) before the duration its
header declares was cut short: a complete file's last packet ends where its header says, within a packet."""


class VideoExtractor:
    """container, codec, fps, duration, width, height, frames, audio (audioCodec, audioSampleRate); a keyframe thumbnail."""

    name = "pyav-video"
    version = "1.0"
    modalities = ("video/*",)
    requires = ("av", "PIL", "numpy")
    extra = "video"

    def __init__(self, *, limits: Limits | None = None, thumbnail: bool = True, max_packets: int = 1_000_000) -> None:
        self.limits = limits or Limits()
        self.thumbnail = thumbnail
        self.max_packets = max_packets

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        import av

        self.limits.check_size(data, "video")
        if not data:
            raise MediaError("video: empty payload")
        with open_input(data, "video") as container:
            fmt = container.format.name
            if fmt.endswith("_pipe") or fmt == "image2":
                if fmt == "webp_pipe" and animated_webp(data):  # FFmpeg reads no animated WebP: Pillow does
                    raise MediaError("video: the bytes are an animated WebP image, not a video container: send it as "
                                     "image/webp")
                raise MediaError(f"video: the bytes are a still image ({fmt.removesuffix('_pipe')}), not a video")
            pictures = moving_pictures(container)
            if not pictures:
                audio = ""
                if container.streams.audio:
                    cover = ", with a cover picture" if container.streams.video else ""
                    audio = f" (audio only{cover}: send it as audio/*)"
                raise MediaError(f"video: the {container_name(container, data[:64])} container has no video stream{audio}")
            stream = pictures[0]
            name = container_name(container, data[:64])
            ctx = stream_context(stream, "video", name)
            width, height = int(ctx.width or 0), int(ctx.height or 0)
            self.limits.check_pixels(width, height, "video")
            last = index_end(container)  # an MP4 whose index comes first says where its last packet lies
            if last > len(data):
                raise MediaError(f"video: truncated {name}: its index places packets up to byte {last}, the file has "
                                 f"{len(data)} bytes")
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            duration = 0.0
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / 1_000_000
            if duration > self.limits.max_video_seconds:
                raise MediaError(f"video: {duration:.0f} s is over the {self.limits.max_video_seconds:g} s limit")
            out: dict[str, Any] = {
                "container": name,
                "codec": codec_name(ctx),
                "fps": round(fps, 3),
                "duration": round(duration, 3),
                "width": width,
                "height": height,
                "audio": bool(container.streams.audio),
            }
            if container.streams.audio:  # the sound track a speech agent would hear
                sound = stream_context(container.streams.audio[0], "video", name)
                out["audioCodec"] = codec_name(sound)
                if sound.sample_rate:
                    out["audioSampleRate"] = int(sound.sample_rate)
            try:
                picture, turn = self._first_keyframe(container, stream, self.thumbnail)
                container.seek(0)
                if turn:  # a phone's portrait clip is stored landscape with a display matrix: say it as shown
                    out["rotation"] = turn
                    if turn in (90, 270):
                        out["width"], out["height"] = height, width
                if self.thumbnail:
                    out[THUMBNAIL_KEY] = make_thumbnail(upright(picture, turn))
                if stream.frames:
                    out["frames"] = int(stream.frames)
                else:  # counted by demuxing (WebM, Matroska): which also shows where the file really ends
                    out["frames"], end, span = self._count_frames(container, stream)
                    if span and out["frames"] > 1 and abs(out["frames"] / span - fps) > 0.1 * fps:
                        # variable frame rate (a phone's, a screen recorder's): Matroska's and WebM's nominal rate is
                        # its shortest frame's, so the mean rate of the frames shown is the one said (as MP4 says it)
                        out["fps"] = round(out["frames"] / span, 3)
                        fps = out["fps"]
                    slack = max(TRUNCATED_FRAMES / fps if fps else 0.0, TRUNCATED_S)
                    if container.duration is not None and end is not None and end < duration - slack:
                        raise MediaError(f"video: truncated {name}: the container declares {duration:.1f} s, its "
                                         f"packets end at {end:.1f} s")
                    if container.duration is None and end is not None:  # written live (a browser's MediaRecorder):
                        out["duration"] = round(end, 3)  # no duration in the header, the packets say it
                        if end > self.limits.max_video_seconds:
                            raise MediaError(f"video: {end:.0f} s is over the {self.limits.max_video_seconds:g} s limit")
            except av.FFmpegError as exc:
                raise MediaError(f"video: corrupt {ctx.name} stream: {av_reason(exc)}") from None
        return out

    def _first_keyframe(self, container: Any, stream: Any, picture: bool) -> tuple[Any, int]:
        """The first keyframe's display rotation (`display_rotation`), and with `picture` the keyframe as a Pillow
        image (as stored; None without)."""
        stream.codec_context.skip_frame = "NONKEY"
        try:
            for frame in container.decode(stream):
                return (frame.to_image() if picture else None), display_rotation(frame)
        finally:
            stream.codec_context.skip_frame = "DEFAULT"
        raise MediaError("video: no decodable keyframe")

    def _count_frames(self, container: Any, stream: Any) -> tuple[int, float | None, float]:
        """The video stream's packets, where the last packet of any stream ends (seconds from the start; None when
        no packet says), and the time the video stream's own packets cover (seconds; 0 when they do not say)."""
        from array import array

        count = seen = 0
        end: float | None = None
        starts = array("d")  # when each frame is shown (seconds): 8 bytes a frame
        last = (float("-inf"), 0.0)  # the last frame shown: when, and for how long its packet says
        start = container.start_time / 1_000_000 if container.start_time is not None else 0.0
        for packet in container.demux():
            seen += 1
            if packet.pts is not None and packet.time_base is not None:
                stop = float((packet.pts + (packet.duration or 0)) * packet.time_base) - start
                end = stop if end is None else max(end, stop)
            if packet.stream is stream and packet.size:
                count += 1
                if packet.pts is not None and packet.time_base is not None:
                    starts.append(float(packet.pts * packet.time_base))
                    if starts[-1] >= last[0]:
                        last = (starts[-1], float((packet.duration or 0) * packet.time_base))
            if seen % 256 == 0:
                check_deadline("video frame count")
            if seen > self.max_packets:
                raise MediaError(f"video: more than {self.max_packets} packets; counting stopped")
        return count, end, shown_span(starts, last[1])


def shown_span(starts: Any, last: float = 0.0) -> float:
    """How long frames shown at `starts` (seconds, any order) last: first to last, plus the last one shown for the
    median interval or its packet's duration (`last`), the longer (Matroska's blocks carry their nominal duration, or
    none; an APNG's or a GIF's last frame holds as long as it says); 0 for fewer than two frames."""
    import numpy as np

    if len(starts) < 2:
        return 0.0
    t = np.sort(np.frombuffer(starts, dtype=np.float64))
    gaps = np.diff(t)
    return float(t[-1] - t[0] + max(float(np.median(gaps)), last)) if t[-1] > t[0] else 0.0


def animated_webp(data: bytes) -> bool:
    """Is this WebP an animation (an extended header with its animation flag, and an `ANIM` chunk)?"""
    return data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02)


def codec_name(ctx: Any) -> str:
    """The codec a stream is in (`av1`, `mp3`), not the decoder FFmpeg chose for it (`libdav1d`, `mp3float`: an AV1
    clip said `codec: libdav1d`, an MP4's MP3 sound `audioCodec: mp3float`)."""
    codec = getattr(ctx, "codec", None)
    return str(getattr(codec, "canonical_name", None) or ctx.name)


def index_end(container: Any) -> int:
    """Where the last packet a container's index lists ends (bytes from the start; 0 without an index). The last entry
    of each stream: muxers write packets in time order, so that is where each stream's data ends."""
    end = 0
    for stream in container.streams:
        entries = stream.index_entries
        if entries is not None and len(entries):
            last = entries[len(entries) - 1]
            if last.pos >= 0:
                end = max(end, int(last.pos) + int(last.size))
    return end


def display_rotation(frame: Any) -> int:
    """The clockwise quarter turns, in degrees (0, 90, 180, 270), a player applies to show `frame` upright: its display
    matrix (a phone's portrait clip is stored landscape with one; FFmpeg gives the angle counter-clockwise)."""
    try:
        angle = float(frame.rotation or 0)
    except (AttributeError, TypeError, ValueError):
        return 0
    return int(round(-angle / 90.0)) % 4 * 90


def upright(picture: Any, turn: int) -> Any:
    """A Pillow image turned `turn` degrees clockwise (a `display_rotation`)."""
    from PIL import Image

    op = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}.get(turn)
    return picture.transpose(op) if op is not None else picture
