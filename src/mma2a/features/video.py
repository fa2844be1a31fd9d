"""Video facts with PyAV: container, codec, fps, duration, width, height, frame count, whether it has a
sound track (and its codec and rate), and a thumbnail of the first keyframe. Frames are counted by demuxing (no decoding) when the
container does not say; only one keyframe is decoded, after its size passed the pixel limit.
"""

from __future__ import annotations

from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import THUMBNAIL_KEY, Limits, check_deadline
from .containers import av_reason, container_name, open_input
from .image import make_thumbnail


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
                raise MediaError(f"video: the bytes are a still image ({fmt.removesuffix('_pipe')}), not a video")
            if not container.streams.video:
                audio = " (audio only: send it as audio/*)" if container.streams.audio else ""
                raise MediaError(f"video: the {container_name(container)} container has no video stream{audio}")
            stream = container.streams.video[0]
            ctx = stream.codec_context
            width, height = int(ctx.width or 0), int(ctx.height or 0)
            self.limits.check_pixels(width, height, "video")
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            duration = 0.0
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / 1_000_000
            if duration > self.limits.max_video_seconds:
                raise MediaError(f"video: {duration:.0f} s is over the {self.limits.max_video_seconds:g} s limit")
            out: dict[str, Any] = {
                "container": container_name(container, data[:64]),
                "codec": ctx.name,
                "fps": round(fps, 3),
                "duration": round(duration, 3),
                "width": width,
                "height": height,
                "audio": bool(container.streams.audio),
            }
            if container.streams.audio:  # the sound track a speech agent would hear
                sound = container.streams.audio[0].codec_context
                out["audioCodec"] = sound.name
                if sound.sample_rate:
                    out["audioSampleRate"] = int(sound.sample_rate)
            try:
                if self.thumbnail:
                    out[THUMBNAIL_KEY] = self._keyframe_thumbnail(container, stream)
                    container.seek(0)
                out["frames"] = int(stream.frames) if stream.frames else self._count_frames(container, stream)
            except av.FFmpegError as exc:
                raise MediaError(f"video: corrupt {ctx.name} stream: {av_reason(exc)}") from None
        return out

    def _keyframe_thumbnail(self, container: Any, stream: Any) -> Any:
        stream.codec_context.skip_frame = "NONKEY"
        try:
            for frame in container.decode(stream):
                return make_thumbnail(frame.to_image())
        finally:
            stream.codec_context.skip_frame = "DEFAULT"
        raise MediaError("video: no decodable keyframe")

    def _count_frames(self, container: Any, stream: Any) -> int:
        count = 0
        for packet in container.demux(stream):
            if packet.size:
                count += 1
            if count % 256 == 0:
                check_deadline("video frame count")
            if count > self.max_packets:
                raise MediaError(f"video: more than {self.max_packets} packets; counting stopped")
        return count
